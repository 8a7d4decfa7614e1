"""The ablation as a curve over training tokens: when does the copy objective start to pay?

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
(its figure of one model, and the paired difference of two). Then rerun the curve's command. The frozen-feature coreference probe is plugged in
this way (:func:`frozen_point_probe`, row kinds ``frozen_f1`` and ``frozen_auc``).

What the curve writes (:mod:`corefbert.ablation.curve_report`): ``curve.json``, ``curve.md`` (a table per point:
every arm and its difference to WWM with a paired 95% bootstrap interval) and ``curve.png`` (the differences
against tokens, one panel per probe).
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import corefbert
from corefbert.ablation.frozen_probe import (
    DEFAULT_WINDOW,
    figure_name,
    frozen_coref_probe,
    split_files,
)
from corefbert.ablation.mention_pairs import prepare_document
from corefbert.ablation.pair_statistics import frozen_paired_difference
from corefbert.ablation.probes import (
    HELDOUT_ROWS,
    CorefE2EProbe,
    CorefProbe,
    file_stem,
    heldout_counts,
    run_coref_e2e_probe,
    run_coref_probe,
    run_quoref_probe,
    statistic,
)
from corefbert.errors import CorefBertError
from corefbert.metrics.bootstrap import paired_bootstrap
from corefbert.text.conll import read_conll
from corefbert.text.durable import remove_folder, replace_file, replace_folder
from corefbert.text.jsonio import json_value, read_record
from corefbert.text.tokenizers import load_tokenizer
from corefbert.training.outputs.runlog import log_path, read_log

#: The schedule of the curve's arms: warm-up, then constant (a value at a step that does not depend on the budget).
CURVE_SCHEDULE = "constant_with_warmup"
POINTS = "points"
COOLDOWN = "cooldown"
POINT_RECORD = "point.json"
#: Where the probes of the study's start (the base) are kept: the single-point study's folder for it.
START = "backbone"
#: The arm every difference is taken against (paper table 7: each arm against "-NSP, +WWM").
REFERENCE = "wwm"
#: The zero-shot rows' names by scorer: the masked LM, the copy head, the copy head with V untrained (its control).
MLM_ROW, COPY_ROW, UNTRAINED_COPY_ROW = "zero-shot", "zero-shot, copy head", "zero-shot, copy head, untrained V"
#: The shared pronoun files the curve scores zero-shot by default (where each comes from: docs/design.md, the data).
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
    """The curve's own flags, each bad value one line (:func:`run_curve` checks them with the study's)."""
    parse_tokens(study.curve_tokens)
    if study.curve_warmup_steps < 0:
        raise CorefBertError(f"--curve_warmup_steps must be 0 or more (got {study.curve_warmup_steps})")
    if not 0.0 <= study.curve_cooldown < 1.0:
        raise CorefBertError(f"--curve_cooldown must be within [0, 1) (got {study.curve_cooldown})")
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


def cooldown_steps(steps: int, share: float) -> int:
    """The steps of a point's cooldown (``--curve_cooldown`` of the point's ``steps``, at least one; 0 without)."""
    return 0 if share <= 0 else min(steps - 1, max(1, round(share * steps))) if steps > 1 else 0


def point_dir(run: Path, tokens: int) -> Path:
    return Path(run) / POINTS / f"tokens_{tokens}"


def cooldown_dir(run: Path, tokens: int) -> Path:
    """The run folder of a point's cooldown branch (a run of its own, forked off the trunk ``run``)."""
    return Path(run) / COOLDOWN / f"tokens_{tokens}"


def saved_point(folder: Path) -> dict | None:
    """The record of a saved point (its step and tokens), None when it is not (completely) saved."""
    path = Path(folder) / POINT_RECORD
    try:
        record = read_record(str(path), "the point is saved again from its run")
    except CorefBertError as err:
        print(f"warning: {err}", file=sys.stderr)
        return None
    return record if record is not None and {"tokens", "step"} <= set(record) else None


