"""Fine-tune and evaluate a BERT/RoBERTa/CorefBERT encoder on MRQA (JSONL) or SQuAD v1.1 (JSON).

Standard start/end head (``AutoModelForQuestionAnswering``; the saved model loads with it), up to four
gold spans per window, n-best decoding with ``--max_answer_length``, SQuAD EM/F1. The file format is
detected from the name or the first line, or set with ``--data_format squad|mrqa``. Paper defaults:
LR 3e-5, 2 epochs, batch 32, windows of 512 tokens with a stride of 128.

One CPU (or one GPU)::

    python finetune/run_mrqa.py --model_name_or_path CKPT --train_file SQuAD.jsonl.gz \
        --validation_file SQuAD-dev.jsonl.gz --do_train --do_eval --output_dir out/squad

Without a dev file, ``--validation_split_percentage 10`` holds out 10% of the training contexts
(seeded by ``--split_seed``). N GPUs: ``accelerate launch --num_processes N finetune/run_mrqa.py ...``.
Writes ``all_results.json`` and ``eval_predictions.json`` ``{qid: answer}`` (the official format).
"""

from corefbert.tasks.registry import TASKS

main = TASKS["mrqa"].main

if __name__ == "__main__":
    main()
