"""The one sweep runner (corefbert/training/sweep.py) on fake runs that write what a real run writes:
finished runs kept or refused, started ones resumed, the marker written last, the table rewritten after each run.
The ablation study (tests/ablation/) and the bAbI table (tests/tasks/babi/) run it on real training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corefbert.errors import CorefBertError
from corefbert.training.sweep import SweepRules, SweepRun, run_one, run_sweep

SETTINGS = {"learning_rate": 0.01, "seed": 42, "model_name_or_path": "start", "max_steps": 3}
MARKER = SweepRules(finished=("all_results.json", "final"), marker="sweep_run.json",
                    may_ignore=frozenset({"model_name_or_path"}))


def _fake_run(out: Path, calls: list, settings: dict | None = None, fail: bool = False) -> SweepRun:
    """A run that, like a real one, writes its results and final/ when it ends (or dies half-way)."""
    def train(resume: bool) -> dict:
        calls.append((out.name, resume))
        out.mkdir(parents=True, exist_ok=True)
        (out / "log.jsonl").write_text("{}\n")
        if fail:
            raise RuntimeError("killed")
        (out / "final").mkdir(exist_ok=True)
        (out / "all_results.json").write_text(json.dumps({"accuracy": len(calls)}))
        return {"accuracy": len(calls)}

    return SweepRun(f"run {out.name}", out, dict(settings or SETTINGS), train)


def test_a_sweep_keeps_finished_runs_resumes_started_ones_and_rewrites_the_table_after_each(tmp_path, capsys):
    calls, table = [], []
    runs = {name: tmp_path / name for name in ("done", "started", "fresh")}
    _fake_run(runs["done"], []).train(False)
    (runs["done"] / "sweep_run.json").write_text(json.dumps(SETTINGS))
    runs["started"].mkdir()
    (runs["started"] / "log.jsonl").write_text("{}\n")  # killed before it finished

    def after_run(point, results):
        table.append((point, results, (runs[point] / "sweep_run.json").is_file()))

    counts = run_sweep(list(runs), lambda name: _fake_run(runs[name], calls), MARKER, after_run=after_run)
    assert counts == {"trained": 1, "resumed": 1, "finished_before": 1}
    assert calls == [("started", True), ("fresh", False)]  # the finished run is not trained again
    # the kept run's results come back from its all_results.json; the marker is there before the table is written
    assert table == [("done", {"accuracy": 1}, True), ("started", {"accuracy": 1}, True),
                     ("fresh", {"accuracy": 2}, True)]
    assert json.loads((runs["fresh"] / "sweep_run.json").read_text()) == SETTINGS
    printed = capsys.readouterr().out
    assert "[1/3] run done" in printed and f"run done: finished in {runs['done']}, kept" in printed


def test_a_run_killed_before_it_finished_has_no_marker_and_resumes(tmp_path):
    calls = []
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="killed"):
        run_one(_fake_run(out, calls, fail=True), MARKER)
    assert not (out / "sweep_run.json").exists()
    assert run_one(_fake_run(out, calls), MARKER) == ("resumed", {"accuracy": 2})
    assert calls == [("run", False), ("run", True)] and (out / "sweep_run.json").is_file()


def test_a_finished_run_with_changed_settings_is_refused_in_one_line(tmp_path):
    calls = []
    out = tmp_path / "run"
    run_one(_fake_run(out, calls), MARKER)
    with pytest.raises(CorefBertError) as refused:
        run_one(_fake_run(out, calls, {**SETTINGS, "learning_rate": 0.02, "max_steps": 4}), MARKER)
    assert str(refused.value) == (f"{out}: this finished run was trained with other settings (learning_rate, "
                                  "max_steps: 0.01 then, 0.02 now); use another --output_dir or delete the run to "
                                  "train it again")
    # a setting the rules let a finished run ignore keeps it; one its record lacks (another version's) does not
    moved = {**SETTINGS, "model_name_or_path": "elsewhere"}
    assert run_one(_fake_run(out, calls, moved), MARKER)[0] == "finished_before"
    with pytest.raises(CorefBertError, match=r"\(optim: None then, 'adagrad' now\)"):
        run_one(_fake_run(out, calls, {**SETTINGS, "optim": "adagrad"}), MARKER)
    assert calls == [("run", False)]


def test_a_finished_run_without_a_marker_was_trained_elsewhere_and_is_kept(tmp_path):
    out = tmp_path / "run"
    _fake_run(out, []).train(False)
    assert run_one(_fake_run(out, [], {**SETTINGS, "learning_rate": 0.5}), MARKER)[0] == "finished_before"


def _finished_with_checkpoint(out: Path, lengths: dict) -> Path:
    """A fine-tuning run's folder at its end: results, its arguments, and a checkpoint recording its settings."""
    checkpoint = out / "checkpoints" / "step_6"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 6, "settings": {
        "learning_rate": 0.01, "seed": 42, "num_processes": 1, "task_args": {"hidden_size": 8}}}))
    (out / "all_results.json").write_text('{"eval_accuracy": 0.5}')
    (out / "finetuning_args.json").write_text(json.dumps(lengths))
    return checkpoint


