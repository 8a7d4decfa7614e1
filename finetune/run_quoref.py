"""Fine-tune and evaluate a BERT/RoBERTa/CorefBERT encoder on QUOREF (official SQuAD-style JSON).

The paper's model: the encoder, one extra Transformer layer ("reasoning layer"), start/end and
answer-count heads; ``--no_reasoning_layer --no_count_head`` is plain BERT QA. Paper defaults: LR 2e-5,
6 epochs, batch 32, windows of 512 tokens with a stride of 128.

One CPU (or one GPU)::

    python finetune/run_quoref.py --model_name_or_path CKPT --train_file quoref-train-v0.1.json \
        --validation_file quoref-dev-v0.1.json --do_train --do_eval --output_dir out/quoref

N GPUs: ``accelerate launch --num_processes N finetune/run_quoref.py ...`` (the same flags).
Writes ``all_results.json`` (EM/F1 by the official DROP-style metric), ``eval_predictions.json``
``{question_id: [answer strings]}`` and, with ``--do_predict --test_file``, ``predict_predictions.json``.
"""

from corefbert.tasks.registry import TASKS

main = TASKS["quoref"].main

if __name__ == "__main__":
    main()