def save_point(run: Path, tokens: int, steps: int, source: Path | None = None, cooldown: int = 0) -> dict:
    """Copy ``final/`` of ``source`` (the trunk ``run`` itself, or the point's cooldown branch; the weights at
    ``steps``) to the point's folder of ``run`` with its record: the step, the nominal tokens, the tokens the log
    counted by then and the cooldown's steps. The folder appears whole or not at all."""
    source = Path(source or run)
    train = [r for r in read_log(log_path(source)) if r.get("split") == "train" and r["step"] == steps]
    record = {"tokens": tokens, "step": steps, "trained_tokens": train[-1].get("tokens") if train else None,
              "cooldown_steps": cooldown}
    folder = point_dir(run, tokens)
    partial = folder.with_name(folder.name + ".partial")
    remove_folder(partial)
    shutil.copytree(source / "final", partial)
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
        return paired_bootstrap(functools.partial(statistic, kind), np.asarray(a, dtype=float),
                                np.asarray(b, dtype=float), samples, seed)
    return paired


#: Row kinds -> how to figure and compare them. Count rows (per-example counts) are the probes module's.
ROW_KINDS: dict[str, RowKind] = {kind: RowKind(_count_figure(kind), _count_paired(kind)) for kind in (
    "ratio", "gap_f1", "coref_avg_f1")}

def _frozen_kind(kind: str) -> RowKind:
    """Rows of the frozen-feature probe, ``frozen_auc:<subset>:<layer>`` (the figure, percent, and the paired
    document-bootstrap difference of two arms, seeds paired, from :func:`frozen_paired_difference`) or
    ``frozen_gain_auc:<subset>:<layer>`` (the layer's gain over the same model's layer 0; no arm comparison)."""
    family, subset, layer = kind.split(":")
    name = figure_name("auc", subset, int(layer), gain=family == "frozen_gain_auc")

    def figure(seeds: list[dict]) -> float:
        values = [r.get(name) for r in seeds]
        return float("nan") if any(v is None for v in values) else 100.0 * float(np.mean(values))

    def paired(a: list[dict], b: list[dict], samples: int, seed: int) -> dict | None:
        if family == "frozen_gain_auc":
            return None
        found = frozen_paired_difference(a, b, name, name, samples, seed)
        scaled = {k: None if found[k] is None else 100.0 * found[k] for k in ("difference", "ci_low", "ci_high")}
        return {**scaled, "seeds": found["seeds"], "examples": found["documents"], "samples": found["samples"]}

    return RowKind(figure, paired)


def row_kind(kind: str) -> RowKind:
    """How the rows of ``kind`` are figured and compared (:data:`ROW_KINDS`, and the frozen probe's kinds)."""
    if kind not in ROW_KINDS and kind.startswith("frozen_"):
        ROW_KINDS[kind] = _frozen_kind(kind)
    return ROW_KINDS[kind]



def zero_shot_files(study) -> list[str]:
    """The pronoun files scored zero-shot at every point: the shared DPR dev and GAP validation files where
    ``../shared/data`` (beside the checkout, or beside the working folder) has them (unless
    ``--no_curve_default_zero_shot``), and every ``--zero_shot_file`` (WSC273, PDP, WinoGender, ...)."""
    files = []
    shared = shared_data() if study.curve_default_zero_shot else None
    if shared is not None:
        files = [str(shared / name) for name in DEFAULT_ZERO_SHOT if (shared / name).is_file()]
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
        for scorer, name, row in (("mlm", f"zeroshot_{stem}", MLM_ROW), ("copy", f"zeroshot_copy_{stem}", COPY_ROW),
                                  ("copy_untrained", f"zeroshot_copyuntrained_{stem}", UNTRAINED_COPY_ROW)):
            probe = CorefProbe([path], max_eval_samples=study.probe_max_eval_samples, zero_shot=scorer)
            needs_copy = scorer == "copy"  # the control runs everywhere: the start's, MRM's and WWM's V is untrained
            probes.append(PointProbe(
                name, lambda site, p=probe, c=needs_copy: None if c and not site.copy_trained else
                {**p.settings(), **start}, _coref_runner(probe), _coref_rows(row)))
    for name, probe in finetune_probes(study).items():
        runs = {"finetune_seeds": study.finetune_seeds, "seed_stride": FINETUNE_SEED_STRIDE} if (
            study.finetune_seeds > 1) else {}
        probes.append(PointProbe(name, lambda site, p=probe, r=runs: {**p.settings(), **r, **start} if site.slow
                                 else None, _finetune_runner(probe, study.finetune_seeds),
                                 _coref_rows(f"eq. 5 on {name[len('finetune_'):]}")))
    for extra in (frozen_point_probe(study), e2e_point_probe(study)):
        if extra is not None:
            probes.append(extra)
    quoref = study.quoref_probe()
    if quoref is not None:
        probes.append(PointProbe(
            "quoref", lambda site: {**quoref.settings(), **start} if site.slow else None,
            lambda site, folder: run_quoref_probe(quoref, site.model_dir, folder, site.seed,
                                                  site.train_args.mixed_precision, True),
            lambda results: {f"QUOREF dev {label}": ("ratio", results[key]) for key, label in
                             (("exact_match", "EM"), ("f1", "F1"))}))
    return probes