def test_without_a_marker_the_newest_checkpoint_is_the_record_and_a_longer_schedule_continues(tmp_path, capsys):
    out = tmp_path / "run"
    checkpoint = _finished_with_checkpoint(out, {"max_steps": -1, "num_train_epochs": 2.0})
    rules = SweepRules(continues=("max_steps", "num_train_epochs"))
    calls = []
    current = {"learning_rate": 0.01, "seed": 42, "task_args": {"hidden_size": 8}, "max_steps": -1,
               "num_train_epochs": 2.0}
    assert run_one(_fake_run(out, calls, current), rules) == ("finished_before", {"eval_accuracy": 0.5})
    with pytest.raises(CorefBertError) as refused:  # the line a resume gives, naming the key within a dict
        run_one(_fake_run(out, calls, {**current, "task_args": {"hidden_size": 4}}), rules)
    assert str(refused.value).startswith(f"{checkpoint}: cannot resume: task_args.hidden_size was 8 in this "
                                         "checkpoint but is 4 now")
    changed = {**current, "learning_rate": 0.02}
    ignoring = SweepRules(continues=rules.continues, ignore_changed_settings=True)
    assert run_one(_fake_run(out, calls, changed), ignoring)[0] == "finished_before"
    assert "warning: learning_rate changed since the checkpoint (0.01 -> 0.02)" in capsys.readouterr().out
    assert calls == []
    assert run_one(_fake_run(out, calls, {**current, "num_train_epochs": 4.0}), rules)[0] == "resumed"
    assert calls == [("run", True)]  # continued from its latest checkpoint


def test_without_keep_finished_every_run_trains_as_told(tmp_path):
    out = tmp_path / "run"
    _finished_with_checkpoint(out, {})
    calls = []
    assert run_one(_fake_run(out, calls), SweepRules(keep_finished=False))[0] == "trained"
    assert calls == [("run", False)]


def test_a_finished_run_without_the_wanted_results_is_evaluated_not_kept(tmp_path, capsys):
    import dataclasses

    calls = []
    out = tmp_path / "run"
    _fake_run(out, calls).train(False)
    (out / "sweep_run.json").write_text(json.dumps(SETTINGS))
    evaluated = {"accuracy": 1, "eval_accuracy": 0.5}
    run = dataclasses.replace(_fake_run(out, calls), wanted=("eval_accuracy",),
                              evaluate=lambda: calls.append("evaluate") or evaluated)
    counts = run_sweep(["run"], lambda _: run, MARKER)
    assert counts["evaluated"] == 1 and calls == [("run", False), "evaluate"]  # evaluated, not trained again
    assert f"run run: finished in {out} without eval_accuracy, evaluated" in capsys.readouterr().out
    (out / "all_results.json").write_text(json.dumps(evaluated))
    assert run_one(run, MARKER) == ("finished_before", evaluated)  # with its results: kept
