"""The pretraining command (``accelerate launch pretrain/run_mrp.py``, ``corefbert pretrain``): arguments in,
:func:`corefbert.pretraining.run.run_pretraining` out.

With no arguments it runs the demo: the shipped demo config (``corefbert/configs/pretraining/demo.yaml``) and
demo corpus. Flags override ``--config``; without ``--config`` the demo settings are the defaults.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from corefbert.argparser import load_yaml_config, parse_args
from corefbert.configs import config_path
from corefbert.corpus.prepare import CorpusArguments, PrepareArguments
from corefbert.errors import CorefBertError, cli_entry
from corefbert.pretraining.pretraining_args import PretrainingArguments, default_backbone

DEMO_CORPUS = Path(__file__).resolve().parents[1] / "resources" / "demo_corpus.txt"
# The script's name, which messages have always shown (docs/guides/hardening.md's bad-input table pins them).
PROG = "run_mrp.py"


def parse(argv: list[str] | None = None) -> tuple[PretrainingArguments, PrepareArguments]:
    """Parse flags (and ``--config``); without ``--config`` the demo config gives the defaults."""
    argv = list(sys.argv[1:] if argv is None else argv)
    has_config = "--config" in argv or any(a.startswith("--config=") for a in argv)
    defaults = {} if has_config else load_yaml_config(str(config_path("demo")))
    train_args, corpus_args = parse_args([PretrainingArguments, CorpusArguments], argv, prog=PROG,
                                         defaults=defaults)
    if train_args.dataset_dir and corpus_args.train_file:
        raise CorefBertError("--dataset_dir and --train_file both given: pass a prepared corpus or text, not both")
    if train_args.model_name_or_path is None:
        train_args.model_name_or_path = default_backbone()
    elif not os.path.isdir(train_args.model_name_or_path) and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise CorefBertError("model folder not found (and HF_HUB_OFFLINE=1); give a local BERT/RoBERTa "
                             "checkpoint folder", path=train_args.model_name_or_path)
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
    """Pretrain with the command line ``argv`` (default ``sys.argv[1:]``); returns the run's final metrics."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    train_args, prepare_args = parse(argv)
    # Deferred: --help and bad flags answer before torch and transformers load.
    from corefbert.pretraining.run import run_pretraining

    return run_pretraining(train_args, prepare_args)
