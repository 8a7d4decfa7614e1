"""The fine-tuning tasks, registered once: ``corefbert finetune <task>``, its task list and the
``finetune/run_<task>.py`` scripts are derived from this table.

Adding a task is a :class:`~corefbert.tasks.base.FinetuningTask` subclass in its family's folder and one entry
here (a family with variants registers the family class: its ``variant_for`` picks). Each entry names its
class as ``module:Class``, imported when the task runs: ``corefbert --help`` imports no task (nor torch).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskEntry:
    """A fine-tuning task: its command name, one-line summary and task class (``module:Class``)."""

    name: str  # corefbert finetune <name>
    summary: str
    task_class: str

    @property
    def script(self) -> str:
        """The script that runs the same task from a checkout, ``finetune/<script>``; also the program name its
        messages show when it runs as itself."""
        return f"run_{self.name.replace('-', '_')}.py"

    def task(self) -> type:
        """The registered task class (its module imported now)."""
        module, _, name = self.task_class.partition(":")
        return getattr(importlib.import_module(module), name)

    def main(self, argv: list[str] | None = None) -> dict[str, float]:
        """Run the task with the command line ``argv`` (default ``sys.argv[1:]``): the whole CLI of
        ``corefbert finetune <name>`` and of its script (:func:`corefbert.tasks.base.main`)."""
        from corefbert.tasks.base import main  # torch and transformers: only for the task that runs

        return main(self.task(), argv, prog=self.script)

    def load(self):
        """What runs the command, as :meth:`corefbert.cli.Command.load` gives it for the other commands."""
        return self.main


TASKS: dict[str, TaskEntry] = {entry.name: entry for entry in (
    TaskEntry("glue", "GLUE from the official TSV files", "corefbert.tasks.glue:GlueTask"),
    TaskEntry("quoref", "QUOREF extractive QA (multi-span)", "corefbert.tasks.qa.quoref:QuorefTask"),
    TaskEntry("mrqa", "MRQA 2019 / SQuAD v1.1 extractive QA", "corefbert.tasks.qa.mrqa:MRQATask"),
    TaskEntry("docred", "DocRED document-level relation extraction", "corefbert.tasks.docred:DocredTask"),
    TaskEntry("fever", "FEVER fact verification (BERT-concat or KGAT)", "corefbert.tasks.fever.task:FeverTask"),
    TaskEntry("coref", "pronoun coreference (DPR/WSC/GAP/...): MLM or copy-head candidate scoring",
              "corefbert.tasks.coref.task:CorefTask"),
    TaskEntry("babi", "bAbI-1k with the GA reader and Coref-GRU", "corefbert.tasks.babi.task:BabiTask"),
    TaskEntry("coref-e2e", "end-to-end coreference (Lee et al. 2017) on CoNLL-2012 files",
              "corefbert.tasks.coref_e2e.task:CorefE2ETask"),
    TaskEntry("pronoun-pairs", "pronoun-pair entailment classifiers",
              "corefbert.tasks.pronoun_pairs.task:PronounPairsTask"),
)}
