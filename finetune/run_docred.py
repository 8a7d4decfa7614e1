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

from __future__ import annotations

from corefbert.arguments import parse_args
from corefbert.errors import cli_entry
from corefbert.finetuning import FinetuningArguments, check_data_flags, report_results, run_finetuning
from corefbert.tasks.docred import DocredArguments, DocredTask

# The paper's DocRED settings (appendix): LR 4e-5, batch 32; evaluation every few epochs keeps the best.
DEFAULTS = {"learning_rate": 4e-5, "per_device_train_batch_size": 32, "per_device_eval_batch_size": 8}


@cli_entry
def main(argv: list[str] | None = None) -> dict[str, float]:
    data_args, train_args = parse_args((DocredArguments, FinetuningArguments), argv, prog="run_docred.py",
                                       defaults=DEFAULTS)
    check_data_flags(train_args, data_args.train_file, data_args.validation_file, data_args.test_file,
                     can_split=data_args.split_seed is not None, kind="official DocRED JSON")
    task = DocredTask(data_args, train_args.model_name_or_path, seed=train_args.seed)
    return report_results(run_finetuning(task, train_args))


if __name__ == "__main__":
    main()
