"""Fine-tune a (Coref)BERT/RoBERTa checkpoint on a GLUE task from the official TSV files.

One CPU or GPU:
    python finetune/run_glue.py --model_name_or_path CKPT --task_name rte --data_dir glue/RTE \
        --do_train --do_eval --output_dir out/rte
N GPUs (or ``ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2`` on CPU):
    accelerate launch finetune/run_glue.py --config my_glue.yaml
Test predictions in the GLUE submission format (``<TASK>.tsv``; MNLI writes MNLI-m.tsv and MNLI-mm.tsv):
    python finetune/run_glue.py --model_name_or_path out/rte/best --task_name rte --data_dir glue/RTE \
        --do_predict --output_dir out/rte-test
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from corefbert.arguments import parse_args
from corefbert.errors import cli_entry
from corefbert.finetuning import FinetuningArguments, report_results, run_finetuning
from corefbert.tasks.glue import GlueTask, glue_files


@dataclass
class GlueArguments:
    task_name: str = field(metadata={"help": "cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte or wnli."})
    data_dir: str | None = field(
        default=None, metadata={"help": "Directory with the official train.tsv/dev.tsv/test.tsv "
                                        "(MNLI: dev_matched.tsv, dev_mismatched.tsv, test_matched.tsv, ...)."})
    train_file: str | None = field(default=None, metadata={"help": "Training TSV (overrides --data_dir)."})
    validation_file: str | None = field(
        default=None, metadata={"help": "Dev TSV (MNLI: the matched one; overrides --data_dir)."})
    validation_mismatched_file: str | None = field(default=None, metadata={"help": "MNLI dev_mismatched TSV."})
    test_file: str | None = field(default=None, metadata={"help": "Test TSV (MNLI: the matched one)."})
    test_mismatched_file: str | None = field(default=None, metadata={"help": "MNLI test_mismatched TSV."})
    max_seq_length: int = field(default=128, metadata={"help": "Longer pairs are truncated (longest first)."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})


def _explicit(path: str | None, mismatched: str | None = None) -> list | None:
    if path is None and mismatched is None:
        return None
    return [None if path is None else (path, ""), None if mismatched is None else (mismatched, "mm_")]


@cli_entry
def main(argv: list[str] | None = None) -> dict[str, float]:
    glue_args, args = parse_args((GlueArguments, FinetuningArguments), argv, prog="run_glue.py")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    files = glue_files(
        glue_args.task_name, glue_args.data_dir,
        {"train": _explicit(glue_args.train_file),
         "eval": _explicit(glue_args.validation_file, glue_args.validation_mismatched_file),
         "predict": _explicit(glue_args.test_file, glue_args.test_mismatched_file)},
        wanted={"train": args.do_train, "eval": args.do_eval, "predict": args.do_predict},
    )
    tokenizer = None
    if glue_args.tokenizer_name:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(glue_args.tokenizer_name)
    task = GlueTask(glue_args.task_name, args.model_name_or_path, files, tokenizer=tokenizer,
                    max_seq_length=glue_args.max_seq_length)
    return report_results(run_finetuning(task, args))


if __name__ == "__main__":
    main(sys.argv[1:])
