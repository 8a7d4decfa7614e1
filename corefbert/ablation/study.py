"""The paper's ablation (table 7) as one study: arms x seeds of ordinary pretraining runs, then probes.

Each arm is :func:`corefbert.pretraining.run.run_pretraining` with one flag changed, in
``output_dir/<arm>/seed_<seed>`` (a normal run_mrp folder: ``final/``, ``log.jsonl``, checkpoints):

- ``corefbert``: the flags as given (paper: ``L = L_MLM + L_MRP``, MLM : MRP = 4 : 1);
- ``mrm``: MRP masking without the copy objective (``--mrp_loss_weight 0``; table 7 "-NSP, +MRM");
- ``wwm``: whole-word MLM only (``--mrp_ratio 0``; "-NSP, +WWM");
- ``official_loss``: the official code's copy loss (``--mrp_official_loss``), optional.

Every arm of one seed trains on the same prepared corpus, in the same data order (the sampler and masks
are functions of the seed), for the same number of steps. The runs are one sweep
(:mod:`corefbert.training.sweep`): a finished run (``all_results.json`` and ``final/``) is skipped, and refused
when its settings (``ablation_run.json``) changed, an interrupted one resumes from its latest checkpoint, and
probes are cached per run, so a killed study continues where it stopped and arms run on other machines are
picked up by ``--collect_only``. The probes (:mod:`corefbert.ablation.probes`) run on each arm's ``final/`` and
on the starting backbone; :func:`collect` writes ``study.json`` and ``study.md`` after each run, and
``curves.png`` at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from corefbert.ablation.probes import (
    HELDOUT_ROWS,
    CorefProbe,
    QuorefProbe,
    file_stem,
    heldout_counts,
    run_coref_probe,
    run_quoref_probe,
    statistic,
)
from corefbert.corpus.prepare import PrepareArguments
from corefbert.errors import CorefBertError
from corefbert.metrics.bootstrap import paired_bootstrap
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import json_value, read_json, read_record
from corefbert.text.tokenizers import load_tokenizer
from corefbert.training.outputs.runlog import log_path, read_log
from corefbert.training.sweep import (
    SweepRules,
    SweepRun,
    recorded_settings,
    run_one,
    run_sweep,
    training_settings,
)

#: Each arm's flags over the given ones. "corefbert" keeps the flags as given.
ARMS = {
    "corefbert": {},
    "mrm": {"mrp_loss_weight": 0.0, "mrp_official_loss": False},
    "wwm": {"mrp_ratio": 0.0, "mrp_official_loss": False},
    "official_loss": {"mrp_official_loss": True},
}
BACKBONE = "backbone"
RUN_MARKER = "ablation_run.json"
#: The difference the study's confidence intervals are for (paper table 7: CorefBERT vs "-NSP, +WWM").
CONTRAST = ("corefbert", "wwm")


@dataclass
class AblationArguments:
    """The study's own flags; the pretraining and corpus flags are run_mrp's."""

    preset: str = field(default="cpu", metadata={
        "help": "cpu | gpu: pretrain/configs/ablation_<preset>.yaml gives the defaults (a --config replaces it)."})
    arms: str = field(default="corefbert,mrm,wwm", metadata={
        "help": f"Comma-separated arms to train: {', '.join(ARMS)}."})
    seeds: int = field(default=3, metadata={"help": "Seeds per arm: --seed, --seed + 1, ..."})
    collect_only: bool = field(default=False, metadata={
        "help": "Train and probe nothing: collect the runs and probes already in --output_dir into the study."})
    zero_shot_file: list[str] | None = field(default=None, metadata={
        "help": "Pronoun files (GAP/DPR/WSC/PDP/WinoGender/WikiCREM) scored zero-shot by the masked LM."})
    finetune: list[str] | None = field(default=None, metadata={
        "help": "Short eq. 5 fine-tunings, each TRAIN=DEV[,DEV...] (train on TRAIN, report the last model on "
                "the DEV files)."})
    finetune_max_steps: int = field(default=100, metadata={"help": "Optimizer steps of each fine-tuning probe."})
    finetune_batch_size: int = field(default=16, metadata={"help": "Batch size of the fine-tuning probes."})
    finetune_learning_rate: float = field(default=3e-5, metadata={"help": "LR of the fine-tuning probes (paper)."})
    probe_max_eval_samples: int | None = field(default=None, metadata={
        "help": "Score at most N problems of each zero-shot file (WikiCREM dev has 10,000), and of the dev files "
                "of each fine-tuning probe together."})
    probe_sequences: int = field(default=256, metadata={
        "help": "Held-out sequences for the MLM/MRP accuracy probes."})
    probe_seed: int = field(default=1234, metadata={
        "help": "Seed of the probes' held-out masks and of the bootstrap (the same for every arm and seed)."})
    bootstrap_samples: int = field(default=1000, metadata={"help": "Bootstrap samples of each CI."})
    skip_backbone: bool = field(default=False, metadata={"help": "Do not probe the starting backbone."})
    base_mlm_steps: int = field(default=0, metadata={
        "help": "First continue the backbone with whole-word MLM (the WWM arm's objective) for N steps, once, into "
                "output_dir/base; every arm of every seed then starts from those weights (the paper continues "
                "Google's BERT, whose MLM head is trained). 0: start from the backbone as it is."})
    quoref_train_file: str | None = field(default=None, metadata={
        "help": "QUOREF probe: fine-tune each model on this file (official QUOREF JSON) ..."})
    quoref_validation_file: str | None = field(default=None, metadata={
        "help": "... and report EM/F1 on this one (the last model, no selection on it)."})
    quoref_max_steps: int = field(default=100, metadata={"help": "Optimizer steps of the QUOREF probe."})
    quoref_batch_size: int = field(default=8, metadata={"help": "Batch size (windows) of the QUOREF probe."})
    quoref_learning_rate: float = field(default=5e-5, metadata={"help": "LR of the QUOREF probe."})
    quoref_max_seq_length: int = field(default=256, metadata={"help": "Window length of the QUOREF probe."})
    curve_tokens: str | None = field(default=None, metadata={
        "help": "The study as a curve (docs/guides/ablation.md): every arm saves its weights at these counts of "
                "non-padding training tokens (comma-separated, k/M/B suffixes: 0.3M,1M,3M,10M,30M,100M), one run per "
                "arm and seed continued from point to point, and every probe runs at every point. A longer list "
                "continues the same runs from their last point; finished points are never trained again."})
    curve_warmup_steps: int = field(default=30, metadata={
        "help": "The curve's LR schedule: linear warm-up over N optimizer steps, then constant at --learning_rate, "
                "so the weights at a point do not depend on how far the curve goes."})
    curve_cooldown: float = field(default=0.2, metadata={
        "help": "The curve's points are annealed: each is a branch off the constant-LR run (the trunk) at this share "
                "of the point's steps before it, whose LR decays linearly to 0 at the point (warmup-stable-decay); "
                "the trunk goes on at its constant LR, so the curve still extends without training again. 0: the "
                "points are the trunk's own weights (constant LR, nothing annealed)."})
    base_seed: int | None = field(default=None, metadata={
        "help": "The seed the base (--base_mlm_steps) trains with: --seed when not given. Give the first process's "
                "--seed to the others when seeds run in separate processes on one --output_dir (--seed 43 "
                "--base_seed 42), so every seed continues the same base."})
    curve_slow_probes: str = field(default="last", metadata={
        "help": "Where the curve runs the fine-tuning probes (QUOREF, --finetune): last (the largest point of "
                "--curve_tokens and the start), all, or a list of token counts."})
    curve_default_zero_shot: bool = field(default=True, metadata={
        "help": "With --curve_tokens, where ../shared/data has them: score the shared DPR dev and GAP validation "
                "files zero-shot at every point, beside any --zero_shot_file; fine-tune eq. 5 on GAP development "
                "-> validation where the fine-tuning probes are due, beside any --finetune; and run the frozen and "
                "end-to-end coreference probes on the 90-document LitBank split (docs/guides/coref_e2e_litbank90.yaml)."})
    coref_split_config: str | None = field(default=None, metadata={
        "help": "With --curve_tokens: the CoNLL split of the frozen and the end-to-end coreference probes (a YAML "
                "file with train_file and test_file lists, and optionally validation_file, paths as written)."})
    frozen_max_train_pairs: int | None = field(default=None, metadata={
        "help": "With --curve_tokens: fit the frozen probe's classifiers on at most this many training pairs (drawn "
                "under --probe_seed; default all, 160k on LitBank; 40k halves a fit for 0.005-0.008 AUC)."})
    finetune_seeds: int = field(default=1, metadata={
        "help": "Fine-tunings of each eq. 5 probe, seeds --seed + 1000 k: the per-example counts of all of "
                "them are pooled, so the figure averages the fine-tuning's randomness over N runs."})
    coref_e2e_max_steps: int = field(default=300, metadata={
        "help": "With --curve_tokens: steps of the end-to-end coreference probe (the LitBank MiniLM recipe, "
                "docs/guides/coref_e2e.md) where the fine-tuning probes are due; 0: off."})

    def arm_list(self) -> list[str]:
        arms = [a.strip() for a in self.arms.split(",") if a.strip()]
        unknown = [a for a in arms if a not in ARMS]
        if unknown or not arms:
            raise CorefBertError(f"--arms {self.arms!r}: unknown arm(s) {', '.join(unknown) or '(none given)'}; "
                                 f"choose from {', '.join(ARMS)}")
        return list(dict.fromkeys(arms))

    def coref_probes(self) -> dict[str, CorefProbe]:
        """``{probe folder name: probe}`` of the zero-shot files and fine-tuning specs."""
        probes = {}
        for path in self.zero_shot_file or []:
            probes[f"zeroshot_{file_stem(path)}"] = CorefProbe([path], max_eval_samples=self.probe_max_eval_samples)
        for spec in self.finetune or []:
            train, sep, devs = spec.partition("=")
            dev_files = [d for d in devs.split(",") if d]
            if not sep or not train or not dev_files:
                raise CorefBertError(f"--finetune {spec!r} is not TRAIN=DEV[,DEV...]; e.g. "
                                     "dpr_train_small.txt=dpr_dev_small.txt")
            probes[f"finetune_{file_stem(train)}"] = CorefProbe(
                dev_files, train, self.finetune_max_steps, self.finetune_batch_size, self.finetune_learning_rate,
                max_eval_samples=self.probe_max_eval_samples)
        for probe in probes.values():
            for path in probe.eval_files + [probe.train_file] * bool(probe.train_file):
                if not Path(path).is_file():
                    raise CorefBertError("probe file not found; check --zero_shot_file / --finetune", path=path)
        return probes

    def quoref_probe(self) -> QuorefProbe | None:
        if not self.quoref_train_file:
            return None
        return QuorefProbe(self.quoref_train_file, self.quoref_validation_file, self.quoref_max_steps,
                           self.quoref_batch_size, self.quoref_learning_rate, self.quoref_max_seq_length)

    def validate(self) -> None:
        self.arm_list()
        if self.seeds < 1:
            raise CorefBertError(f"--seeds must be at least 1 (got {self.seeds})")
        if self.base_mlm_steps < 0:
            raise CorefBertError(f"--base_mlm_steps must be 0 or more (got {self.base_mlm_steps})")
        if bool(self.quoref_train_file) != bool(self.quoref_validation_file):
            raise CorefBertError("the QUOREF probe needs both --quoref_train_file and --quoref_validation_file")
        for path in (self.quoref_train_file, self.quoref_validation_file):
            if path and not Path(path).is_file():
                raise CorefBertError("QUOREF probe file not found; check --quoref_train_file / "
                                     "--quoref_validation_file", path=path)
        if self.coref_e2e_max_steps < 0:
            raise CorefBertError(f"--coref_e2e_max_steps must be 0 or more (got {self.coref_e2e_max_steps})")
        for name in ("finetune_max_steps", "finetune_batch_size", "finetune_seeds", "probe_sequences",
                     "bootstrap_samples",
                     "quoref_max_steps", "quoref_batch_size", "quoref_max_seq_length"):
            if getattr(self, name) < 1:
                raise CorefBertError(f"--{name} must be at least 1 (got {getattr(self, name)})")
        if self.probe_max_eval_samples is not None and self.probe_max_eval_samples < 1:
            raise CorefBertError(f"--probe_max_eval_samples must be at least 1 (got {self.probe_max_eval_samples})")
        self.coref_probes()


def trains_copy_head(args) -> bool:
    """Whether a run with these pretraining flags trains the copy head (MRP accuracy is probed only then)."""
    return args.mrp_loss_weight > 0 and args.mrp_ratio > 0


def run_dir(root: Path, arm: str, seed: int) -> Path:
    return Path(root) / arm / f"seed_{seed}"


def run_study(study: AblationArguments, train_args, corpus_args=None) -> dict:
    """Train every arm x seed still missing (one sweep, :mod:`corefbert.training.sweep`), probe them and the
    backbone, then :func:`collect` the study (its table after every run, so an interrupted study shows what it
    has)."""
    study.validate()
    arms, root = study.arm_list(), Path(train_args.output_dir)
    for arm in arms:  # every arm's flags, before hours of training: not at the arm's turn
        dataclasses.replace(train_args, **ARMS[arm]).validate()
    seeds = [train_args.seed + k for k in range(study.seeds)]
    counts = {"trained": 0, "resumed": 0, "finished_before": 0, "probes_run": 0, "probes_reused": 0}
    check_study_settings(root, study, train_args)
    if not study.collect_only:
        splits = study_corpus(train_args, corpus_args)
        eval_rows = splits["validation"].select(range(min(study.probe_sequences, len(splits["validation"]))))
        start = train_args.model_name_or_path
        if study.base_mlm_steps:
            start, counts["base"] = train_base(study, train_args, splits)

        def make_run(point: tuple[str, int]) -> SweepRun:
            arm, seed = point
            args = dataclasses.replace(train_args, output_dir=str(run_dir(root, arm, seed)), seed=seed,
                                       model_name_or_path=start, plot=False, **ARMS[arm])
            return arm_run(args, splits, f"ablation arm {arm}, seed {seed}", study.base_mlm_steps)

        def before_run(point: tuple[str, int]) -> None:  # each seed's starting point, probed before its first arm
            arm, seed = point
            if arm == arms[0] and not study.skip_backbone:
                _probe(study, train_args, eval_rows, BACKBONE, seed, start, False, counts)

        def after_run(point: tuple[str, int], _results) -> None:  # probe the run, rewrite the table
            arm, seed = point
            _probe(study, train_args, eval_rows, arm, seed, str(run_dir(root, arm, seed) / "final"),
                   trains_copy_head(dataclasses.replace(train_args, **ARMS[arm])), counts)
            collect(root, arms, seeds, study, plot=False)  # the curves once, at the end

        points = [(arm, seed) for seed in seeds for arm in arms]
        for outcome, n in run_sweep(points, make_run, SWEEP_RULES, before_run, after_run).items():
            counts[outcome] += n
    study_result = collect(root, arms, seeds, study)
    study_result["runs"] = counts
    print(f"[ablation] runs: {counts['trained']} trained, {counts['resumed']} resumed, {counts['finished_before']} "
          f"finished before (skipped); probes: {counts['probes_run']} run, {counts['probes_reused']} reused (same "
          f"settings, skipped); probe results missing: {len(study_result['missing'])}; wrote {root / 'study.md'}",
          flush=True)
    return study_result


#: What a study folder is bound to: a rerun with another value would mix runs from two starting points.
STUDY_SETTINGS = "study_settings.json"
BASE = "base"


def check_study_settings(root: Path, study: AblationArguments, train_args) -> None:
    """Record the study's starting point (``root/study_settings.json``) on its first run; refuse a rerun
    whose ``--base_mlm_steps`` or backbone differs from the recorded one."""
    settings = {"base_mlm_steps": study.base_mlm_steps, "backbone": str(train_args.model_name_or_path)}
    path = Path(root) / STUDY_SETTINGS
    saved = read_record(str(path), "delete it only with the whole study folder, or pass another --output_dir: it "
                                   "records the weights every arm started from")
    if saved is not None:
        for key, value in settings.items():
            if saved.get(key, value) != value and not (key == "backbone" and study.collect_only):
                flag = "--base_mlm_steps" if key == "base_mlm_steps" else "--model_name_or_path"
                raise CorefBertError(f"{flag} {value!r} differs from the {saved[key]!r} this study was started with; "
                                     "every arm must start from the same weights: use another --output_dir, or "
                                     f"give {flag} {saved[key]!r}", path=path)
        return
    if not study.collect_only:
        Path(root).mkdir(parents=True, exist_ok=True)
        replace_file(path, json.dumps(settings, indent=2))


def base_args(study: AblationArguments, train_args):
    """The base run's flags: the WWM arm's objective for ``--base_mlm_steps`` steps at the study's first seed,
    in ``output_dir/base``."""
    seed = train_args.seed if study.base_seed is None else study.base_seed
    return dataclasses.replace(train_args, output_dir=str(Path(train_args.output_dir) / BASE), seed=seed,
                               max_steps=study.base_mlm_steps, plot=False, **ARMS["wwm"])


def train_base(study: AblationArguments, train_args, splits) -> tuple[str, str]:
    """Train the study's base once (a finished base is reused, an interrupted one resumes); returns the
    folder every arm starts from (``output_dir/base/final``) and trained / resumed / finished_before."""
    args = base_args(study, train_args)
    print(f"[ablation] base: {study.base_mlm_steps} steps of whole-word MLM from {train_args.model_name_or_path}",
          flush=True)
    outcome, _ = run_one(arm_run(args, splits, "ablation base"), SWEEP_RULES)
    return str(Path(args.output_dir) / "final"), outcome


def study_corpus(train_args, corpus_args):
    """The one corpus every run trains on: ``--dataset_dir``, or the corpus flags prepared once (cached), checked
    against the backbone before it is probed on it (pretraining checks it again)."""
    from transformers import AutoConfig

    from corefbert.pretraining.data import load_or_prepare_corpus

    if not train_args.dataset_dir and not (corpus_args is not None and corpus_args.train_file):
        raise CorefBertError("no corpus: pass --train_file (text) or --dataset_dir (a prepared corpus)")
    model = train_args.model_name_or_path
    prepare = None if corpus_args is None else PrepareArguments(**dataclasses.asdict(corpus_args),
                                                                model_name_or_path=model, seed=train_args.seed)
    splits, _ = load_or_prepare_corpus(train_args.dataset_dir, prepare, load_tokenizer(model),
                                       AutoConfig.from_pretrained(model))
    return splits


def arm_run(args, splits, label: str, base_mlm_steps: int = 0) -> SweepRun:
    """One pretraining run of the sweep (an arm at a seed, or the base) in ``args.output_dir``: its settings are
    what decides the result (:func:`corefbert.pretraining.run.pretraining_settings` and the schedule's length)
    and the study's starting point."""
    from corefbert.pretraining.run import pretraining_settings, run_pretraining

    settings = {"max_steps": args.max_steps,
                **training_settings(args, pretraining_settings(args, splits["train"], splits["validation"])),
                "base_mlm_steps": base_mlm_steps}

    def train(resume: bool) -> dict:
        return run_pretraining(dataclasses.replace(args, resume_from_checkpoint="latest" if resume else None),
                               splits=splits)

    return SweepRun(label, Path(args.output_dir), settings, train)


#: The study's runs: finished when they hold results and final/, their settings in their marker; the starting point
#: is the study's to check (study_settings.json), not each run's.
SWEEP_RULES = SweepRules(finished=("all_results.json", "final"), marker=RUN_MARKER,
                         may_ignore=frozenset({"model_name_or_path", "start"}))


def _probe(study, train_args, eval_rows, arm: str, seed: int, model_dir: str, copy_trained: bool,
           counts: dict) -> None:
    """Every probe of one model into ``<arm>/seed_<seed>/probes/<probe>.json``; a probe whose file holds the
    same settings is reused (``counts``: probes_run / probes_reused)."""
    from corefbert.pretraining.run import rows_digest

    folder = run_dir(Path(train_args.output_dir), arm, seed) / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    probes = dict(study.coref_probes())
    quoref = study.quoref_probe()
    if quoref is not None:
        probes["quoref"] = quoref
    mrp_ratio = train_args.mrp_ratio or 0.2  # the paper's 4 : 1 where the given flags have no MRP share
    heldout = {"sequences": len(eval_rows), "mask_seed": study.probe_seed, "mrp_ratio": mrp_ratio,
               "mlm_probability": train_args.mlm_probability, "copy_trained": copy_trained,
               # The probe reads the held-out rows only (was labelled "32 train + 32 held-out", one split twice).
               "corpus": f"{len(eval_rows)} held-out rows, sha256 {rows_digest(eval_rows)}",
               "split": "mlm_repeated/mlm_other/same_candidates"}  # results from before the split lack it: probed again
    start = {"base_mlm_steps": study.base_mlm_steps}  # a probe of another starting point is not reused
    todo = [name for name, settings in (("heldout", heldout), *((n, p.settings()) for n, p in probes.items()))
            if _cached(folder / f"{name}.json", {**settings, **start}) is None]
    counts["probes_run"] += len(todo)
    counts["probes_reused"] += 1 + len(probes) - len(todo)
    if todo:
        print(f"[ablation] probing {arm}, seed {seed}: {', '.join(todo)}", flush=True)
    if "heldout" in todo:
        found = heldout_counts(model_dir, eval_rows, train_args.mlm_probability, mrp_ratio, study.probe_seed, seed)
        if not copy_trained:
            found.pop("mrp")
            found.pop("same_copy")
        _store(folder / "heldout.json", {**heldout, **start}, found)
    for name in todo[1:] if "heldout" in todo else todo:
        stale = (folder / f"{name}.json").is_file()  # other settings: start the probe over
        run = run_quoref_probe if name == "quoref" else run_coref_probe
        results = run(probes[name], model_dir, folder / name, seed, train_args.mixed_precision, stale)
        _store(folder / f"{name}.json", {**probes[name].settings(), **start}, results)


def _cached(path: Path, settings: dict):
    saved = read_record(str(path), "delete it: the probe runs again")
    return saved.get("results") if saved is not None and saved.get("settings") == json_value(settings) else None


def _store(path: Path, settings: dict, results: dict) -> None:
    replace_file(path, json.dumps({"settings": settings, "results": results}))  # never a half file that reads as done


# ------------------------------------------------------------------------------------------- collect


def probe_table(root: Path, arms: list[str], seeds: list[int]) -> tuple[dict, list[str]]:
    """``{probe: {arm: {seed: (kind, counts [examples, components])}}}`` from the probe files on disk, and
    what is missing (``arm/seed_N: reason``)."""
    table, missing, empty, settings = {}, [], set(), {}
    for arm in [BACKBONE] + arms:
        for seed in seeds:
            folder = run_dir(root, arm, seed) / "probes"
            found = sorted(folder.glob("*.json")) if folder.is_dir() else []
            if not found:
                missing.append(f"{arm}/seed_{seed}: no probe results")
                empty.add((arm, seed))
            for path in found:
                saved = read_json(str(path))
                settings.setdefault(path.stem, saved["settings"])
                for probe, (kind, counts) in _flatten(path.stem, saved["results"]).items():
                    table.setdefault(probe, {}).setdefault(arm, {})[seed] = (kind, np.asarray(counts, dtype=float))
    for probe, by_arm in table.items():
        for arm in by_arm:
            missing += [f"{arm}/seed_{s}: no {probe}" for s in seeds if s not in by_arm[arm] and (arm, s) not in empty]
    table["settings"] = settings  # popped by the caller: what the probes on disk were run with
    order = ("held-out MLM", "held-out MRP", "QUOREF", "zero-shot", "eq. 5")  # the table's row order
    rows = list(HELDOUT_ROWS.values())  # the held-out parts in their own order: all, repeated, other, MRP
    return dict(sorted(table.items(), key=lambda item: (next(i for i, o in enumerate(order + ("",))
                                                             if item[0].startswith(o)),
                                                        rows.index(item[0]) if item[0] in rows else 0,
                                                        item[0]))), missing




def _flatten(name: str, results: dict) -> dict[str, tuple[str, list]]:
    if name == "heldout":
        return {HELDOUT_ROWS.get(key, key): ("ratio", value) for key, value in results.items()}
    if name == "quoref":
        return {f"QUOREF dev {label}": ("ratio", results[key]) for key, label in (("exact_match", "EM"),
                                                                                 ("f1", "F1"))}
    kind = "zero-shot" if name.startswith("zeroshot_") else f"eq. 5 on {name[len('finetune_'):]}"
    return {f"{kind}: {stem} {'F1' if r['kind'] == 'gap_f1' else 'accuracy'}": (r["kind"], r["counts"])
            for stem, r in results.items()}


def summarize(table: dict, arms: list[str], study: AblationArguments) -> dict:
    """Per probe: each arm's per-seed figures, mean and std (ddof 1), and the paired bootstrap CI of
    corefbert - wwm over the seeds both have."""
    out = {}
    for probe, by_arm in table.items():
        entry = {"arms": {}}
        for arm in [BACKBONE] + arms:
            if arm not in by_arm:
                continue
            values = {seed: float(statistic(kind, counts.sum(axis=0))) for seed, (kind, counts) in
                      sorted(by_arm[arm].items())}
            v = np.array(list(values.values()))
            entry["arms"][arm] = {"per_seed": values, "mean": float(v.mean()),
                                  "std": float(v.std(ddof=1)) if len(v) > 1 else None}
        a, b = (by_arm.get(arm, {}) for arm in CONTRAST)
        common = [s for s in sorted(a) if s in b and a[s][1].shape == b[s][1].shape]
        if common:
            kind = a[common[0]][0]
            entry["ci"] = paired_bootstrap(functools.partial(statistic, kind), np.stack([a[s][1] for s in common]),
                                           np.stack([b[s][1] for s in common]), study.bootstrap_samples,
                                           study.probe_seed)
        out[probe] = entry
    return out


def pretraining_figures(root: Path, arms: list[str], seeds: list[int]) -> dict:
    """Each run's own held-out figures before/after (``all_results.json``) and the tokens it trained on."""
    out = {}
    for arm in arms:
        for seed in seeds:
            folder = run_dir(root, arm, seed)
            if not (folder / "all_results.json").is_file():
                continue
            figures = read_json(str(folder / "all_results.json"))
            train = [r for r in read_log(log_path(folder)) if r.get("split") == "train"]
            figures["train_tokens"] = train[-1]["tokens"] if train else None
            figures["train_steps"] = train[-1]["step"] if train else None
            flags = recorded_settings(folder, RUN_MARKER)  # None: trained elsewhere, flags unknown
            figures["copy_trained"] = trains_copy_head(SimpleNamespace(**flags)) if flags else None
            out.setdefault(arm, {})[str(seed)] = figures
    return out


def collect(root: Path, arms: list[str], seeds: list[int], study: AblationArguments, plot: bool = True) -> dict:
    """Write ``study.json``, ``study.md`` and (with ``plot``) ``curves.png`` from what ``root`` holds; returns the
    JSON."""
    from corefbert.ablation.report import plot_study, write_markdown

    root = Path(root)
    table, missing = probe_table(root, arms, seeds)
    probe_settings = table.pop("settings")
    result = {"arms": arms, "seeds": seeds, "contrast": list(CONTRAST), "probes": summarize(table, arms, study),
              "pretraining": pretraining_figures(root, arms, seeds), "missing": missing,
              "probe_settings": probe_settings, "study": dataclasses.asdict(study)}
    root.mkdir(parents=True, exist_ok=True)
    replace_file(root / "study.json", json.dumps(result, indent=2))
    write_markdown(root / "study.md", result)
    if not plot:
        return result
    logs = {(arm, seed): log_path(run_dir(root, arm, seed)) for arm in arms for seed in seeds}
    copy_trained = {(arm, int(seed)) for arm, runs in result["pretraining"].items() for seed, figures in runs.items()
                    if figures["copy_trained"] is not False}
    base_log = log_path(root / BASE) if study.base_mlm_steps else None
    figure = plot_study({key: path for key, path in logs.items() if path.is_file()}, root / "curves.png",
                        copy_trained, base_log)
    result["plot"] = str(figure) if figure else None
    return result
