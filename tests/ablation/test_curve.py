"""The ablation as a curve over tokens (``--curve_tokens``) on a tiny BERT and a synthetic corpus: every
point saved and probed, a longer list continuing the same runs without training a finished point again, a
schedule whose weights at a point do not depend on the budget, probes cached per (arm, seed, point, probe), and
the plot written."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, run_cli_main

from corefbert.ablation import curve
from corefbert.ablation.curve import (
    POINT_RECORD,
    PointProbe,
    RowKind,
    mean_row_tokens,
    parse_tokens,
    point_dir,
)

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")
COREF = FIXTURES / "coref"
ARMS = ("corefbert", "mrm", "wwm")
SEED = 7
BATCH = 4


def _argv(model_dir, corpus_dir, out, points, *extra) -> list[str]:
    return ["--model_name_or_path", str(model_dir), "--dataset_dir", str(corpus_dir), "--output_dir", str(out),
            "--arms", ",".join(ARMS), "--seeds", "1", "--seed", str(SEED), "--curve_tokens", points,
            "--curve_warmup_steps", "0", "--per_device_train_batch_size", str(BATCH), "--per_device_eval_batch_size",
            "8", "--learning_rate", "1e-3", "--eval_steps", "2", "--checkpointing_steps", "1", "--logging_steps", "1",
            "--max_eval_samples", "6", "--probe_sequences", "6", "--bootstrap_samples", "100",
            "--base_mlm_steps", "2", "--zero_shot_file", str(COREF / "blocks.txt"), str(COREF / "gap.tsv"),
            "--no_curve_default_zero_shot", *extra]


def _run(argv):
    return run_cli_main("pretrain/run_ablation.py", argv)


def _points(corpus_dir, *steps: int) -> str:
    """Token counts that fall on these optimizer steps of the test corpus (``ceil(tokens / per_step)``)."""
    from datasets import load_from_disk

    per_step = BATCH * mean_row_tokens(load_from_disk(str(corpus_dir))["train"])
    return ",".join(str(int(k * per_step)) for k in steps)


def _digest(folder: Path) -> str:
    from safetensors.numpy import load_file

    digest = hashlib.sha256()
    for name, array in sorted(load_file(str(folder / "model.safetensors")).items()):
        digest.update(name.encode() + array.tobytes())
    return digest.hexdigest()


class StepCounter:
    """Counts the training steps (micro-batches) of every run in the process, by output folder."""

    def __init__(self, monkeypatch, fail_at: int | None = None):
        from corefbert.pretraining.run import PretrainingJob

        self.steps: list[str] = []
        step = PretrainingJob.training_step
        counter = self

        def counted(job, model, batch):
            counter.steps.append(str(job.logger.output_dir))
            if fail_at is not None and len(counter.steps) == fail_at:
                raise RuntimeError("killed")
            return step(job, model, batch)

        monkeypatch.setattr(PretrainingJob, "training_step", counted)

    def by_arm(self, root: Path) -> dict[str, int]:
        """Steps per arm, its trunk and its cooldown branches together."""
        return {arm: sum(Path(s).is_relative_to(root / arm) for s in self.steps) for arm in ARMS}


@pytest.fixture(scope="module")
def full_curve(tmp_path_factory, tiny_bert_dir, corpus_dir):
    """The curve to steps 2 and 4 in one command."""
    out = tmp_path_factory.mktemp("curve") / "study"
    points = _points(corpus_dir, 2, 4)
    return out, points, _run(_argv(tiny_bert_dir, corpus_dir, out, points))


def test_every_arm_saves_every_point_and_every_probe_runs_there(full_curve):
    out, points, result = full_curve
    first, second = parse_tokens(points)
    for arm in ARMS:
        for tokens, step in ((first, 2), (second, 4)):
            record = json.loads((point_dir(out / arm / f"seed_{SEED}", tokens) / POINT_RECORD).read_text())
            assert record["step"] == step and record["tokens"] == tokens and record["trained_tokens"] > 0
            assert (point_dir(out / arm / f"seed_{SEED}", tokens) / "model.safetensors").is_file()
    assert result["runs"]["points_saved"] == 6 and result["missing"] == []
    # The arms of one seed see the same rows: one trained-token count per point.
    assert all(len(seen) == 1 for seen in result["trained_tokens"].values())
    rows = result["rows"]
    for row in ("held-out MLM accuracy: repeated mentions", "held-out MLM accuracy: other masked words",
                "zero-shot: blocks accuracy", "zero-shot: gap F1"):
        for tokens in (first, second):
            entry = rows[row][str(tokens)]
            assert sorted(entry["arms"]) == sorted(ARMS) and sorted(entry["vs_wwm"]) == ["corefbert", "mrm"], row
            ci = entry["vs_wwm"]["corefbert"]
            assert ci["ci_low"] <= ci["difference"] <= ci["ci_high"]
        assert list(rows[row]["0"]["arms"]) == ["backbone"]  # the start, probed once
    # The copy head scores the pronoun files only where it trains, beside WWM's masked-LM scoring.
    copy = rows["zero-shot, copy head: blocks accuracy"][str(second)]
    assert list(copy["arms"]) == ["corefbert"] and list(copy["vs_wwm"]) == ["corefbert"]
    # CorefBERT against MRM (table 7's question) beside every arm against WWM, each with its per-seed values and
    # minimum detectable effect; the trained copy head against its own untrained V on the same checkpoint.
    for tokens in (first, second):
        entry = rows["held-out MLM accuracy: repeated mentions"][str(tokens)]
        ci = entry["vs_mrm"]["corefbert"]
        assert list(entry["vs_mrm"]) == ["corefbert"]
        assert ci["mde"] == pytest.approx(2.8 * (ci["ci_high"] - ci["ci_low"]) / 3.92)
        assert list(entry["vs_mrm"]["corefbert"]["per_seed"]) == [str(SEED)]
        assert list(rows["zero-shot, copy head: gap F1"][str(tokens)]["vs_control"]) == ["corefbert"]
        assert sorted(rows["zero-shot, copy head, untrained V: gap F1"][str(tokens)]["arms"]) == sorted(ARMS)
        same = rows["same candidates, masked mentions recovered: copy head"][str(tokens)]
        assert sorted(same["vs_wwm"]) == sorted(same["vs_mrm"]) == sorted(same["vs_control"]) == ["corefbert"]
    table = (out / "curve.md").read_text()
    assert "zero-shot, copy head: gap F1" in table and "| CorefBERT − MRM |" in table
    assert "trained − untrained V" in table
    assert (out / "curve.png").stat().st_size > 10_000


def test_extending_a_curve_continues_its_runs_and_never_trains_a_point_again(full_curve, tmp_path, tiny_bert_dir,
                                                                            corpus_dir, monkeypatch):
    """The curve to step 2, then the same command with the longer list: each arm trains steps 3-4 only, from its
    checkpoint; the saved point and its probes stay as they were, and every weight equals the one-command curve's."""
    out_full, points, full = full_curve
    first, second = parse_tokens(points)
    out = tmp_path / "study"
    counter = StepCounter(monkeypatch)
    short = _run(_argv(tiny_bert_dir, corpus_dir, out, str(first)))
    assert counter.by_arm(out) == {arm: 2 for arm in ARMS}  # the trunk's step 1, the cooldown's step 2
    kept = {arm: (point_dir(out / arm / f"seed_{SEED}", first) / "model.safetensors").stat().st_mtime_ns
            for arm in ARMS}
    counter.steps.clear()
    longer = _run(_argv(tiny_bert_dir, corpus_dir, out, points))
    # The trunk's steps 2-3 from its checkpoint (not 1-3), then the second point's cooldown, its step 4.
    assert counter.by_arm(out) == {arm: 3 for arm in ARMS}
    assert not any("base" in s for s in counter.steps)  # the base is reused
    assert longer["runs"]["resumed"] == 6 and longer["runs"]["trained"] == 0  # each trunk, each branch (forked)
    assert longer["runs"]["points_saved"] == 3 and longer["runs"]["points_kept"] == 3
    # Probes of the first point and the start are reused; the second point's run once per arm and probe.
    assert longer["runs"]["probes_run"] == short["runs"]["probes_run"] - 5  # minus the start's five
    for arm in ARMS:
        folder = out / arm / f"seed_{SEED}"
        assert (point_dir(folder, first) / "model.safetensors").stat().st_mtime_ns == kept[arm]
        for tokens in (first, second):
            assert _digest(point_dir(folder, tokens)) == _digest(point_dir(out_full / arm / f"seed_{SEED}", tokens))
        # The log continues: the losses of steps 3-4 are the one-command curve's.
        losses = [(r["step"], r["loss"]) for r in map(json.loads, (folder / "log.jsonl").read_text().splitlines())
                  if r.get("split") == "train"]
        full_losses = [(r["step"], r["loss"]) for r in
                       map(json.loads, (out_full / arm / f"seed_{SEED}" / "log.jsonl").read_text().splitlines())
                       if r.get("split") == "train"]
        assert [s for s, _ in losses] == [s for s, _ in full_losses] == [1, 2, 3]  # the trunk, to the last fork
        assert [loss for _, loss in losses] == pytest.approx([loss for _, loss in full_losses])
    assert longer["rows"] == full["rows"]
    # A rerun of the same command trains and probes nothing.
    counter.steps.clear()
    again = _run(_argv(tiny_bert_dir, corpus_dir, out, points))
    assert counter.steps == [] and again["runs"]["probes_run"] == 0 and again["runs"]["points_kept"] == 6