#: The fine-tuning probe the curve runs by default where ../shared/data has it: eq. 5 on GAP development ->
#: validation (the paper's GAP protocol fine-tunes on development and reports the test set).
DEFAULT_FINETUNE = ("gap/gap-development.tsv", "gap/gap-validation.tsv")


def shared_data() -> Path | None:
    """``../shared/data`` beside the checkout or beside the working folder, where there is one."""
    for shared in (Path(corefbert.__file__).resolve().parents[2] / "shared" / "data",
                   Path.cwd().parent / "shared" / "data"):
        if shared.is_dir():
            return shared
    return None


def finetune_probes(study) -> dict[str, CorefProbe]:
    """The eq. 5 fine-tuning probes: every ``--finetune``, and by default (``--curve_default_zero_shot``) GAP
    development -> validation where ../shared/data has it."""
    probes = {name: p for name, p in study.coref_probes().items() if name.startswith("finetune_")}
    shared = shared_data() if study.curve_default_zero_shot else None
    train, dev = ((shared / f for f in DEFAULT_FINETUNE) if shared else (None, None))
    if train is not None and train.is_file() and dev.is_file() and f"finetune_{file_stem(str(train))}" not in probes:
        probes[f"finetune_{file_stem(str(train))}"] = CorefProbe(
            [str(dev)], str(train), study.finetune_max_steps, study.finetune_batch_size, study.finetune_learning_rate,
            max_eval_samples=study.probe_max_eval_samples)
    return probes


#: The fine-tuning seeds of a site are its seed + k times this: the seeds of two pretraining seeds never meet (the
#: start is one model for every seed, and the same seed would fine-tune it the same way twice).
FINETUNE_SEED_STRIDE = 1000


def _finetune_runner(probe: CorefProbe, runs: int) -> Callable:
    """``runs`` fine-tunings of ``probe`` (seeds: the site's seed + k · :data:`FINETUNE_SEED_STRIDE`), each result
    kept in the probe's folder as soon as it is there (a killed probe resumes with the next run), their
    per-example counts pooled."""
    def run(site: ProbeSite, folder: Path) -> dict:
        per_run = []
        for k in range(runs):
            seed = site.seed + FINETUNE_SEED_STRIDE * k
            done, key = folder / f"run_{k}.json", json_value({"settings": probe.settings(), "seed": seed})
            results = cached_result(done, key)
            if results is None:
                results = run_coref_probe(probe, site.model_dir, folder / f"run_{k}", seed,
                                          site.train_args.mixed_precision, True)
                replace_file(done, json.dumps({"settings": key, "results": results}), "a fine-tuning run's result")
            per_run.append(results)
        if runs == 1:
            return per_run[0]
        pooled = {}
        for stem, first in per_run[0].items():
            counts = np.sum([np.asarray(r[stem]["counts"], dtype=float) for r in per_run], axis=0)
            pooled[stem] = {"kind": first["kind"], "counts": counts.tolist(),
                            "runs": [statistic(r[stem]["kind"], np.asarray(r[stem]["counts"]).sum(axis=0)).item()
                                     for r in per_run]}
        return pooled
    return run


