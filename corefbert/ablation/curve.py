"""The ablation as a curve over training tokens (issue 35): when does the copy objective start to pay?

``--curve_tokens 0.3M,1M,3M`` turns the study (:mod:`corefbert.ablation.study`) into a curve. Every arm of every
seed is one pretraining run (``output_dir/<arm>/seed_<seed>``, from the study's base) that saves its weights at
each point, in ``points/tokens_<N>/``, and every probe runs at every point:

- **Points are token counts.** A point of ``N`` non-padding tokens is the optimizer step ``ceil(N / t)``, where
  ``t`` is the tokens one step sees on average: rows per step times the mean row length of the train split (a
  function of the corpus and the batch only, so the same on every rerun). The tokens the run had really seen at
  that step (its log's count) are what the table and the plot show.
- **Continuing, never restarting.** A point is one segment of the run: the sweep (:mod:`corefbert.training.sweep`)
  trains it to the point's step, or continues it from its latest checkpoint when it has a shorter schedule
  (``max_steps`` is the sweep's ``continues`` setting, as bAbI's schedule length is); ``final/`` is then copied to
  the point's folder. A saved point is never trained again; a longer ``--curve_tokens`` continues the runs from
  their last point; a point that falls before a run's last checkpoint cannot be made and is refused.
- **A schedule that does not know the budget.** The arms warm up over ``--curve_warmup_steps`` optimizer steps
  and then keep ``--learning_rate`` (``constant_with_warmup``): a linear decay to the last step would change
  every earlier point when the budget grows. The base keeps the preset's schedule (it is trained once).
- **Probes, cached per (arm, seed, point, probe).** :func:`point_probes` is the table of probes the curve runs
  at each saved point (and at the start, the base, in ``backbone/seed_<seed>``); each result is stored in
  ``<point>/probes/<name>.json`` with the settings that decided it, and a result with the same settings is never
  computed again. Adding a probe to the table later runs only that probe on the points already saved.

**Plugging in a probe** (the frozen-feature coreference probe, say): append a :class:`PointProbe` to the list
:func:`point_probes` returns, with its ``settings(site)`` (a dict, or None where it does not run), ``run(site,
folder)`` (JSON-able results of the model ``site.model_dir``) and ``rows(results)`` (``{row name: (kind,
data)}``). Rows of the kinds ``ratio`` and ``gap_f1`` carry per-example counts and are figured and bootstrapped
by :mod:`corefbert.ablation.probes`; a probe with figures of its own registers its kind in :data:`ROW_KINDS`
(its figure of one model, and the paired difference of two). Then rerun the curve's command. For a probe that
returns its own figures and a document-level paired difference, the few lines are of this shape::

    probes.append(PointProbe(
        "frozen_coref", lambda site: {"docs": split, "seed": 13, **start},
        lambda site, folder: frozen_coref_probe(site.model_dir, load_tokenizer(site.model_dir), train, test, seed=13),
        lambda results: {"frozen coref probe: pair F1": ("frozen", results)}))
    ROW_KINDS["frozen"] = RowKind(lambda seeds: 100 * np.mean([r["pair_f1"] for r in seeds]),
                                  lambda a, b, samples, seed: paired_difference(a, b, samples, seed))

What the curve writes (:mod:`corefbert.ablation.curve_report`): ``curve.json``, ``curve.md`` (a table per point:
every arm and its difference to WWM with a paired 95% bootstrap interval) and ``curve.png`` (the differences
against tokens, one panel per probe).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corefbert.ablation.probes import (
    CorefProbe,
    file_stem,
    heldout_counts,
    paired_bootstrap,
    run_coref_probe,
    run_quoref_probe,
    statistic,
)
from corefbert.errors import CorefBertError
from corefbert.text.durable import remove_folder, replace_file, replace_folder
from corefbert.training.checkpointing import list_checkpoints
from corefbert.training.sweep import recorded_settings, run_one

#: The schedule of the curve's arms: warm-up, then constant (a value at a step that does not depend on the budget).
CURVE_SCHEDULE = "constant_with_warmup"
POINTS = "points"
POINT_RECORD = "point.json"
#: Where the probes of the study's start (the base) are kept: the single-point study's folder for it.
START = "backbone"
#: The arm every difference is taken against (paper table 7: each arm against "-NSP, +WWM").
REFERENCE = "wwm"
#: The shared pronoun files the curve scores zero-shot by default (../shared/data/*/SOURCE.md).
DEFAULT_ZERO_SHOT = ("dpr/dpr_dev_small.txt", "gap/gap-validation.tsv")
_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9}


# ------------------------------------------------------------------------------------------------ points


def parse_tokens(text: str, flag: str = "--curve_tokens") -> list[int]:
    """``"0.3M,1M,3M"`` -> ``[300000, 1000000, 3000000]`` (sorted, distinct); k, M and B (or G) suffixes."""
    points = []
    for part in (p.strip() for p in str(text).split(",")):
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kKmMbBgG]?)", part)
        if not match:
            raise CorefBertError(f"{flag} {text!r}: {part!r} is not a token count; give e.g. 0.3M,1M,3M (k, M, B "
                                 "suffixes)")
        value = round(float(match.group(1)) * _SUFFIXES[match.group(2).lower()])
        if value < 1:
            raise CorefBertError(f"{flag} {text!r}: {part!r} is below one token")
        points.append(value)
    return sorted(set(points))


def token_label(tokens: int) -> str:
    """``300000`` -> ``"0.3M"``, ``30000`` -> ``"30k"``, ``0`` -> ``"start"``."""
    if tokens == 0:
        return "start"
    for suffix, size, above in (("B", 10**9, 10**9), ("M", 10**6, 10**5), ("k", 10**3, 10**3)):
        if tokens >= above:
            return f"{tokens / size:.3g}{suffix}"
    return str(tokens)


def check_curve_flags(study) -> None:
    """The curve's own flags, each bad value one line (called by the study's ``validate``)."""
    parse_tokens(study.curve_tokens)
    if study.curve_warmup_steps < 0:
        raise CorefBertError(f"--curve_warmup_steps must be 0 or more (got {study.curve_warmup_steps})")
    if study.curve_slow_probes not in ("last", "all"):
        parse_tokens(study.curve_slow_probes, "--curve_slow_probes")


def mean_row_tokens(rows) -> float:
    """The mean number of non-padding tokens of a prepared corpus split's rows (special tokens included: what the
    training log counts), read column-wise from Arrow."""
    import pyarrow.compute as pc

    total = count = 0
    for batch in rows.with_format("arrow").iter(batch_size=65536):
        lengths = pc.list_value_length(batch["input_ids"])
        total += pc.sum(lengths).as_py() or 0
        count += len(lengths)
    if not count:
        raise CorefBertError("the corpus' train split has no rows")
    return total / count


def point_steps(points: list[int], tokens_per_step: float) -> dict[int, int]:
    """``{tokens: optimizer step}``: the first step whose expected token count reaches the point; two points
    on one step are refused."""
    steps = {tokens: max(1, math.ceil(tokens / tokens_per_step)) for tokens in points}
    seen: dict[int, int] = {}
    for tokens, step in steps.items():
        if step in seen:
            raise CorefBertError(f"--curve_tokens: {token_label(seen[step])} and {token_label(tokens)} are the same "
                                 f"optimizer step ({step}, about {tokens_per_step:,.0f} tokens a step); drop one")
        seen[step] = tokens
    return steps


def point_dir(run: Path, tokens: int) -> Path:
    return Path(run) / POINTS / f"tokens_{tokens}"


def saved_point(folder: Path) -> dict | None:
    """The record of a saved point (its step and tokens), None when it is not (completely) saved."""
    path = Path(folder) / POINT_RECORD
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def curve_arm_args(train_args, study, arm: str, seed: int, run: Path, start: str, steps: int):
    """An arm's pretraining flags up to a point: the study's flags, the arm's, and the curve's schedule."""
    from corefbert.ablation.study import ARMS

    return dataclasses.replace(train_args, output_dir=str(run), seed=seed, model_name_or_path=start, plot=False,
                               max_steps=steps, lr_scheduler_type=CURVE_SCHEDULE, warmup_ratio=0.0,
                               warmup_steps=study.curve_warmup_steps, **ARMS[arm])


def save_point(run: Path, tokens: int, steps: int) -> dict:
    """Copy the run's ``final/`` (the weights at ``steps``) to the point's folder with its record: the step, the
    nominal tokens and the tokens the run's log counted by then. The folder appears whole or not at all."""
    import shutil

    from corefbert.pretraining.plotting import read_log

    train = [r for r in read_log(Path(run) / "log.jsonl") if r.get("split") == "train" and r["step"] == steps]
    record = {"tokens": tokens, "step": steps, "trained_tokens": train[-1].get("tokens") if train else None}
    folder = point_dir(run, tokens)
    partial = folder.with_name(folder.name + ".partial")
    remove_folder(partial)
    shutil.copytree(Path(run) / "final", partial)
    replace_file(partial / POINT_RECORD, json.dumps(record, indent=2), "the point's record")
    replace_folder(partial, folder)
    return record


