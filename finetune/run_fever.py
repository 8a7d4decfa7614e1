"""Fine-tune a (CorefBERT) encoder on FEVER fact verification: BERT-concat or KGAT.

Inputs: the official FEVER JSONL with evidence text from --wiki_pages_dir or a retrieved-evidence file
(``[[page, sentence, text, score], ...]`` per claim, KGAT's form), or claim/evidence pairs (FEVER-Symmetric).
Writes ``all_results.json`` (accuracy, macro F1, FEVER score when gold evidence sets are known),
``log.jsonl``, the best model in ``output_dir/best`` and ``predictions.jsonl`` in the shared-task submission
format (``{id, predicted_label, predicted_evidence}``).

One CPU / one GPU:
    python finetune/run_fever.py --model_name_or_path CKPT --model_type kgat \\
        --train_file bert_train.json --validation_file bert_dev.json --do_train --do_eval --output_dir out/kgat
FEVER-Symmetric pairs, seeded 80/20 split:
    python finetune/run_fever.py --model_name_or_path CKPT --model_type concat \\
        --train_file fever_symmetric.jsonl --validation_split_percentage 20 --split_seed 13 \\
        --do_train --do_eval --output_dir out/concat
N GPUs:
    accelerate launch --num_processes N finetune/run_fever.py ...same flags...
"""

from corefbert.tasks.registry import TASKS

main = TASKS["fever"].main

if __name__ == "__main__":
    main()
