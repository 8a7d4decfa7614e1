"""Running the ablation curve (:mod:`corefbert.ablation.curve` says what a curve is): train every arm of every
seed to each point, save the point, probe it and the start, and rewrite the curve's table after each point
(:mod:`corefbert.ablation.curve_report`)."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from corefbert.ablation import curve
from corefbert.ablation.curve import (
    CURVE_SCHEDULE,
    START,
    ProbeSite,
    check_curve_flags,
    cooldown_dir,
    cooldown_steps,
    mean_row_tokens,
    parse_tokens,
    point_dir,
    point_steps,
    run_probes,
    save_point,
    saved_point,
    token_label,
)
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
from corefbert.errors import CorefBertError
from corefbert.text.durable import remove_folder, replace_folder
from corefbert.training.checkpoints.folders import checkpoints_root, is_complete, list_checkpoints
from corefbert.training.sweep import SweepRun, recorded_settings, run_one, run_sweep


def curve_arm_args(train_args, study, arm: str, seed: int, run: Path, start: str, steps: int, cooldown: int = 0):
    """An arm's pretraining flags up to a point: the study's flags, the arm's, and the curve's schedule (warm-up,
    constant; with ``cooldown`` steps, a linear decay to 0 over the last of them: the same LR as the trunk's
    before it)."""
    schedule = ({"lr_scheduler_type": "warmup_stable_decay", "lr_decay_steps": cooldown} if cooldown
                else {"lr_scheduler_type": CURVE_SCHEDULE})
    return dataclasses.replace(train_args, output_dir=str(run), seed=seed, model_name_or_path=start, plot=False,
                               max_steps=steps, warmup_ratio=0.0, warmup_steps=study.curve_warmup_steps,
                               **schedule, **ARMS[arm])


@dataclass(frozen=True)
class CurvePoint:
    """One arm at one seed and point: the trunk's steps up to the fork and the cooldown's after it."""

    tokens: int
    seed: int
    arm: str
    step: int  # the point's optimizer step
    cooldown: int  # its cooldown's steps (0: the point is the trunk's own weights)

    @property
    def fork(self) -> int:
        """The trunk's step the point branches off (its own step without a cooldown)."""
        return self.step - self.cooldown


def curve_points(study, points: list[int], seeds: list[int], arms: list[str], steps: dict[int, int]) -> list:
    """Every point of every seed and arm, point by point (every arm of a point before the next point); two points
    whose forks fall on one step, or a fork inside the warm-up, are refused."""
    found = []
    for tokens in points:
        cooldown = cooldown_steps(steps[tokens], study.curve_cooldown)
        found += [CurvePoint(tokens, seed, arm, steps[tokens], cooldown) for seed in seeds for arm in arms]
    forks = {}
    for point in found:
        if point.cooldown and point.fork < study.curve_warmup_steps:
            raise CorefBertError(f"--curve_tokens {token_label(point.tokens)}: its cooldown would start at step "
                                 f"{point.fork}, inside the {study.curve_warmup_steps} warm-up steps; drop the point, "
                                 "or lower --curve_warmup_steps or --curve_cooldown")
        if forks.setdefault(point.fork, point.tokens) != point.tokens:
            raise CorefBertError(f"--curve_tokens: {token_label(forks[point.fork])} and {token_label(point.tokens)} "
                                 f"branch off the same step ({point.fork}); drop one")
    return found


#: What a curve run counts, reported in its summary: runs by outcome, points, probes.
CURVE_COUNTS = ("trained", "resumed", "finished_before", "points_saved", "points_kept", "probes_run", "probes_reused")


def slow_points(study, points: list[int]) -> set[int]:
    """The points whose fine-tuning probes are due (``--curve_slow_probes``: ``last``, ``all`` or a list)."""
    if study.curve_slow_probes == "last":
        return set(points[-1:])
    return set(points) if study.curve_slow_probes == "all" else set(parse_tokens(study.curve_slow_probes))


