"""``corefbert <command>``: one command over every entry point, each dispatching to the same ``main(argv)``
that its script or ``python -m`` module runs; ``corefbert finetune <task>`` to the task registry's entry
(:mod:`corefbert.tasks.registry`), which the scripts ``finetune/run_<task>.py`` run too.

    corefbert --help                          the commands
    corefbert prepare --train_file 'wiki/*' --model_name_or_path CKPT --output_dir corpus/
    corefbert pretrain [--config "$(corefbert config-path corefbert_base)" ...]
    corefbert finetune glue --model_name_or_path CKPT --task_name rte --data_dir glue/RTE --do_train ...
    corefbert convert released/ converted/    (or --official_dir released/ --output_dir converted/)
    accelerate launch -m corefbert.cli pretrain ...          several processes

Every command is a function of the package, so an installed package needs no checkout. Arguments after the
command go to that ``main`` unchanged; its usage line then names it ``corefbert <command>`` (``invoked_as``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from corefbert.argparser import invoked_as
from corefbert.errors import CorefBertError, cli_entry
from corefbert.tasks.registry import TASKS, TaskEntry


@dataclass(frozen=True)
class Command:
    """A command: its one-line summary and the module whose ``main(argv)`` runs it."""

    summary: str
    module: str | None = None  # None only for ``finetune``, which dispatches on its task (FINETUNE_TASKS)

    def load(self) -> Callable[[list[str]], object]:  # imported on use: each command loads only what it needs
        return importlib.import_module(self.module).main


COMMANDS = {
    "prepare": Command("raw text -> a prepared (packed, cached) pretraining corpus", "corefbert.corpus.cli"),
    "pretrain": Command("pretrain CorefBERT (MLM + MRP); the demo without arguments",
                        "corefbert.pretraining.cli"),
    "ablation": Command("the paper's ablation study: arms x seeds, probes, report", "corefbert.ablation.cli"),
    "frozen-probe": Command("the frozen-feature coreference probe of a checkpoint: mention-pair AUC/F1 per "
                            "layer", "corefbert.ablation.frozen_probe"),
    "finetune": Command("fine-tune on a benchmark: corefbert finetune <task> ... (see corefbert finetune "
                        "--help)"),
    "convert": Command("a released CorefBERT checkpoint -> a corefbert pretraining checkpoint",
                       "corefbert.pretraining.convert"),
    "resolve": Command("coreference clusters of raw text with an end-to-end model",
                       "corefbert.tasks.coref_e2e.resolve"),
    "pronoun-pairs": Command("pronoun-replacement entailment pairs from CoNLL-2012 files",
                             "corefbert.tasks.pronoun_pairs.builder"),
    "plot": Command("accuracy curves of a pretraining run from its log.jsonl",
                    "corefbert.pretraining.plotting"),
    "slot-fill": Command("computed-slot fill of a prepared corpus, length-grouped vs random batches",
                         "corefbert.pretraining.length_grouping"),
    "config-path": Command("where a shipped config is (pretraining recipes, accelerate configs); all of them "
                           "without a name", "corefbert.configs"),
}
#: The fine-tuning tasks of ``corefbert finetune <task>``: the one registry of task classes, whose entries run
#: the same way (:meth:`corefbert.tasks.registry.TaskEntry.main`) as the scripts ``finetune/run_<task>.py``.
FINETUNE_TASKS = TASKS


def usage(finetune: bool = False) -> str:
    """The command list (``corefbert --help``), or with ``finetune`` the task list."""
    what, prog, table = ("task", "corefbert finetune <task>", FINETUNE_TASKS) if finetune else \
        ("command", "corefbert <command>", COMMANDS)
    entries = {name: item.summary for name, item in table.items()}
    width = max(map(len, entries)) + 2
    listing = "\n".join(f"  {name:<{width}}{summary}" for name, summary in entries.items())
    return f"usage: {prog} [arguments]\n\n{what}s:\n{listing}\n\n`{prog} --help` shows a {what}'s arguments."


def resolve_command(argv: list[str]) -> tuple[Command | TaskEntry | None, list[str], str | None]:
    """(the command, its arguments, or the help text to print instead) for ``corefbert`` + ``argv``."""
    if not argv or argv[0] in ("-h", "--help"):
        return None, [], usage()
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise CorefBertError(f"unknown command {name!r}; the commands are {', '.join(COMMANDS)} "
                             "(corefbert --help)")
    if name != "finetune":
        return COMMANDS[name], rest, None
    if not rest or rest[0] in ("-h", "--help"):
        return None, [], usage(finetune=True)
    task = rest[0]
    if task not in FINETUNE_TASKS:
        raise CorefBertError(f"unknown task {task!r}; the tasks are {', '.join(FINETUNE_TASKS)} "
                             "(corefbert finetune --help)")
    return FINETUNE_TASKS[task], rest[1:], None


@cli_entry
def main(argv: list[str] | None = None) -> None:
    """``corefbert <command> ...``. Returns nothing: the console script exits with the return value, and a
    command's report object would make every successful run exit with status 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest, text = resolve_command(argv)
    if text is not None:
        print(text)
        return
    with invoked_as(" ".join(["corefbert", *argv[:len(argv) - len(rest)]])):  # corefbert finetune glue
        command.load()(rest)


if __name__ == "__main__":
    main()
