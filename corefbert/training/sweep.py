"""Sweeps: grid points x seeds of ordinary training runs, each in its own folder (the ablation study's and the
bAbI table's, docs/contracts.md, "Sweeps").

:func:`run_one` keeps a **finished** run (every file of ``rules.finished`` there) whose settings match its
record (the sweep's ``rules.marker``, else its newest checkpoint's), refuses a changed setting in one line
(but ``rules.may_ignore``), continues it on a change of ``rules.continues``, evaluates it when it lacks a
``wanted`` result; a **started** run (a non-empty folder) resumes; any other trains. The runner knows nothing
of what a run trains: each run brings its settings and a ``train(resume)`` callable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefbert.errors import CorefBertError
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import json_value, read_json, read_record
from corefbert.training.checkpoints.folders import list_checkpoints, read_trainer_state
from corefbert.training.training_args import ABSENT, EXACT_SETTINGS, changed_settings, refuse_changed_settings

RESULTS = "all_results.json"
#: What :func:`run_one` says happened to a run (also ``evaluated``, counted only when it happens).
OUTCOMES = ("trained", "resumed", "finished_before")


@dataclass(frozen=True)
class SweepRun:
    """One grid point at one seed: where it runs, what decides its result, and how to train it."""

    label: str  # how messages name the run: "bAbI task 1, seed 42"
    output_dir: Path
    settings: dict  # JSON-able; compared with a finished run's record, and what the marker holds
    train: Callable[[bool], dict | None]  # train(resume) -> its results; resume: from its latest checkpoint
    wanted: tuple[str, ...] = ()  # results a finished run must hold to be kept (bAbI with --do_eval: eval_accuracy)
    evaluate: Callable[[], dict | None] | None = None  # a finished run's results, evaluated again; with ``wanted``


@dataclass(frozen=True)
class SweepRules:
    """How a sweep treats the run folders it finds (see the module docstring)."""

    finished: tuple[str, ...] = (RESULTS,)  # files a finished run holds (a run trained elsewhere has them too)
    marker: str | None = None  # the sweep's record, written last; None: the newest checkpoint's record
    may_ignore: frozenset[str] = frozenset()  # a finished run is kept although these differ
    continues: tuple[str, ...] = ()  # a change of these continues a finished run from its latest checkpoint
    arguments_file: str = "finetuning_args.json"  # without a marker: where ``continues`` are read back
    keep_finished: bool = True  # False: every run trains as told (no skip, no resume)
    ignore_changed_settings: bool = False  # without a marker: warn about a changed setting instead of refusing


def training_settings(args, job_settings: dict) -> dict:
    """What decides a run's result as a sweep records it: :data:`EXACT_SETTINGS` of the arguments and the job's
    own settings (a checkpoint records the same, with the process count and precision the run found)."""
    return {**{name: getattr(args, name) for name in EXACT_SETTINGS}, **job_settings}


def run_sweep(points: Sequence, make_run: Callable[[Any], SweepRun], rules: SweepRules,
              before_run: Callable[[Any], None] | None = None,
              after_run: Callable[[Any, dict | None], None] | None = None) -> dict[str, int]:
    """For each point: ``before_run(point)``, its run (``make_run(point)``, built at its turn) through
    :func:`run_one`, then ``after_run(point, results)``; returns how many runs had each outcome."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for number, point in enumerate(points, start=1):
        if before_run is not None:
            before_run(point)
        run = make_run(point)
        print(f"[{number}/{len(points)}] {run.label}", flush=True)
        outcome, results = run_one(run, rules)
        counts[outcome] = counts.get(outcome, 0) + 1
        if after_run is not None:
            after_run(point, results)
    return counts


def run_one(run: SweepRun, rules: SweepRules) -> tuple[str, dict | None]:
    """Keep, refuse, resume or train ``run`` (see the module docstring); returns ``(outcome, results)``."""
    out = Path(run.output_dir)
    settings = json_value(run.settings)  # as the record holds them
    if rules.keep_finished and is_finished(out, rules):
        if _keep(out, settings, rules):
            results = read_json(str(out / RESULTS))
            lacking = [name for name in run.wanted if not isinstance(results, dict) or name not in results]
            if not lacking:
                print(f"{run.label}: finished in {out}, kept", flush=True)
                return "finished_before", results
            print(f"{run.label}: finished in {out} without {', '.join(lacking)}, evaluated", flush=True)
            return "evaluated", run.evaluate()
        resume = True  # a longer schedule: the run continues from its latest checkpoint
    else:
        resume = rules.keep_finished and out.is_dir() and any(out.iterdir())
    results = run.train(resume)
    if rules.marker:  # written last: a run killed before this point has no marker yet
        replace_file(out / rules.marker, json.dumps(settings, indent=2), "the run's settings")
    return ("resumed" if resume else "trained"), results


def is_finished(out: Path, rules: SweepRules) -> bool:
    """Whether the run in ``out`` ended: every file of ``rules.finished`` is there."""
    return all((Path(out) / name).exists() for name in rules.finished)


def recorded_settings(out: Path, marker: str) -> dict | None:
    """The settings the sweep's ``marker`` in the run folder ``out`` holds; None when there is none."""
    return read_record(str(Path(out) / marker), "the record of a run's settings: delete it to keep the run as it "
                                                "was trained (nothing is compared then), or delete the run to train "
                                                "it again")


def _keep(out: Path, settings: dict, rules: SweepRules) -> bool:
    """Whether the finished run in ``out`` is kept as it is (False: a setting of ``rules.continues`` changed, so
    it continues); a change of any other setting but ``rules.may_ignore`` is refused."""
    compared = {k: v for k, v in settings.items() if k not in rules.may_ignore and k not in rules.continues}
    if rules.marker:
        saved = recorded_settings(out, rules.marker)
        if saved is None:
            return True  # trained elsewhere: nothing recorded to compare
        changed = sorted(name for name, value in compared.items() if saved.get(name, ABSENT) != value)
        if changed:
            raise CorefBertError(f"this finished run was trained with other settings ({', '.join(changed)}: "
                                 f"{saved.get(changed[0])!r} then, {settings[changed[0]]!r} now); use another "
                                 "--output_dir or delete the run to train it again", path=out)
        lengths = saved
    else:
        found = list_checkpoints(out)
        if found:
            checkpoint = found[-1][1]
            refuse_changed_settings(changed_settings(read_trainer_state(checkpoint).get("settings") or {}, compared),
                                    checkpoint, rules.ignore_changed_settings, print)
        try:
            lengths = read_json(str(out / rules.arguments_file)) if rules.continues else {}
        except CorefBertError:
            lengths = {}  # unreadable: nothing says the length is the same, so the run continues
    return all(lengths.get(name) == settings.get(name) for name in rules.continues)
