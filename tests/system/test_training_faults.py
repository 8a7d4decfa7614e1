"""Training faults reproduced for real on pretraining subprocesses: two runs in one folder, a SIGTERM in the
final evaluation or final save, a kill between the two renames of a same-step re-save, a full disk while
appending to log.jsonl.

Each subprocess runs ``pretrain/run_mrp.py`` through a small driver that holds it at the moment of interest
(the driver only waits or sleeps there; the code under test is unchanged), and each test ends by comparing
with an uninterrupted run, or by checking the one-line refusal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import test_crash_safety
import torch
from helpers import ROOT, can_mount_tmpfs, load_cli
from test_corpus_reliability import run_cli
from test_crash_safety import _env, _start, _wait_until

from corefbert.training.checkpoints.folders import checkpoints_root, list_checkpoints

pytestmark = [pytest.mark.usefixtures("fresh_accelerate_state"), pytest.mark.slow]
# The crash tests' tiny model and prepared corpus, one definition for both files.
model_dir, corpus_dir = test_crash_safety.model_dir, test_crash_safety.corpus_dir


# argv: mode, marker file, run_mrp arguments. The marker is written when the run reaches the moment of interest.
DRIVER = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    mode, marker, argv = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    sys.path.insert(0, "pretrain")
    import run_mrp
    import corefbert.pretraining.run as pretraining, corefbert.pretraining.report as report, corefbert.training.loop.core as training

    # Tell the test, then stay here until it says go (a signal only sets a flag; a kill ends it here). The test
    # says go after its signal: held for a fixed 3 s instead, a loaded machine's signal came after the hold.
    def hold(seconds):
        marker.write_text(str(os.getpid()))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not marker.with_suffix(".go").exists():
            time.sleep(0.01)

    if mode == "hold_training":  # inside the second training step until the test says go
        real_step, calls = pretraining.PretrainingJob.training_step, []
        def training_step(self, model, batch):
            calls.append(1)
            if len(calls) == 2:
                hold(120)
            return real_step(self, model, batch)
        pretraining.PretrainingJob.training_step = training_step
    elif mode == "final_evaluation":  # the evaluation at max_steps
        real_eval, last = pretraining.PretrainingJob._evaluate_and_log, int(argv[argv.index("--max_steps") + 1])
        def evaluate(self, model, step):
            if step == last:
                hold(120)
            return real_eval(self, model, step)
        pretraining.PretrainingJob._evaluate_and_log = evaluate
    elif mode == "final_save":  # writing final/, before its rename into place
        real_replace = report.replace_folder
        def replace_folder(tmp, final):
            hold(120)
            return real_replace(tmp, final)
        report.replace_folder = replace_folder
    elif mode == "resave_step_2":  # step 2 saved twice (as a signal right after a periodic save does),
        real_checkpoint, real_os_replace = training._Loop._checkpoint, os.replace  # held between the renames
        def checkpoint(self):
            path = real_checkpoint(self)
            if self.step == 2:
                self.saved_at = None
                path = real_checkpoint(self)
            return path
        def replace(src, dst, *args, **kwargs):
            real_os_replace(src, dst, *args, **kwargs)
            if Path(src).name == "step_2" and str(dst).endswith(".deleting"):
                hold(120)
        training._Loop._checkpoint, os.replace = checkpoint, replace
    run_mrp.main(argv)
''')


def _args(model_dir, corpus_dir, out, *extra: str, steps: int = 3) -> list[str]:
    return ["--model_name_or_path", str(model_dir), "--dataset_dir", str(corpus_dir), "--output_dir", str(out),
            "--max_steps", str(steps), "--per_device_train_batch_size", "4", "--logging_steps", "1",
            "--learning_rate", "1e-3", "--mixed_precision", "no", "--checkpointing_steps", "1", "--seed", "5", *extra]


def _drive(tmp_path: Path, mode: str, argv: list[str], name: str) -> tuple[subprocess.Popen, Path, Path]:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    marker = tmp_path / f"{name}.marker"
    return _start(str(driver), [mode, str(marker), *argv], tmp_path / f"{name}.out"), marker, tmp_path / f"{name}.out"


def _records(out: Path) -> list[dict]:
    records = []
    for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record.pop("time", None)
        record.pop("tokens_per_s", None)
        records.append(record)
    return records


def _assert_same_run(got: Path, want: Path) -> None:
    """The same train and eval records, the same final weights and results as the uninterrupted run."""
    def kept(out):
        return [r for r in _records(out) if r["split"] in ("train", "eval")]

    assert [(r["split"], r["step"]) for r in kept(got)] == [(r["split"], r["step"]) for r in kept(want)]
    for a, b in zip(kept(got), kept(want), strict=True):
        a, b = ({k: v for k, v in r.items() if k != "split"} for r in (a, b))
        assert a == pytest.approx(b, rel=1e-6), (a, b)
    from safetensors.torch import load_file

    a, b = load_file(str(got / "final" / "model.safetensors")), load_file(str(want / "final" / "model.safetensors"))
    for key in b:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
    results = json.loads((got / "all_results.json").read_text())
    assert results == pytest.approx(json.loads((want / "all_results.json").read_text()), rel=1e-6)


def test_a_second_run_in_the_same_output_dir_is_refused_naming_the_first(tmp_path, model_dir, corpus_dir):
    out = tmp_path / "run"
    args = _args(model_dir, corpus_dir, out)
    first, marker, first_log = _drive(tmp_path, "hold_training", args, "first")
    assert _wait_until(first, marker.exists), first_log.read_text()[-3000:]

    second = subprocess.run([sys.executable, "pretrain/run_mrp.py", *args, "--resume_from_checkpoint", "latest"],
                            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert second.returncode == 2, second.stderr[-3000:]
    assert "Traceback" not in second.stderr
    import socket

    assert second.stderr.strip().splitlines()[-1] == (
        f"error: {out}: another run is using this --output_dir (process {first.pid} on {socket.gethostname()}); "
        "wait for it to finish or choose another --output_dir")

    marker.with_suffix(".go").touch()
    assert first.wait(timeout=300) == 0, first_log.read_text()[-3000:]
    assert [r["step"] for r in _records(out) if r["split"] == "train"] == [1, 2, 3]  # one run's log, unmixed
    assert not [r for r in _records(out) if r["split"] == "resume"]
    assert [s for s, _ in list_checkpoints(out)] == [2, 3]
    assert not (out / ".run.lock").exists()  # released at the end


def test_the_lock_of_a_killed_run_is_no_obstacle(tmp_path, model_dir, corpus_dir):
    out = tmp_path / "run"
    args = _args(model_dir, corpus_dir, out)
    killed, marker, log = _drive(tmp_path, "hold_training", args, "killed")
    assert _wait_until(killed, marker.exists), log.read_text()[-3000:]
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert (out / ".run.lock").exists()  # the file stays; the kernel dropped the lock with the process
    load_cli("pretrain/run_mrp.py").main([*args, "--resume_from_checkpoint", "latest"])
    assert [r["step"] for r in _records(out) if r["split"] == "train"] == [1, 2, 3]


@pytest.mark.parametrize("every", ["1", None])
def test_sigterm_in_the_final_evaluation_loses_no_step(tmp_path, model_dir, corpus_dir, every):
    """The last step is saved before the final evaluation (with --checkpointing_steps), or at the
    signal (without); the process exits 143 and the resume evaluates, saves final/ and ends like the run
    that was never stopped."""
    def args(out):
        argv = _args(model_dir, corpus_dir, out)
        if every is None:
            at = argv.index("--checkpointing_steps")
            del argv[at:at + 2]
        return argv

    reference = tmp_path / "reference"
    load_cli("pretrain/run_mrp.py").main(args(reference))
    out = tmp_path / "stopped"
    proc, marker, log = _drive(tmp_path, "final_evaluation", args(out), "stopped")
    assert _wait_until(proc, marker.exists), log.read_text()[-3000:]
    proc.send_signal(signal.SIGTERM)
    marker.with_suffix(".go").touch()  # after the signal: it arrives inside the final evaluation on any machine
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    printed = log.read_text()
    assert f"SIGTERM: saved {checkpoints_root(out) / 'step_3'}" in printed and "Traceback" not in printed
    assert list_checkpoints(out)[-1][0] == 3 and not (out / "final").exists()

    load_cli("pretrain/run_mrp.py").main([*args(out), "--resume_from_checkpoint", "latest"])
    _assert_same_run(out, reference)


def test_sigterm_in_the_final_save_lets_it_finish(tmp_path, model_dir, corpus_dir):
    reference = tmp_path / "reference"
    load_cli("pretrain/run_mrp.py").main(_args(model_dir, corpus_dir, reference))
    out = tmp_path / "stopped"
    proc, marker, log = _drive(tmp_path, "final_save", _args(model_dir, corpus_dir, out), "stopped")
    assert _wait_until(proc, marker.exists), log.read_text()[-3000:]
    proc.send_signal(signal.SIGTERM)
    marker.with_suffix(".go").touch()  # after the signal: it arrives inside the final save on any machine
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert "SIGTERM came during the final save; the run is complete" in log.read_text()
    _assert_same_run(out, reference)


def test_a_kill_between_the_renames_of_a_same_step_resave_keeps_the_checkpoint(tmp_path, model_dir, corpus_dir):
    """A kill between the renames with --save_total_limit 1: step_2 renamed aside, its new copy not yet in
    place. Before, `latest` said "starting fresh" and the next save deleted both complete copies."""
    args = _args(model_dir, corpus_dir, tmp_path / "x", "--save_total_limit", "1", steps=4)

    def into(out):
        changed = list(args)
        changed[changed.index("--output_dir") + 1] = str(out)
        return changed

    reference = tmp_path / "reference"
    load_cli("pretrain/run_mrp.py").main(into(reference))
    out = tmp_path / "killed"
    proc, marker, log = _drive(tmp_path, "resave_step_2", into(out), "killed")
    assert _wait_until(proc, marker.exists), log.read_text()[-3000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    root = checkpoints_root(out)
    assert sorted(p.name for p in root.iterdir()) == ["step_2.deleting", "step_2.tmp"]
    assert list_checkpoints(out) == [(2, root / "step_2.tmp")]

    load_cli("pretrain/run_mrp.py").main([*into(out), "--resume_from_checkpoint", "latest"])
    assert [r for r in _records(out) if r["split"] == "resume"][0]["resumed_from"] == str(root / "step_2.tmp")
    assert sorted(p.name for p in root.iterdir()) == ["step_4"]
    _assert_same_run(out, reference)


def test_a_full_disk_while_appending_to_the_log_is_one_line(tmp_path, model_dir, corpus_dir):
    """A real tmpfs, filled but for a few log lines, with no checkpointing (so the log is the only
    thing that grows): exit 2 and one line, no traceback, and the lines written before are whole."""
    mount = tmp_path / "small_disk"
    if not can_mount_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root and unshare (CI and the dev machines have both)")
    args = _args(model_dir, corpus_dir, "RUN", steps=200)
    at = args.index("--checkpointing_steps")
    del args[at:at + 2]
    copy = tmp_path / "copied_out"
    script = ('mount -t tmpfs -o size=256k tmpfs "$1" || exit 99; head -c 245760 /dev/zero > "$1/filler"; '
              '"$2" pretrain/run_mrp.py ' + " ".join(f"'{a}'" for a in args).replace("'RUN'", '"$1/run"') +
              '; code=$?; cp -a "$1/run" "$3"; exit $code')
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(mount), sys.executable, str(copy)],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    run = mount / "run"
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {run}/log.jsonl: could not append to the log (disk full); no checkpoint was written yet. Free "
        "space or choose another --output_dir, then rerun with --resume_from_checkpoint latest")
    lines = (copy / "log.jsonl").read_text(encoding="utf-8").splitlines()
    whole = [json.loads(line) for line in lines[:-1]]  # the last one may be cut (the resume drops it)
    steps = [r["step"] for r in whole if r["split"] == "train"]
    assert len(steps) > 5 and steps == list(range(1, len(steps) + 1))
    assert not os.path.exists(copy / "final")


# --- a .run.lock planted as a link or a directory is refused, and nothing is written through it ---------------

FIXTURES = ROOT / "tests" / "fixtures"
# --- two corpus preparations into one folder: the second is refused, naming the first ---------------------

PREPARE_DRIVER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    marker, argv = Path(sys.argv[1]), sys.argv[2:]
    sys.path.insert(0, "pretrain")
    import prepare_corpus
    import corefbert.corpus.prepare as corpus

    real_prepare = corpus._prepare
    def held(*args, **kwargs):  # past every check, lock taken, before any document is tagged
        marker.write_text("held")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not marker.with_suffix(".go").exists():
            time.sleep(0.01)
        return real_prepare(*args, **kwargs)
    corpus._prepare = held
    prepare_corpus.main(argv)
''')


def test_a_second_corpus_preparation_into_one_folder_is_refused_naming_the_first(tmp_path, model_dir, capsys):
    import socket

    out = tmp_path / "prepared"
    common = ["--train_file", str(FIXTURES / "tiny_corpus.txt"), "--model_name_or_path", str(model_dir),
              "--output_dir", str(out), "--validation_split_percentage", "20"]
    driver, marker = tmp_path / "prepare_driver.py", tmp_path / "first.marker"
    driver.write_text(PREPARE_DRIVER)
    first = _start(str(driver), [str(marker), *common, "--max_seq_length", "64"], tmp_path / "first.out")
    try:
        assert _wait_until(first, marker.exists), (tmp_path / "first.out").read_text()[-3000:]
        capsys.readouterr()
        status, lines = run_cli([*common, "--max_seq_length", "32"], capsys)  # other settings
        assert status == 2 and "Traceback" not in "\n".join(lines), lines
        assert [line for line in lines if line.startswith("error:")] == lines[-1:] == [
            f"error: {out.resolve()}: another run is using this --output_dir (process {first.pid} on "
            f"{socket.gethostname()}); wait for it to finish or choose another --output_dir"]
        assert sorted(os.listdir(out)) == [".run.lock"]  # the refused run wrote nothing
    finally:
        marker.with_suffix(".go").touch()
    assert first.wait(timeout=300) == 0, (tmp_path / "first.out").read_text()[-3000:]
    assert "saved" in (tmp_path / "first.out").read_text()
    summary = json.loads((out / "prepare_summary.json").read_text())
    assert summary["settings"]["max_seq_length"] == 64  # the first run's corpus, whole
    assert not (out / ".run.lock").exists()  # the finished corpus carries no lock file
    # Once the first has finished, the same second run goes ahead (the lock is free again).
    status, lines = run_cli([*common, "--max_seq_length", "32"], capsys)
    assert status == 0, lines



def test_a_killed_loader_worker_is_one_line_and_the_newest_checkpoint_stays(tmp_path, capsys, monkeypatch):
    """A data loader worker killed mid-run (the kernel's out-of-memory killer, here SIGKILL from inside the worker
    once the first epoch's checkpoint is on disk) was 86 lines of traceback; now one line naming the worker and
    what to do, exit status 2, and the run continues from the checkpoint it left."""
    from corefbert.tasks.babi.task import BabiTask

    babi = load_cli("finetune/run_babi.py").main
    out = tmp_path / "out"
    collate = BabiTask.collate

    def collate_then_die(self, features):
        if torch.utils.data.get_worker_info() is not None and list(out.glob("qa1/seed_0/checkpoints/step_*")):
            os.kill(os.getpid(), signal.SIGKILL)
        return collate(self, features)

    flags = ["--data_dir", str(ROOT / "tests" / "fixtures" / "babi"), "--task_ids", "1", "--do_train", "--do_eval",
             "--num_train_epochs", "2", "--embedding_dim", "8", "--hidden_size", "8", "--disable_tqdm", "true",
             "--output_dir", str(out)]
    with monkeypatch.context() as patch:
        patch.setattr(BabiTask, "collate", collate_then_die)
        with pytest.raises(SystemExit) as exit_:
            babi([*flags, "--num_workers", "1"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_.value.code == 2 and len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert errors[0].startswith("error: a data loader worker process (pid "), errors[0]
    assert "was killed by signal Killed (the system's out-of-memory killer, most often)" in errors[0]
    assert "rerun with --num_workers 0" in errors[0] and "--resume_from_checkpoint latest" in errors[0]
    kept = list_checkpoints(out / "qa1" / "seed_0")
    assert kept, "the first epoch's checkpoint stays"
    results = babi([*flags, "--num_workers", "0", "--resume_from_checkpoint", "latest"])
    resumed = [json.loads(line) for line in (out / "qa1" / "seed_0" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed if r.get("split") == "resume"] == [kept[-1][0]]
    assert 0.0 <= results["eval_accuracy"] <= 1.0