def _probe_if_saved(root: Path, point, probe, counts: dict) -> bool:
    """Probe ``point`` if it is saved (a probe added to the table runs there, alone) and say so; False when the
    point is still to train. A point saved with another cooldown is one line."""
    folder = point_dir(run_dir(root, point.arm, point.seed), point.tokens)
    record = saved_point(folder)
    if record is None:
        return False
    if record.get("cooldown_steps", 0) != point.cooldown:
        raise CorefBertError(f"this point was saved with {record.get('cooldown_steps', 0)} cooldown steps, the "
                             f"command asks for {point.cooldown} (--curve_cooldown); use the curve's own "
                             "--curve_cooldown, or another --output_dir", path=folder)
    counts["points_kept"] += 1
    probe(point.arm, point.seed, point.tokens, folder, folder)
    return True


def run_curve(study, train_args, corpus_args=None) -> dict:
    """Train every arm x seed to every point of ``--curve_tokens`` still missing (point by point, every arm of a
    point before the next point: the trunk to the point's fork, then the point's cooldown), probe each saved point
    and the start, and write the curve after each point. The points are one sweep
    (:mod:`corefbert.training.sweep`)."""
    study.validate()
    check_curve_flags(study)

    arms, root = study.arm_list(), Path(train_args.output_dir)
    if train_args.checkpointing_steps in (None, "epoch"):
        raise CorefBertError("the curve continues each run from its checkpoint at the last point: give "
                             "--checkpointing_steps N (the presets do)")
    points = parse_tokens(study.curve_tokens)
    seeds = [train_args.seed + k for k in range(study.seeds)]
    counts = dict.fromkeys(CURVE_COUNTS, 0)
    check_study_settings(root, study, train_args)
    if study.collect_only:
        return _finish(collect_curve(root, study, seeds, points), counts, root)
    splits = study_corpus(train_args, corpus_args)
    eval_rows = splits["validation"].select(range(min(study.probe_sequences, len(splits["validation"]))))
    per_step = (train_args.per_device_train_batch_size * train_args.gradient_accumulation_steps
                * mean_row_tokens(splits["train"]))
    todo = curve_points(study, points, seeds, arms, point_steps(points, per_step))
    for arm in arms:  # every arm's flags, before hours of training
        curve_arm_args(train_args, study, arm, train_args.seed, root / "check", "start", 2, 1).validate()
    start = train_args.model_name_or_path
    if study.base_mlm_steps:
        start, counts["base"] = train_base(study, train_args, splits)
    rules = dataclasses.replace(SWEEP_RULES, continues=("max_steps",))
    probes = curve.point_probes(study)  # through the module, as the report reads it: one table for both
    slow = slow_points(study, points)

    def probe(arm, seed, tokens, model_dir, folder):
        copy = arm != START and trains_copy_head(dataclasses.replace(train_args, **ARMS[arm]))
        site = ProbeSite(study, train_args, eval_rows, arm, seed, tokens, str(model_dir), Path(folder), copy,
                         tokens in slow or (tokens == 0 and bool(slow)))
        run_probes(site, probes, counts)

    def segment(point: CurvePoint, run: Path, steps: int, cooldown: int = 0):
        args = curve_arm_args(train_args, study, point.arm, point.seed, run, start, steps, cooldown)
        what = f"cooldown to step {steps} from {point.fork}" if cooldown else f"to step {steps}"
        return arm_run(args, splits, f"curve: {point.arm}, seed {point.seed}, {token_label(point.tokens)} ({what})",
                       study.base_mlm_steps)

    def before_run(point: CurvePoint) -> None:  # the trunk to the point's fork, and the fork of its cooldown
        trunk = run_dir(root, point.arm, point.seed)
        branch = cooldown_dir(trunk, point.tokens)
        if point.cooldown and list_checkpoints(branch):
            return  # forked before: the branch continues from its own checkpoints
        _refuse_passed_point(trunk, point)
        if not point.cooldown:
            return  # the point is the trunk's own step: the sweep's run
        outcome, _ = run_one(segment(point, trunk, point.fork), rules)
        counts[outcome] += 1
        _check_final_step(trunk, rules.marker, point.fork)
        fork_checkpoint(trunk, point.fork, branch)

    def make_run(point: CurvePoint) -> SweepRun:
        trunk = run_dir(root, point.arm, point.seed)
        if not point.cooldown:
            return segment(point, trunk, point.step)
        return segment(point, cooldown_dir(trunk, point.tokens), point.step, point.cooldown)

    def after_run(point: CurvePoint, _results) -> None:  # save the point, probe it, rewrite the table
        trunk = run_dir(root, point.arm, point.seed)
        source = cooldown_dir(trunk, point.tokens) if point.cooldown else trunk
        _check_final_step(source, rules.marker, point.step)
        save_point(trunk, point.tokens, point.step, source, point.cooldown)
        counts["points_saved"] += 1
        probe(point.arm, point.seed, point.tokens, point_dir(trunk, point.tokens), point_dir(trunk, point.tokens))
        collect_curve(root, study, seeds, points, plot=False)

    if not study.skip_backbone:
        for seed in seeds:
            probe(START, seed, 0, start, run_dir(root, START, seed))
    missing = [point for point in todo if not _probe_if_saved(root, point, probe, counts)]
    for outcome, n in run_sweep(missing, make_run, rules, before_run, after_run).items():
        counts[outcome] += n
    return _finish(collect_curve(root, study, seeds, points), counts, root)