def coref_split(study) -> tuple[list[str], list[str], list[str]] | None:
    """The coreference probes' ``(train, validation, test)`` CoNLL files: ``--coref_split_config``'s (paths as
    written; validation may be empty), else, with the shared-data defaults on, the 90-document LitBank split of
    ``docs/guides/coref_e2e_litbank90.yaml`` when this checkout and ``../shared/data`` have it; else None."""
    import yaml

    if study.coref_split_config:
        config, root = Path(study.coref_split_config), None
    elif study.curve_default_zero_shot:
        root = Path(corefbert.__file__).resolve().parents[1]
        config = root / "docs" / "guides" / "coref_e2e_litbank90.yaml"
        if not config.is_file():
            return None
    else:
        return None
    train, test = split_files(str(config), root)
    validation = [str(Path(root or ".") / f) for f in (yaml.safe_load(config.read_text(encoding="utf-8")) or {})
                  .get("validation_file") or []]
    found = (train, validation, test)
    if study.coref_split_config:
        return found
    return found if all(Path(f).is_file() for f in train + validation + test) else None


def frozen_split(study) -> tuple[list[str], list[str]] | None:
    """The frozen-feature probe's ``(train files, test files)`` (:func:`coref_split`; its validation files are not
    read, as the probe selects nothing)."""
    split = coref_split(study)
    return None if split is None else (split[0], split[2])


def e2e_point_probe(study) -> PointProbe | None:
    """End-to-end coreference on the split (:class:`corefbert.ablation.probes.CorefE2EProbe`) where the
    fine-tuning probes are due: fine-tuned on its training documents, scored on its validation and test documents
    together (no model selection, so both are held out), per document; the fine-tuning's seed is the site's, the
    same for every arm of a seed."""
    split = coref_split(study)
    if split is None or not study.coref_e2e_max_steps:
        return None
    train, validation, test = split
    probe = CorefE2EProbe(train, validation + test, study.coref_e2e_max_steps)
    settings = {**probe.settings(files_digest(train, validation + test)), "base_mlm_steps": study.base_mlm_steps}
    return PointProbe(
        "coref_e2e", lambda site: settings if site.slow else None,
        lambda site, folder: run_coref_e2e_probe(probe, site.model_dir, folder, site.seed,
                                                 site.train_args.mixed_precision),
        lambda results: {E2E_ROW: ("coref_avg_f1", results["counts"])})


#: The end-to-end probe's row.
E2E_ROW = "LitBank end-to-end coreference, avg F1 (MUC, B³, CEAF-φ4)"


def frozen_point_probe(study) -> PointProbe | None:
    """The frozen-feature coreference probe (:mod:`corefbert.ablation.frozen_probe`) at every point: a pair
    classifier on the frozen states of every layer (0, the embedding output, to the last), fitted on the split's
    training documents and scored on its test documents, the probe's seed ``--probe_seed``. Its result is reused
    only for the same documents' content (a digest of the files' bytes, not their names). The documents are read
    once; their windows are cut once per tokenizer (every arm of a curve shares the base's)."""
    split = frozen_split(study)
    if split is None:
        return None

    train_files, test_files = split
    settings = {"documents": files_digest(train_files, test_files), "layer": "every", "window": DEFAULT_WINDOW,
                "seed": study.probe_seed, "base_mlm_steps": study.base_mlm_steps}
    if study.frozen_max_train_pairs:
        settings["max_train_pairs"] = study.frozen_max_train_pairs
    prepared: dict[str, tuple[list, list]] = {}  # the tokenizer's vocabulary digest -> (train, test) windows

    def run(site: ProbeSite, _folder: Path) -> dict:
        tokenizer = load_tokenizer(site.model_dir)
        key = json.dumps(sorted(tokenizer.get_vocab().items()))
        if key not in prepared:
            prepared.clear()
            prepared[key] = tuple([prepare_document(d, tokenizer, DEFAULT_WINDOW) for d in read_conll(files)]
                                  for files in (train_files, test_files))
        train, test = prepared[key]
        return frozen_coref_probe(site.model_dir, tokenizer, train, test, layers=None, seed=study.probe_seed,
                                  bootstrap_samples=study.bootstrap_samples,
                                  max_train_pairs=study.frozen_max_train_pairs)

    return PointProbe("frozen_coref", lambda site: settings, run, frozen_rows)