def test_an_annealed_point_is_the_uninterrupted_run_with_its_cooldown(full_curve, tmp_path, tiny_bert_dir,
                                                                     corpus_dir):
    """The point of step 4 (a cooldown of 1 step branched off the trunk's step 3) equals one uninterrupted run of 4
    steps under warmup-stable-decay, bit for bit; the trunk's step 3 equals that of an uninterrupted constant-LR
    run of 4 steps (the trunk's weights do not depend on the budget); under a linear decay to the last step they
    do not (the reason for the trunk's schedule)."""
    import dataclasses

    from safetensors.torch import load_file

    from corefbert.ablation.cli import parse
    from corefbert.ablation.curve_run import curve_arm_args
    from corefbert.pretraining.run import run_pretraining

    out_full, points, _ = full_curve
    _, second = parse_tokens(points)
    study, train_args, _ = parse(_argv(tiny_bert_dir, corpus_dir, out_full, points))
    base = str(out_full / "base" / "final")
    run = out_full / "corefbert" / f"seed_{SEED}"
    record = json.loads((point_dir(run, second) / POINT_RECORD).read_text())
    assert record["step"] == 4 and record["cooldown_steps"] == 1

    def weights(folder):
        return load_file(str(folder / "model.safetensors"))

    def equal(a, b):
        return all(np.array_equal(a[name].numpy(), b[name].numpy()) for name in a)

    annealed = curve_arm_args(train_args, study, "corefbert", SEED, tmp_path / "wsd", base, 4, 1)
    run_pretraining(dataclasses.replace(annealed, save_total_limit=0))
    assert equal(weights(tmp_path / "wsd" / "final"), weights(point_dir(run, second)))
    trunk_step_3 = weights(run / "checkpoints" / "step_3")
    for schedule, same in (("constant_with_warmup", True), ("linear", False)):
        args = curve_arm_args(train_args, study, "corefbert", SEED, tmp_path / schedule, base, 4)
        run_pretraining(dataclasses.replace(args, lr_scheduler_type=schedule, save_total_limit=0))
        assert equal(weights(tmp_path / schedule / "checkpoints" / "step_3"), trunk_step_3) is same, schedule