def fork_checkpoint(trunk: Path, step: int, branch: Path) -> Path:
    """Copy the trunk's checkpoint of ``step`` into the cooldown branch's own checkpoints (whole or not at all), so
    the branch resumes from it and the trunk's later checkpoints, rotated or not, never touch it."""
    source = checkpoints_root(trunk) / f"step_{step}"
    if not is_complete(source):
        raise CorefBertError(f"the trunk has no complete checkpoint of step {step} to branch the cooldown off; delete "
                             "the trunk's later checkpoints' run to train it again, or drop the point", path=trunk)
    target = checkpoints_root(branch) / source.name
    partial = target.with_name(target.name + ".partial")
    remove_folder(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, partial)
    replace_folder(partial, target)
    return target


def _check_final_step(run: Path, marker: str, step: int) -> None:
    """``final/`` holds the weights of ``step``: the sweep's record says so, or (killed before the record was
    written) the run's newest checkpoint, saved before ``final/``, is that step's."""
    recorded = recorded_settings(run, marker)
    found = list_checkpoints(run)
    at = recorded.get("max_steps") if recorded is not None else (found[-1][0] if found else None)
    if at != step:
        raise CorefBertError(f"the run's final/ is not the weights of step {step} (the run says {at}); delete the "
                             "run to train it again", path=run)


def _refuse_passed_point(run: Path, point: CurvePoint) -> None:
    """A point whose fork lies before the trunk's latest checkpoint cannot be made without training it again."""
    found = list_checkpoints(run)
    if found and found[-1][0] > point.fork:
        where = f"branches off step {point.fork}" if point.cooldown else f"is step {point.step}"
        raise CorefBertError(f"--curve_tokens {token_label(point.tokens)} {where}, before step {found[-1][0]}, which "
                             "this run has passed; a point can only be added after the last one trained (drop it, "
                             "or train the arm again in another --output_dir)", path=run)


def _finish(result: dict, counts: dict, root: Path) -> dict:
    result["runs"] = counts
    print(f"[curve] segments: {counts['trained']} trained, {counts['resumed']} continued, {counts['finished_before']} "
          f"finished before; points: {counts['points_saved']} saved, {counts['points_kept']} kept; probes: "
          f"{counts['probes_run']} run, {counts['probes_reused']} reused; wrote {root / 'curve.md'}", flush=True)
    return result
