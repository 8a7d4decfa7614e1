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
        --train_file fever_symmetric.jsonl --split_seed 13 --do_train --do_eval --output_dir out/concat
N GPUs:
    accelerate launch --num_processes N finetune/run_fever.py ...same flags...
"""

from __future__ import annotations

import argparse

from corefbert.arguments import load_yaml_config, parse_args
from corefbert.errors import CorefBertError, cli_entry
from corefbert.finetuning import FinetuningArguments, check_data_flags, report_results, run_finetuning
from corefbert.tasks.fever import FeverArguments, FeverTask

# Paper settings (KGAT setup): 3 epochs, LR 2e-5 for BERT-concat, 5e-5 for KGAT; 5 sentences of 130 tokens.
DEFAULTS = {
    "concat": {"learning_rate": 2e-5, "num_train_epochs": 3.0},
    "kgat": {"learning_rate": 5e-5, "num_train_epochs": 3.0, "per_device_train_batch_size": 8,
             "gradient_accumulation_steps": 4, "per_device_eval_batch_size": 16},
}


def _model_type(argv: list[str] | None) -> str:
    """--model_type from the flags or the --config file, before the full parse picks the defaults."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model_type", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    if known.model_type is None and known.config is not None:
        known.model_type = load_yaml_config(known.config).get("model_type")
    return known.model_type or "concat"


@cli_entry
def main(argv: list[str] | None = None) -> dict[str, float]:
    model_type = _model_type(argv)
    if model_type not in DEFAULTS:
        raise CorefBertError(f"--model_type {model_type!r} is not one of {', '.join(DEFAULTS)}")
    data_args, train_args = parse_args((FeverArguments, FinetuningArguments), argv, prog="run_fever.py",
                                       defaults=DEFAULTS[model_type])
    check_data_flags(train_args, data_args.train_file, data_args.validation_file, data_args.test_file,
                     can_split=data_args.split_seed is not None)
    task = FeverTask(data_args, train_args.model_name_or_path, seed=train_args.seed)
    return report_results(run_finetuning(task, train_args))


if __name__ == "__main__":
    main()
