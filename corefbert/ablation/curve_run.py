"""Running the ablation curve (:mod:`corefbert.ablation.curve` says what a curve is): train every arm of every
seed to each point, save the point, probe it and the start, and rewrite the curve's table after each point
(:mod:`corefbert.ablation.curve_report`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from corefbert.ablation import curve
from corefbert.ablation.curve import (
    CURVE_SCHEDULE,
    START,
    ProbeSite,
    check_curve_flags,
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
from corefbert.training.checkpointing import list_checkpoints
from corefbert.training.sweep import recorded_settings, run_one


def curve_arm_args(train_args, study, arm: str, seed: int, run: Path, start: str, steps: int):
    """An arm's pretraining flags up to a point: the study's flags, the arm's, and the curve's schedule."""
    return dataclasses.replace(train_args, output_dir=str(run), seed=seed, model_name_or_path=start, plot=False,
                               max_steps=steps, lr_scheduler_type=CURVE_SCHEDULE, warmup_ratio=0.0,
                               warmup_steps=study.curve_warmup_steps, **ARMS[arm])



def run_curve(study, train_args, corpus_args=None) -> dict:
    """Train every arm x seed to every point of ``--curve_tokens`` still missing (point by point, every arm of a
    point before the next point), probe each saved point and the start, and write the curve after each point."""
    study.validate()
    check_curve_flags(study)

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
    probes = curve.point_probes(study)  # through the module, as the report reads it: one table for both
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
