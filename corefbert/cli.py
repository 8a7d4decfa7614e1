"""``corefbert <command>``: one command over every entry point, each dispatching to the same ``main(argv)``
that its script or ``python -m`` module runs.

    corefbert --help                          the commands
    corefbert prepare --train_file wiki/ --output_dir corpus/
    corefbert pretrain [--config pretrain/configs/corefbert_base.yaml ...]
    corefbert finetune glue --model_name_or_path CKPT --task_name rte --data_dir glue/RTE --do_train ...
    corefbert convert --model_dir released/ --output_dir converted/
    accelerate launch -m corefbert.cli pretrain ...          several processes

``prepare``, ``pretrain``, ``ablation`` and ``finetune <task>`` run the repository's scripts
(``pretrain/*.py``, ``finetune/run_*.py``), found beside the package; the other commands are modules of the
package. Arguments after the command go to that ``main`` unchanged (``--help`` included).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corefbert.errors import CorefBertError, cli_entry

REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Command:
    """Where a command's ``main(argv)`` lives: ``module`` (a dotted name) or ``script`` (below the repository)."""

    summary: str
    module: str | None = None
    script: str | None = None

    def load(self) -> Callable[[list[str]], object]:
        if self.module is not None:
            return importlib.import_module(self.module).main
        path = REPOSITORY / self.script
        if not path.is_file():
            raise CorefBertError(
                f"{self.script} is not beside the installed package; run this command from a "
                "checkout of the repository (pip install -e .)",
                path=path,
            )
        # A unique module name per script: two scripts loaded in one process never share a module object.
        name = "corefbert_script_" + path.stem
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module.main


COMMANDS = {
    "prepare": Command(
        "raw text -> a prepared (packed, cached) pretraining corpus", script="pretrain/prepare_corpus.py"
    ),
    "pretrain": Command(
        "pretrain CorefBERT (MLM + MRP); the demo without arguments", script="pretrain/run_mrp.py"
    ),
    "ablation": Command(
        "the paper's ablation study: arms x seeds, probes, report", script="pretrain/run_ablation.py"
    ),
    "finetune": Command(
        "fine-tune on a benchmark: corefbert finetune <task> ... (see corefbert finetune --help)"
    ),
    "convert": Command(
        "a released CorefBERT checkpoint -> a corefbert pretraining checkpoint",
        module="corefbert.pretraining.convert",
    ),
    "resolve": Command(
        "coreference clusters of raw text with an end-to-end model",
        module="corefbert.tasks.coref_e2e.resolve",
    ),
    "pronoun-pairs": Command(
        "pronoun-replacement entailment pairs from CoNLL-2012 files",
        module="corefbert.tasks.pronoun_pairs.builder",
    ),
    "plot": Command(
        "accuracy curves of a pretraining run from its log.jsonl", module="corefbert.pretraining.plotting"
    ),
    "slot-fill": Command(
        "computed-slot fill of a prepared corpus, length-grouped vs random batches",
        module="corefbert.pretraining.length_grouping",
    ),
}
FINETUNE_TASKS = {
    "glue": "GLUE from the official TSV files",
    "quoref": "QUOREF extractive QA (multi-span)",
    "mrqa": "MRQA 2019 / SQuAD v1.1 extractive QA",
    "docred": "DocRED document-level relation extraction",
    "fever": "FEVER fact verification (BERT-concat or KGAT)",
    "coref": "pronoun coreference (DPR/WSC/GAP/...): MLM or copy-head candidate scoring",
    "babi": "bAbI-1k with the GA reader and Coref-GRU",
    "coref-e2e": "end-to-end coreference (Lee et al. 2017) on CoNLL-2012 files",
    "pronoun-pairs": "pronoun-pair entailment classifiers",
}


def finetune_command(task: str) -> Command:
    return Command(FINETUNE_TASKS[task], script=f"finetune/run_{task.replace('-', '_')}.py")


def _listing(title: str, entries: dict[str, str]) -> str:
    width = max(map(len, entries)) + 2
    return title + "\n" + "\n".join(f"  {name:<{width}}{summary}" for name, summary in entries.items())


def usage() -> str:
    return (
        _listing(
            "usage: corefbert <command> [arguments]\n\ncommands:",
            {name: c.summary for name, c in COMMANDS.items()},
        )
        + "\n\n`corefbert <command> --help` shows a command's arguments."
    )


def finetune_usage() -> str:
    return (
        _listing("usage: corefbert finetune <task> [arguments]\n\ntasks:", FINETUNE_TASKS)
        + "\n\n`corefbert finetune <task> --help` shows a task's arguments."
    )


def resolve_command(argv: list[str]) -> tuple[Command | None, list[str], str | None]:
    """(the command, its arguments, or the help text to print instead) for ``corefbert`` + ``argv``."""
    if not argv or argv[0] in ("-h", "--help"):
        return None, [], usage()
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise CorefBertError(
            f"unknown command {name!r}; the commands are {', '.join(COMMANDS)} (corefbert --help)"
        )
    if name != "finetune":
        return COMMANDS[name], rest, None
    if not rest or rest[0] in ("-h", "--help"):
        return None, [], finetune_usage()
    task = rest[0]
    if task not in FINETUNE_TASKS:
        raise CorefBertError(
            f"unknown task {task!r}; the tasks are {', '.join(FINETUNE_TASKS)} (corefbert finetune --help)"
        )
    return finetune_command(task), rest[1:], None


@cli_entry
def main(argv: list[str] | None = None) -> None:
    """``corefbert <command> ...``. Returns nothing: the console script exits with the return value, and a
    command's report object would make every successful run exit with status 1."""
    command, rest, text = resolve_command(list(sys.argv[1:] if argv is None else argv))
    if text is not None:
        print(text)
        return
    command.load()(rest)


if __name__ == "__main__":
    main()