def test_a_cooldown_leaves_the_trunk_untouched(tmp_path, tiny_bert_dir, corpus_dir):
    """The branch trains from its own copy of the trunk's checkpoint: the trunk's checkpoints, log and final/ are
    byte for byte what they were after its segment, and the branch's log starts at the fork."""
    out = tmp_path / "study"
    first = _points(corpus_dir, 2)
    seen = {}

    def snapshot(folder: Path) -> dict:
        return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
                if p.is_file() and curve.COOLDOWN not in p.relative_to(folder).parts and curve.POINTS not in
                p.relative_to(folder).parts and "ablation_run.json" != p.name}

    from corefbert.ablation import curve_run

    fork = curve_run.fork_checkpoint

    def forked(trunk, step, branch):
        seen[trunk] = snapshot(trunk)
        return fork(trunk, step, branch)

    import unittest.mock

    with unittest.mock.patch.object(curve_run, "fork_checkpoint", forked):
        _run(_argv(tiny_bert_dir, corpus_dir, out, first, "--arms", "corefbert"))
    trunk = out / "corefbert" / f"seed_{SEED}"
    assert seen[trunk] and snapshot(trunk) == seen[trunk]
    branch = curve.cooldown_dir(trunk, int(first))
    records = [json.loads(line) for line in (branch / "log.jsonl").read_text().splitlines()]
    assert records[0]["split"] == "resume" and records[0]["step"] == 1
    assert [r["step"] for r in records if r.get("split") == "train"] == [2]