# ------------------------------------------------------------------------------------------------ probes


@dataclass(frozen=True)
class ProbeSite:
    """One model a probe runs on: an arm (or the start) at one seed and point."""

    study: Any  # AblationArguments
    train_args: Any  # PretrainingArguments
    eval_rows: Any  # the held-out rows the held-out probe reads
    arm: str
    seed: int
    tokens: int  # 0: the start
    model_dir: str
    folder: Path  # probes go to folder/probes/<name>.json
    copy_trained: bool
    slow: bool  # the fine-tuning probes are due here (--curve_slow_probes)


@dataclass(frozen=True)
class PointProbe:
    """One probe of the curve's table (see the module docstring: plugging in a probe)."""

    name: str
    settings: Callable[[ProbeSite], dict | None]  # what decides its result; None: it does not run at this site
    run: Callable[[ProbeSite, Path], dict]  # (site, a scratch folder of its own) -> JSON-able results
    rows: Callable[[dict], dict[str, tuple[str, Any]]]  # results -> {row: (kind, data)}


@dataclass(frozen=True)
class RowKind:
    """How the rows of one kind are figured (percent) and compared between two arms."""

    figure: Callable[[list[Any]], float]  # the data of every seed -> the mean figure over seeds
    paired: Callable[[list[Any], list[Any], int, int], dict]  # (arm A's seeds, B's, samples, seed) -> CI dict


