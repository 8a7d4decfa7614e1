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
Predict with a fine-tuned model (its relation classes and dev threshold travel with it):
    python finetune/run_docred.py --model_name_or_path out/docred/best --test_file test.json \\
        --do_predict --output_dir out/docred_test
"""

from __future__ import annotations

from corefbert.arguments import parse_args
from corefbert.errors import CorefBertError, cli_entry
from corefbert.finetuning import FinetuningArguments, run_finetuning
from corefbert.tasks.docred import DocredArguments, DocredTask

# The paper's DocRED settings (appendix): LR 4e-5, batch 32; evaluation every few epochs keeps the best.
DEFAULTS = {"learning_rate": 4e-5, "per_device_train_batch_size": 32, "per_device_eval_batch_size": 8}


@cli_entry
def main(argv: list[str] | None = None) -> dict[str, float]:
    data_args, train_args = parse_args((DocredArguments, FinetuningArguments), argv, prog="run_docred.py",
                                       defaults=DEFAULTS)
    if train_args.do_train and not data_args.train_file:
        raise CorefBertError("--do_train needs --train_file (official DocRED JSON)")
    if train_args.do_predict and not data_args.test_file:
        raise CorefBertError("--do_predict needs --test_file (official DocRED JSON)")
    if train_args.do_eval and not (data_args.validation_file or data_args.split_seed is not None):
        raise CorefBertError("--do_eval needs --validation_file, or --split_seed to hold out part of --train_file")
    task = DocredTask(data_args, train_args.model_name_or_path, seed=train_args.seed)
    results = run_finetuning(task, train_args)
    for key in sorted(results):
        print(f"{key} = {results[key]}")
    return results


if __name__ == "__main__":
    main()
