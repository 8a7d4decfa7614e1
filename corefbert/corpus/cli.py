"""The corpus command (``corefbert prepare``, ``pretrain/prepare_corpus.py``, whose docstring has the launch
commands): raw text -> a prepared corpus, by :func:`corefbert.corpus.prepare.prepare_corpus`."""

from __future__ import annotations

from corefbert.argparser import parse_args
from corefbert.corpus.prepare import PrepareArguments, prepare_corpus
from corefbert.errors import CorefBertError, cli_entry

# The script's name in messages (docs/guides/hardening.md's bad-input table pins them).
PROG = "prepare_corpus.py"


@cli_entry
def main(argv: list[str] | None = None) -> None:
    """Prepare the corpus of the command line ``argv`` (default ``sys.argv[1:]``) into ``--output_dir``."""
    (args,) = parse_args([PrepareArguments], argv, prog=PROG)
    if not args.output_dir:
        raise CorefBertError("pass --output_dir: the prepared corpus is saved there")
    data = prepare_corpus(args)
    print(f"saved {', '.join(f'{name}: {len(split)} sequences' for name, split in data.items())} "
          f"to {args.output_dir}; load it with datasets.load_from_disk")