def _count_figure(kind: str) -> Callable:
    return lambda seeds: float(np.mean([statistic(kind, np.asarray(d, dtype=float).sum(axis=0)) for d in seeds]))


def _count_paired(kind: str) -> Callable:
    def paired(a, b, samples, seed):
        return paired_bootstrap(kind, np.asarray(a, dtype=float), np.asarray(b, dtype=float), samples, seed)
    return paired


#: Row kinds -> how to figure and compare them. Count rows (per-example counts) are the probes module's.
ROW_KINDS: dict[str, RowKind] = {kind: RowKind(_count_figure(kind), _count_paired(kind)) for kind in ("ratio",
                                                                                                       "gap_f1")}

#: Row names of the held-out probe's parts (the single-point study's names).
HELDOUT_ROWS = {"mlm": "held-out MLM accuracy", "mlm_repeated": "held-out MLM accuracy: repeated mentions",
                "mlm_other": "held-out MLM accuracy: other masked words", "mrp": "held-out MRP accuracy"}


def zero_shot_files(study) -> list[str]:
    """The pronoun files scored zero-shot at every point: the shared DPR dev and GAP validation files where
    ``../shared/data`` (beside the checkout, or beside the working folder) has them (unless
    ``--no_curve_default_zero_shot``), and every ``--zero_shot_file`` (WSC273, PDP, WinoGender, ...)."""
    files = []
    if study.curve_default_zero_shot:
        import corefbert

        for shared in (Path(corefbert.__file__).resolve().parents[2] / "shared" / "data",
                       Path.cwd().parent / "shared" / "data"):
            files = [str(shared / name) for name in DEFAULT_ZERO_SHOT if (shared / name).is_file()]
            if files:
                break
    given = list(study.zero_shot_file or [])
    return files + [f for f in given if file_stem(f) not in {file_stem(d) for d in files}]


def point_probes(study) -> list[PointProbe]:
    """The probes the curve runs at every saved point: the held-out MLM probe (repeated mentions and other words,
    MRP where the copy head trains), zero-shot pronoun resolution with the MLM head on every file and with the
    copy head where it trains, and the fine-tuning probes (eq. 5, QUOREF) where they are due."""
    start = {"base_mlm_steps": study.base_mlm_steps}  # a probe of another starting point is not reused
    probes = [PointProbe("heldout", lambda site: {**_heldout_settings(site), **start}, _run_heldout,
                         lambda results: {HELDOUT_ROWS.get(k, k): ("ratio", v) for k, v in results.items()})]
    for path in zero_shot_files(study):
        stem = file_stem(path)
        for scorer, name, row in (("mlm", f"zeroshot_{stem}", "zero-shot"), ("copy", f"zeroshot_copy_{stem}",
                                                                            "zero-shot, copy head")):
            probe = CorefProbe([path], max_eval_samples=study.probe_max_eval_samples, zero_shot=scorer)
            needs_copy = scorer == "copy"
            probes.append(PointProbe(
                name, lambda site, p=probe, c=needs_copy: None if c and not site.copy_trained else
                {**p.settings(), **start}, _coref_runner(probe), _coref_rows(row)))
    for name, probe in study.coref_probes().items():
        if name.startswith("finetune_"):
            probes.append(PointProbe(name, lambda site, p=probe: {**p.settings(), **start} if site.slow else None,
                                     _coref_runner(probe), _coref_rows(f"eq. 5 on {name[len('finetune_'):]}")))
    quoref = study.quoref_probe()
    if quoref is not None:
        probes.append(PointProbe(
            "quoref", lambda site: {**quoref.settings(), **start} if site.slow else None,
            lambda site, folder: run_quoref_probe(quoref, site.model_dir, folder, site.seed,
                                                  site.train_args.mixed_precision, True),
            lambda results: {f"QUOREF dev {label}": ("ratio", results[key]) for key, label in
                             (("exact_match", "EM"), ("f1", "F1"))}))
    return probes


