"""The ablation command (``python pretrain/run_ablation.py``, ``corefbert ablation``): arguments in,
:func:`corefbert.ablation.study.run_study` out (:func:`corefbert.ablation.curve_run.run_curve` with
``--curve_tokens``). A preset's config (``ablation_cpu``, ``ablation_gpu``, shipped
in :mod:`corefbert.configs`) gives the defaults unless ``--config`` is given. The launch commands are in
``pretrain/run_ablation.py``'s docstring."""

from __future__ import annotations

import os
import sys

from corefbert.ablation.curve_run import run_curve
from corefbert.ablation.study import AblationArguments, run_study
from corefbert.argparser import load_yaml_config, parse_args, peek_argument
from corefbert.configs import config_path
from corefbert.corpus.prepare import CorpusArguments
from corefbert.errors import CorefBertError, cli_entry
from corefbert.pretraining.pretraining_args import PretrainingArguments, default_backbone

PRESETS = ("cpu", "gpu")
# The script's name, which messages have always shown (docs/guides/hardening.md's bad-input table pins them).
PROG = "run_ablation.py"


def parse(argv: list[str] | None = None):
    """``(study, pretraining, corpus)`` arguments: the preset's YAML as defaults unless ``--config`` is given."""
    argv = list(sys.argv[1:] if argv is None else argv)
    preset = peek_argument(argv, "preset") or "cpu"
    if preset not in PRESETS:
        raise CorefBertError(f"--preset {preset!r} is not one of {', '.join(PRESETS)}")
    has_config = "--config" in argv or any(a.startswith("--config=") for a in argv)
    defaults = {} if has_config else load_yaml_config(str(config_path(f"ablation_{preset}")))
    study, train_args, corpus_args = parse_args([AblationArguments, PretrainingArguments, CorpusArguments], argv,
                                                prog=PROG, defaults=defaults)
    if train_args.dataset_dir and corpus_args.train_file:
        raise CorefBertError("--dataset_dir and --train_file both given: pass a prepared corpus or text, not both")
    if train_args.model_name_or_path is None:
        train_args.model_name_or_path = default_backbone()
    return study, train_args, corpus_args


@cli_entry
def main(argv: list[str] | None = None) -> dict:
    """Run (or collect) the study of the command line ``argv`` (default ``sys.argv[1:]``)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    study, train_args, corpus_args = parse(argv)
    if study.curve_tokens is not None:
        return run_curve(study, train_args, corpus_args)
    return run_study(study, train_args, corpus_args)