def test_a_resume_may_change_the_schedule_only_after_its_step(tmp_path, tiny_bert_dir, corpus_dir, capsys):
    """From a constant-LR checkpoint, a warmup-stable-decay resume whose decay starts after it is the same run so
    far (accepted, with one line); a linear decay, which would have given other LRs already, is refused."""
    import dataclasses

    from corefbert.ablation.cli import parse
    from corefbert.ablation.curve_run import curve_arm_args
    from corefbert.errors import CorefBertError
    from corefbert.pretraining.run import run_pretraining

    study, train_args, _ = parse(_argv(tiny_bert_dir, corpus_dir, tmp_path / "x", "100"))
    trunk = curve_arm_args(train_args, study, "wwm", SEED, tmp_path / "run", str(tiny_bert_dir), 2)
    run_pretraining(trunk)
    wsd = curve_arm_args(train_args, study, "wwm", SEED, tmp_path / "run", str(tiny_bert_dir), 4, 2)
    run_pretraining(dataclasses.replace(wsd, resume_from_checkpoint="latest"))
    assert "the LR schedule changes after step_2" in capsys.readouterr().out
    early = curve_arm_args(train_args, study, "wwm", SEED, tmp_path / "run", str(tiny_bert_dir), 8, 7)
    with pytest.raises(CorefBertError, match="cannot resume: lr_decay_steps was 2"):
        run_pretraining(dataclasses.replace(early, resume_from_checkpoint="latest"))
    linear = dataclasses.replace(trunk, lr_scheduler_type="linear", max_steps=6, resume_from_checkpoint="latest")
    with pytest.raises(CorefBertError, match="cannot resume: lr_scheduler_type"):
        run_pretraining(linear)


def test_a_probe_added_to_the_table_runs_alone_on_the_saved_points(full_curve, tmp_path, tiny_bert_dir, corpus_dir,
                                                                  monkeypatch):
    """How the frozen-feature probe plugs in: one more PointProbe (and its row kind) runs at every saved point and
    the start, nothing else runs again, and its rows reach the table with a difference to WWM."""
    out_full, points, _ = full_curve
    out = tmp_path / "study"
    shutil.copytree(out_full, out)
    ran = []

    def run(site, folder):
        ran.append((site.arm, site.tokens))
        return {"score": [[site.tokens % 7, 1], [1, 2]]}

    extra = PointProbe("toy", lambda site: {"version": 1}, run, lambda results: {"toy score": ("toy", results["score"])})
    tables = curve.point_probes
    monkeypatch.setattr(curve, "point_probes", lambda study: [*tables(study), extra])
    monkeypatch.setitem(curve.ROW_KINDS, "toy", RowKind(
        lambda seeds: float(np.mean([np.asarray(d)[:, 0].sum() for d in seeds])),
        lambda a, b, samples, seed: {"difference": float(np.asarray(a)[:, :, 0].sum() - np.asarray(b)[:, :, 0].sum()),
                                     "ci_low": -1.0, "ci_high": 1.0}))
    counter = StepCounter(monkeypatch)
    result = _run(_argv(tiny_bert_dir, corpus_dir, out, points))
    assert counter.steps == []
    assert result["runs"]["probes_run"] == len(ran) == 1 + 2 * len(ARMS)  # the start, and each arm at 2 points
    assert result["rows"]["toy score"][str(parse_tokens(points)[1])]["vs_wwm"]["corefbert"]["difference"] == 0
    ran.clear()
    again = _run(_argv(tiny_bert_dir, corpus_dir, out, points))
    assert ran == [] and again["runs"]["probes_run"] == 0