def _heldout_settings(site: ProbeSite) -> dict:
    from corefbert.pretraining.run import rows_digest

    return {"sequences": len(site.eval_rows), "mask_seed": site.study.probe_seed,
            "mrp_ratio": site.train_args.mrp_ratio or 0.2, "mlm_probability": site.train_args.mlm_probability,
            "copy_trained": site.copy_trained,
            "corpus": f"{len(site.eval_rows)} held-out rows, sha256 {rows_digest(site.eval_rows)}",
            "split": "mlm_repeated/mlm_other"}


def _run_heldout(site: ProbeSite, _folder: Path) -> dict:
    settings = _heldout_settings(site)
    found = heldout_counts(site.model_dir, site.eval_rows, settings["mlm_probability"], settings["mrp_ratio"],
                           site.study.probe_seed, site.seed)
    if not site.copy_trained:
        found.pop("mrp")
    return found


def _coref_runner(probe: CorefProbe) -> Callable:
    return lambda site, folder: run_coref_probe(probe, site.model_dir, folder, site.seed,
                                                site.train_args.mixed_precision, True)


def _coref_rows(label: str) -> Callable:
    return lambda results: {f"{label}: {stem} {'F1' if r['kind'] == 'gap_f1' else 'accuracy'}": (r["kind"],
                                                                                                 r["counts"])
                            for stem, r in results.items()}


def run_probes(site: ProbeSite, probes: list[PointProbe], counts: dict) -> None:
    """Every probe of the table that applies at ``site`` and has no result with the same settings; each result
    is stored as soon as it is computed (``counts``: probes_run / probes_reused)."""
    folder = Path(site.folder) / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    todo = []
    for probe in probes:
        settings = probe.settings(site)
        if settings is None:
            continue
        settings = json.loads(json.dumps(settings))
        if cached_result(folder / f"{probe.name}.json", settings) is None:
            todo.append((probe, settings))
        else:
            counts["probes_reused"] += 1
    if todo:
        print(f"[curve] probing {site.arm}, seed {site.seed}, {token_label(site.tokens)}: "
              f"{', '.join(p.name for p, _ in todo)}", flush=True)
    for probe, settings in todo:
        scratch = folder / probe.name
        remove_folder(scratch)
        results = probe.run(site, scratch)
        replace_file(folder / f"{probe.name}.json", json.dumps({"settings": settings, "results": results}),
                     "the probe's result")  # whole or not at all: never a half file that reads as done
        counts["probes_run"] += 1


def cached_result(path: Path, settings: dict):
    """The results stored at ``path`` when they were computed with ``settings``, else None."""
    if not Path(path).is_file():
        return None
    saved = json.loads(Path(path).read_text(encoding="utf-8"))
    return saved["results"] if saved.get("settings") == settings else None


# --------------------------------------------------------------------------------------------- the run


