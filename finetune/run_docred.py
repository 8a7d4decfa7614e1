"""Fine-tune a (CorefBERT) encoder on DocRED / Re-DocRED document-level relation extraction.

Reads the official DocRED JSON files and rel_info.json; writes ``all_results.json`` (F1, Ign F1, the dev
threshold), ``log.jsonl``, the best model in ``output_dir/best`` and predictions in the submission format
(``result.json``: ``[{title, h_idx, t_idx, r}]``). The threshold chosen on dev is reused on test.

One CPU / one GPU:
    python finetune/run_docred.py --model_name_or_path CKPT --rel_info_file rel_info.json \\
        --train_file train_annotated.json --validation_file dev.json --test_file test.json \\
        --do_train --do_eval --do_predict --output_dir out/docred
N GPUs:
    accelerate launch --num_processes N finetune/run_docred.py ...same flags...
Predict with a fine-tuned model (its relation classes and dev threshold travel with it; --train_file is
only read, for Ign F1, which is left out without it):
    python finetune/run_docred.py --model_name_or_path out/docred/best --test_file test.json \\
        --train_file train_annotated.json --do_predict --output_dir out/docred_test
"""

from corefbert.tasks.registry import TASKS

main = TASKS["docred"].main

if __name__ == "__main__":
    main()