#: The frozen probe's subsets as the tables name them.
FROZEN_SUBSETS = {"all": "all pairs", "diffstring": "different strings", "pronoun_name": "pronoun–name"}


def frozen_rows(result: dict) -> dict[str, tuple[str, Any]]:
    """The frozen probe's table rows: AUC at every layer on each subset (a row kind per figure), and each layer's
    gain over layer 0 on all pairs."""
    rows = {}
    for subset, label in FROZEN_SUBSETS.items():
        for layer in result["frozen_layers"]:
            rows[frozen_row(layer, label)] = (f"frozen_auc:{subset}:{layer}", result)
    for layer in result["frozen_layers"][1:]:
        rows[f"frozen coref probe, layer {layer}: AUC gain over layer 0 (all pairs)"] = (
            f"frozen_gain_auc:all:{layer}", result)
    return rows


def frozen_row(layer: int, subset_label: str) -> str:
    return f"frozen coref probe, layer {layer}: AUC ({subset_label})"


def files_digest(*groups: list[str]) -> str:
    """SHA-256 (16 hex digits) of the files' bytes, group by group in the order given: the same documents under
    other names or paths give the same digest, another content under the same names does not."""
    import hashlib

    digest = hashlib.sha256()
    for files in groups:
        digest.update(b"\x00group")
        for path in files:
            digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return digest.hexdigest()[:16]


def _heldout_settings(site: ProbeSite) -> dict:
    from corefbert.pretraining.run import rows_digest

    return {"sequences": len(site.eval_rows), "mask_seed": site.study.probe_seed,
            "mrp_ratio": site.train_args.mrp_ratio or 0.2, "mlm_probability": site.train_args.mlm_probability,
            "copy_trained": site.copy_trained,
            "corpus": f"{len(site.eval_rows)} held-out rows, sha256 {rows_digest(site.eval_rows)}",
            "split": "mlm_repeated/mlm_other/same_candidates"}


def _run_heldout(site: ProbeSite, _folder: Path) -> dict:
    settings = _heldout_settings(site)
    found = heldout_counts(site.model_dir, site.eval_rows, settings["mlm_probability"], settings["mrp_ratio"],
                           site.study.probe_seed, site.seed)
    if not site.copy_trained:
        found.pop("mrp")
        found.pop("same_copy")
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
        settings = json_value(settings)
        if cached_result(folder / f"{probe.name}.json", settings) is None:
            todo.append((probe, settings))
        else:
            counts["probes_reused"] += 1
    if todo:
        print(f"[curve] probing {site.arm}, seed {site.seed}, {token_label(site.tokens)}: "
              f"{', '.join(p.name for p, _ in todo)}", flush=True)
    for probe, settings in todo:
        # The probe's scratch folder: kept for the same settings, so a killed probe resumes what it had finished
        # (a fine-tuning run, a checkpoint); emptied otherwise.
        scratch = folder / probe.name
        if cached_result(scratch / "probe_settings.json", settings) is None:
            remove_folder(scratch)
            scratch.mkdir(parents=True)
            replace_file(scratch / "probe_settings.json", json.dumps({"settings": settings, "results": {}}))
        results = probe.run(site, scratch)
        replace_file(folder / f"{probe.name}.json", json.dumps({"settings": settings, "results": results}),
                     "the probe's result")  # whole or not at all: never a half file that reads as done
        counts["probes_run"] += 1


def cached_result(path: Path, settings: dict):
    """The results stored at ``path`` when they were computed with ``settings``, else None."""
    try:
        saved = read_record(str(path), "the probe runs again")
    except CorefBertError as err:
        print(f"warning: {err}", file=sys.stderr)
        return None
    return saved.get("results") if saved is not None and saved.get("settings") == settings else None