def run_curve(study, train_args, corpus_args=None) -> dict:
    """Train every arm x seed to every point of ``--curve_tokens`` still missing (point by point, every arm of a
    point before the next point), probe each saved point and the start, and write the curve after each point."""
    from corefbert.ablation.curve_report import collect_curve
    from corefbert.ablation.study import (
        ARMS,
        SWEEP_RULES,
        arm_run,
        check_study_settings,
        run_dir,
        study_corpus,
        train_base,
        trains_copy_head,
    )

    arms, root = study.arm_list(), Path(train_args.output_dir)
    if train_args.checkpointing_steps in (None, "epoch"):
        raise CorefBertError("the curve continues each run from its checkpoint at the last point: give "
                             "--checkpointing_steps N (the presets do)")
    points = parse_tokens(study.curve_tokens)
    seeds = [train_args.seed + k for k in range(study.seeds)]
    counts = {"trained": 0, "resumed": 0, "finished_before": 0, "points_saved": 0, "points_kept": 0,
              "probes_run": 0, "probes_reused": 0}
    check_study_settings(root, study, train_args)
    if study.collect_only:
        return _finish(collect_curve(root, study, seeds, points), counts, root)
    splits = study_corpus(train_args, corpus_args)
    eval_rows = splits["validation"].select(range(min(study.probe_sequences, len(splits["validation"]))))
    per_step = (train_args.per_device_train_batch_size * train_args.gradient_accumulation_steps
                * mean_row_tokens(splits["train"]))
    steps = point_steps(points, per_step)
    for arm in arms:  # every arm's flags, before hours of training
        curve_arm_args(train_args, study, arm, train_args.seed, root / "check", "start", 1).validate()
    start = train_args.model_name_or_path
    if study.base_mlm_steps:
        start, counts["base"] = train_base(study, train_args, splits)
    rules = dataclasses.replace(SWEEP_RULES, continues=("max_steps",))
    probes = point_probes(study)
    slow = set(points[-1:]) if study.curve_slow_probes == "last" else (
        set(points) if study.curve_slow_probes == "all" else set(parse_tokens(study.curve_slow_probes)))

    def site(arm, seed, tokens, model_dir, folder):
        copy = arm != START and trains_copy_head(dataclasses.replace(train_args, **ARMS[arm]))
        return ProbeSite(study, train_args, eval_rows, arm, seed, tokens, str(model_dir), Path(folder), copy,
                         tokens in slow or (tokens == 0 and bool(slow)))

    if not study.skip_backbone:
        for seed in seeds:
            run_probes(site(START, seed, 0, start, run_dir(root, START, seed)), probes, counts)
    for tokens in points:
        for seed in seeds:
            for arm in arms:
                run = run_dir(root, arm, seed)
                folder = point_dir(run, tokens)
                if saved_point(folder) is None:
                    _refuse_passed_point(run, tokens, steps[tokens])
                    args = curve_arm_args(train_args, study, arm, seed, run, start, steps[tokens])
                    label = f"curve: {arm}, seed {seed}, to {token_label(tokens)} tokens (step {steps[tokens]})"
                    print(f"[curve] {label}", flush=True)
                    outcome, _ = run_one(arm_run(args, splits, label, study.base_mlm_steps), rules)
                    counts[outcome] += 1
                    _check_final_step(run, rules.marker, steps[tokens])
                    save_point(run, tokens, steps[tokens])
                    counts["points_saved"] += 1
                else:
                    counts["points_kept"] += 1
                run_probes(site(arm, seed, tokens, folder, folder), probes, counts)
            collect_curve(root, study, seeds, points, plot=False)
    return _finish(collect_curve(root, study, seeds, points), counts, root)


def _check_final_step(run: Path, marker: str, step: int) -> None:
    """``final/`` holds the weights of ``step``: the sweep's record says so, or (killed before the record was
    written) the run's newest checkpoint, saved before ``final/``, is that step's."""
    recorded = recorded_settings(run, marker)
    found = list_checkpoints(run)
    at = recorded.get("max_steps") if recorded is not None else (found[-1][0] if found else None)
    if at != step:
        raise CorefBertError(f"the run's final/ is not the weights of step {step} (the run says {at}); delete the "
                             "run to train it again", path=run)


def _refuse_passed_point(run: Path, tokens: int, step: int) -> None:
    """A point before the run's latest checkpoint cannot be made without training the run again."""
    found = list_checkpoints(run)
    if found and found[-1][0] > step:
        raise CorefBertError(f"--curve_tokens {token_label(tokens)} (step {step}) falls before step {found[-1][0]}, "
                             "which this run has passed; a point can only be added after the last one trained "
                             "(drop it, or train the arm again in another --output_dir)", path=run)


def _finish(result: dict, counts: dict, root: Path) -> dict:
    result["runs"] = counts
    print(f"[curve] segments: {counts['trained']} trained, {counts['resumed']} continued, {counts['finished_before']} "
          f"finished before; points: {counts['points_saved']} saved, {counts['points_kept']} kept; probes: "
          f"{counts['probes_run']} run, {counts['probes_reused']} reused; wrote {root / 'curve.md'}", flush=True)
    return result