def test_a_killed_curve_continues_from_its_checkpoint(full_curve, tmp_path, tiny_bert_dir, corpus_dir, monkeypatch):
    """Killed in the second segment of the first arm (its step 3): the rerun continues that arm from step 3's
    checkpoint, and the curve equals the uninterrupted one."""
    out_full, points, full = full_curve
    out = tmp_path / "study"
    # base 2 steps, then the three arms to step 2 (trunk 1 + cooldown 1 each: 6 steps), then corefbert's trunk
    # step 3 is the 10th.
    counter = StepCounter(monkeypatch, fail_at=2 + 6 + 1 + 1)
    with pytest.raises(RuntimeError, match="killed"):
        _run(_argv(tiny_bert_dir, corpus_dir, out, points))
    monkeypatch.undo()
    counter = StepCounter(monkeypatch)
    result = _run(_argv(tiny_bert_dir, corpus_dir, out, points))
    # corefbert: the killed trunk step 3 again (step 2 was checkpointed), then its cooldown; the others as before.
    assert counter.by_arm(out) == {"corefbert": 2, "mrm": 3, "wwm": 3}
    assert result["runs"]["resumed"] == 6 and result["runs"]["points_kept"] == 3
    assert result["rows"] == full["rows"]


def test_a_point_the_run_has_passed_is_refused_in_one_line(full_curve, tmp_path, tiny_bert_dir, corpus_dir, capsys):
    out_full, points, _ = full_curve
    out = tmp_path / "study"
    shutil.copytree(out_full, out)
    with pytest.raises(SystemExit) as exit_info:
        _run(_argv(tiny_bert_dir, corpus_dir, out, f"{points},{_points(corpus_dir, 3)}"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "branches off step 2, before step 3, which this run has passed" in err[-1], err


@pytest.mark.parametrize("extra, message", [
    (["--curve_tokens", "1x"], "'1x' is not a token count"),
    (["--curve_slow_probes", "sometimes"], "--curve_slow_probes"),
    (["--curve_warmup_steps", "-1"], "--curve_warmup_steps must be 0 or more"),
    (["--checkpointing_steps", "epoch"], "give --checkpointing_steps N"),
])
def test_bad_curve_flags_are_one_line(tmp_path, tiny_bert_dir, corpus_dir, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        _run(_argv(tiny_bert_dir, corpus_dir, tmp_path / "out", "100", *extra))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_token_counts_parse_and_label():
    assert parse_tokens("1M, 0.3M,3M,1000000") == [300_000, 1_000_000, 3_000_000]
    assert parse_tokens("30k,2B") == [30_000, 2_000_000_000]
    assert [curve.token_label(t) for t in (0, 300_000, 1_000_000, 30_000, 2_500_000_000)] == \
        ["start", "0.3M", "1M", "30k", "2.5B"]


@pytest.mark.slow
def test_the_gpu_curve_script_runs_its_cpu_smoke_mode(tmp_path, tiny_bert_dir, corpus_dir):
    """benchmarks/gpu_ablation_curve.sh with GPU_CURVE_SCALE=smoke on CPU, from inputs laid out as its prepare
    script lays them out: three arm processes side by side, then the curve's table, plot and JSON come back, and
    the archive holds no weights."""
    import os
    import subprocess
    import sys
    import tarfile

    from helpers import ROOT

    path = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # The prepare script as a user runs it (here from a scratch folder, where it writes .abl_curve/).
    split = tmp_path / "split.yaml"
    split.write_text(f"train_file:\n  - {FIXTURES / 'coref_e2e' / 'two_docs.conll'}\nvalidation_file:\n"
                     f"  - {FIXTURES / 'conll' / 'litbank_mini.conll'}\ntest_file:\n"
                     f"  - {FIXTURES / 'conll' / 'mini.gold_conll'}\n", encoding="utf-8")
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_ablation_curve_prepare.sh"), str(tiny_bert_dir),
                    str(corpus_dir), str(COREF / "blocks.txt"), str(COREF / "gap.tsv"), "--finetune",
                    str(COREF / "gap.tsv"), "--split", str(split)], cwd=tmp_path, env=path, check=True,
                   capture_output=True)
    inputs = tmp_path / ".abl_curve"
    assert sorted(p.name for p in (inputs / "pronoun").iterdir()) == ["blocks.txt", "gap.tsv"]
    with tarfile.open(inputs / "litbank.tgz") as archive:
        assert sorted(n for n in archive.getnames() if n.endswith("conll")) == [
            "litbank/test/mini.gold_conll", "litbank/train/two_docs.conll", "litbank/validation/litbank_mini.conll"]
    out = tmp_path / "out"
    env = {**path, "OUT": str(out),
           "GPU_CURVE_SCALE": "smoke", "GPU_CURVE_INPUTS": str(inputs), "GPU_CURVE_WORK": str(tmp_path / "work"),
           "GPU_CURVE_POINTS": _points(corpus_dir, 2, 4), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "benchmarks/gpu_ablation_curve.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = (out / "ablation_curve.md").read_text()
    for arm in ARMS:
        for seed in (42, 43):
            assert f"{arm}, seed {seed}: exit 0" in report, report
    assert "| CorefBERT − MRM |" in report and (out / "curve.png").stat().st_size > 10_000
    result = json.loads((out / "curve.json").read_text())
    last = str(parse_tokens(env["GPU_CURVE_POINTS"])[1])
    assert result["seeds"] == [42, 43] and result["missing"] == []
    entry = result["rows"]["held-out MLM accuracy: repeated mentions"][last]
    assert set(entry["vs_wwm"]) == {"corefbert", "mrm"} and list(entry["vs_mrm"]["corefbert"]["per_seed"]) == ["42", "43"]
    for row in (curve.E2E_ROW, "eq. 5 on gap: gap F1", curve.frozen_row(2, "pronoun–name"),
                "zero-shot, copy head, untrained V: gap F1", "same candidates, masked mentions recovered: copy head"):
        assert "corefbert" in result["rows"][row][last]["arms"], row
    with tarfile.open(out / "ablation_curve.tgz") as archive:
        names = archive.getnames()
    assert any(n.endswith("probes/heldout.json") for n in names)
    assert not any(n.endswith((".safetensors", ".bin", ".pt")) for n in names)


def test_every_process_of_a_shared_curve_writes_the_whole_table(full_curve, tmp_path, tiny_bert_dir, corpus_dir):
    """Arms run in separate processes on one folder (the CPU driver does): a process of one arm, given
    --skip_backbone, still writes every arm and the start it finds there, so whichever writes last the table is whole."""
    out_full, points, full = full_curve
    out = tmp_path / "study"
    shutil.copytree(out_full, out)
    result = _run(_argv(tiny_bert_dir, corpus_dir, out, points, "--arms", "wwm", "--skip_backbone", "--collect_only"))
    assert result["rows"] == full["rows"] and result["missing"] == []


def test_the_shared_pronoun_files_are_scored_by_default_beside_the_given_ones():
    from types import SimpleNamespace

    from helpers import shared_data

    shared_data("dpr", "dpr_dev_small.txt")
    given = [str(COREF / "wsc273_style.txt")]
    files = curve.zero_shot_files(SimpleNamespace(curve_default_zero_shot=True, zero_shot_file=given))
    assert [Path(f).name for f in files] == ["dpr_dev_small.txt", "gap-validation.tsv", "wsc273_style.txt"]
    assert curve.zero_shot_files(SimpleNamespace(curve_default_zero_shot=False, zero_shot_file=given)) == given


def test_the_frozen_feature_probe_runs_at_every_point_with_a_paired_interval(full_curve, tmp_path, tiny_bert_dir,
                                                                            corpus_dir):
    """The frozen-feature coreference probe is one of the curve's probes: on a curve already trained it runs alone,
    once at the start and at every point of every arm, at every layer (0 to the last), and its rows carry each
    arm's AUC per layer and subset with the paired document-bootstrap difference to WWM and MRM, and each layer's
    gain over layer 0; a rerun computes nothing; the same documents under other names reuse it, another content
    under the same names does not."""
    out_full, points, _ = full_curve
    out = tmp_path / "study"
    shutil.copytree(out_full, out)
    conll = FIXTURES / "conll"
    docs = tmp_path / "docs"
    docs.mkdir()
    for source in (FIXTURES / "coref_e2e" / "two_docs.conll", conll / "litbank_mini.conll", conll / "mini.gold_conll"):
        shutil.copy(source, docs / source.name)
    split = tmp_path / "split.yaml"

    def write_split(folder: Path) -> None:
        split.write_text(f"train_file:\n  - {folder / 'two_docs.conll'}\ntest_file:\n"
                         f"  - {folder / 'litbank_mini.conll'}\n  - {folder / 'mini.gold_conll'}\n", encoding="utf-8")

    write_split(docs)
    extra = ("--coref_split_config", str(split), "--coref_e2e_max_steps", "0")
    result = _run(_argv(tiny_bert_dir, corpus_dir, out, points, *extra))
    assert result["runs"]["probes_run"] == 1 + 2 * len(ARMS)
    stored = json.loads((out / "backbone" / f"seed_{SEED}" / "probes" / "frozen_coref.json").read_text())
    assert stored["results"]["frozen_layers"] == [0, 1, 2] and stored["settings"]["layer"] == "every"
    second = str(parse_tokens(points)[1])
    for layer in (0, 1, 2):
        for subset in ("all pairs", "different strings", "pronoun–name"):
            last = result["rows"][curve.frozen_row(layer, subset)][second]
            assert sorted(last["arms"]) == sorted(ARMS)
            assert all(0 <= a["mean"] <= 100 for a in last["arms"].values() if a["mean"] == a["mean"]), last
            ci = last["vs_wwm"]["corefbert"]
            if ci["difference"] is None:  # a subset with pairs of one class only in the fixture
                continue
            assert ci["examples"] == len(stored["results"]["frozen_test_documents"]) == 3
            assert ci["ci_low"] <= ci["difference"] <= ci["ci_high"]
            assert ci["difference"] == pytest.approx(last["arms"]["corefbert"]["mean"] - last["arms"]["wwm"]["mean"])
            assert "corefbert" in last["vs_mrm"]
    gain = result["rows"]["frozen coref probe, layer 2: AUC gain over layer 0 (all pairs)"][second]["arms"]["wwm"]
    assert gain["mean"] == pytest.approx(100 * (
        json.loads((point_dir(out / "wwm" / f"seed_{SEED}", int(second)) / "probes" / "frozen_coref.json")
                   .read_text())["results"]["frozen_gain_over_l0_auc_l2"]))
    assert curve.frozen_row(2, "pronoun–name") in (out / "curve.md").read_text()
    again = _run(_argv(tiny_bert_dir, corpus_dir, out, points, *extra))
    assert again["runs"]["probes_run"] == 0 and again["rows"] == result["rows"]
    # The same documents moved under another folder: the content decides, so nothing runs again.
    moved = tmp_path / "moved"
    shutil.copytree(docs, moved)
    write_split(moved)
    assert _run(_argv(tiny_bert_dir, corpus_dir, out, points, *extra))["runs"]["probes_run"] == 0
    # Another content under the same names and paths: every model is probed again.
    text = (moved / "mini.gold_conll").read_text()
    (moved / "mini.gold_conll").write_text(text.replace(" book ", " pear ", 1), encoding="utf-8")
    changed = _run(_argv(tiny_bert_dir, corpus_dir, out, points, *extra))
    assert changed["runs"]["probes_run"] == 1 + 2 * len(ARMS)


def test_the_frozen_probe_reads_the_litbank90_split_by_default():
    from types import SimpleNamespace

    from helpers import shared_data

    shared_data("litbank_more")
    study = SimpleNamespace(coref_split_config=None, curve_default_zero_shot=True)
    train, test = curve.frozen_split(study)
    assert (len(train), len(test)) == (70, 10) and all(Path(f).is_file() for f in train + test)
    assert curve.frozen_split(SimpleNamespace(coref_split_config=None, curve_default_zero_shot=False)) is None


def test_the_fine_tuned_probes_pool_their_seeds_and_score_litbank_per_document(full_curve, tmp_path, tiny_bert_dir,
                                                                             corpus_dir):
    """Where the fine-tuning probes are due (the last point and the start): eq. 5 fine-tuned under two seeds, whose
    per-example counts pool (each run's own figure kept), and end-to-end coreference with the model as its encoder,
    whose per-document counts give the task's own avg F1; every arm is compared with WWM and MRM on them."""
    from corefbert.ablation.probes import statistic

    out_full, points, _ = full_curve
    out = tmp_path / "study"
    shutil.copytree(out_full, out)
    split = tmp_path / "split.yaml"
    e2e = FIXTURES / "coref_e2e" / "two_docs.conll"
    split.write_text(f"train_file:\n  - {e2e}\nvalidation_file:\n  - {FIXTURES / 'conll' / 'litbank_mini.conll'}\n"
                     f"test_file:\n  - {FIXTURES / 'conll' / 'mini.gold_conll'}\n", encoding="utf-8")
    extra = ("--coref_split_config", str(split), "--coref_e2e_max_steps", "2", "--finetune",
             f"{COREF / 'gap.tsv'}={COREF / 'gap.tsv'}", "--finetune_seeds", "2", "--finetune_max_steps", "1",
             "--finetune_batch_size", "2")
    result = _run(_argv(tiny_bert_dir, corpus_dir, out, points, *extra))
    second = str(parse_tokens(points)[1])
    # The start and the last point of every arm, two probes each, nothing at the first point; and the frozen probe,
    # which the split turns on everywhere.
    assert result["runs"]["probes_run"] == 2 * (1 + len(ARMS)) + (1 + 2 * len(ARMS))
    folder = point_dir(out / "corefbert" / f"seed_{SEED}", int(second)) / "probes"
    tuned = json.loads((folder / "finetune_gap.json").read_text())["results"]["gap"]
    runs = [json.loads((folder / "finetune_gap" / f"run_{k}.json").read_text())["results"]["gap"] for k in (0, 1)]
    assert np.array_equal(np.asarray(tuned["counts"]), np.asarray(runs[0]["counts"]) + np.asarray(runs[1]["counts"]))
    assert tuned["runs"] == [pytest.approx(r["reported"]) for r in runs]
    scored = json.loads((folder / "coref_e2e.json").read_text())["results"]
    assert len(scored["counts"]) == len(scored["documents"]) == 3  # the validation document and the two of test
    assert statistic("coref_avg_f1", np.asarray(scored["counts"]).sum(axis=0)) == pytest.approx(
        scored["reported"]["avg_f1"])
    row = result["rows"][curve.E2E_ROW][second]
    assert sorted(row["arms"]) == sorted(ARMS) and list(row["vs_mrm"]) == ["corefbert"]
    # The decision rule, as the guide wrote it before the runs, applied to the three outcomes at every point.
    decision = result["decision"][second]
    assert decision["complete"] and set(decision["outcomes"]) == {
        "fine-tuned GAP F1", "LitBank end-to-end avg F1", "frozen AUC, pronoun–name, the start's best layer"}
    gap = decision["outcomes"]["fine-tuned GAP F1"]
    assert gap["row"] == "eq. 5 on gap: gap F1" and gap["difference"] == result["rows"][gap["row"]][second][
        "vs_mrm"]["corefbert"]["difference"]
    assert decision["verdict"] in ("supported", "contradicted") or decision["verdict"].startswith("no effect larger")
    assert "## The decision rule: CorefBERT − MRM" in (out / "curve.md").read_text()
    assert first_point_has_no(result, curve.E2E_ROW, str(parse_tokens(points)[0]))


def first_point_has_no(result: dict, row: str, tokens: str) -> bool:
    return tokens not in result["rows"][row]


def test_a_curve_moved_elsewhere_extends_and_its_damaged_records_are_redone_or_named(full_curve, tmp_path,
                                                                                   tiny_bert_dir, corpus_dir,
                                                                                   monkeypatch, capsys):
    """A curve folder copied elsewhere (its base, the arms' start, inside it) extends without training a finished
    point again: the checkpoints know their start by its content, not its path. A truncated point record or probe
    result is computed again; a damaged record that decides what a run is says which file it is and what to do."""
    out_full, points, _ = full_curve
    moved = tmp_path / "elsewhere" / "study"
    shutil.copytree(out_full, moved)
    first, second = parse_tokens(points)
    record = point_dir(moved / "corefbert" / f"seed_{SEED}", second) / POINT_RECORD
    record.write_text(record.read_text()[:10])  # cut short
    probe = point_dir(moved / "wwm" / f"seed_{SEED}", first) / "probes" / "heldout.json"
    probe.write_text("[1, 2")
    third = _points(corpus_dir, 6)
    counter = StepCounter(monkeypatch)
    result = _run(_argv(tiny_bert_dir, corpus_dir, moved, f"{points},{third}"))
    # Each trunk from its fork at step 3 to the new fork at step 5, then the new point's cooldown: 3 steps per arm.
    assert counter.by_arm(moved) == {arm: 3 for arm in ARMS}
    assert result["runs"]["points_saved"] == len(ARMS) + 1  # the new point, and the one whose record was cut short
    assert json.loads(record.read_text())["step"] == 4 and json.loads(probe.read_text())["results"]["mlm"]
    assert "damaged" in capsys.readouterr().err
    marker = moved / "mrm" / f"seed_{SEED}" / "ablation_run.json"
    marker.write_text("{")
    with pytest.raises(SystemExit) as exit_info:  # the next point reads the trunk's record first
        _run(_argv(tiny_bert_dir, corpus_dir, moved, f"{points},{third},{_points(corpus_dir, 8)}"))
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: {marker}: damaged") and "delete it to keep the run as it was trained" in line
