"""Crash safety under real faults: SIGKILL at random moments (mid-save included), SIGTERM from outside, a full
disk during a save, an output directory that cannot be written.

The kill tests run the CLIs as subprocesses, since a kill is only real for a process of its own. Each one
ends by comparing the recovered run with an uninterrupted one: surviving is not enough, the losses must be
the ones the run would have had.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import FIXTURES, ROOT, can_mount_tmpfs, load_cli, save_corpus, synthetic_corpus
from test_pretraining import _save_tiny_bert

from corefbert.errors import CorefBertError
from corefbert.text.durable import check_writable
from corefbert.training.checkpoints.folders import (
    STATE_FILE,
    checkpoints_root,
    is_complete,
    list_checkpoints,
)

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")

GLUE_RTE = FIXTURES / "glue" / "RTE"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return _save_tiny_bert(tmp_path_factory.mktemp("crash_bert"))


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, model_dir):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("crash_corpus") / "corpus"
    save_corpus(synthetic_corpus(AutoTokenizer.from_pretrained(model_dir), n_train=24, n_eval=8), out)
    return out


HOLD_IN_SAVE = str(FIXTURES / "crash" / "hold_in_save.py")


def _env() -> dict:
    # The subprocesses keep the thread count of the in-process reference runs (conftest sets it from
    # OMP_NUM_THREADS): float sums in another order would differ in the last bits.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def _start(script: str, argv: list[str], log: Path, **env: str) -> subprocess.Popen:
    # Output to a file, not a pipe: an unread pipe that fills up would stall the child.
    handle = open(log, "ab")
    try:
        return subprocess.Popen([sys.executable, script, *argv], cwd=ROOT, env={**_env(), **env}, stdout=handle,
                                stderr=subprocess.STDOUT)
    finally:
        handle.close()


def _wait_until(proc: subprocess.Popen, ready, timeout: float = 300.0) -> bool:
    """Poll ``ready()`` every millisecond or so; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return True
        if proc.poll() is not None:
            return ready()
        time.sleep(0.001)
    proc.kill()
    raise AssertionError(f"nothing happened in {timeout} s")


def _train_records(out: Path) -> list[dict]:
    path = out / "log.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line the kill cut short; the next resume drops it
        if record.get("split") == "train":
            records.append(record)
    return records


def _step_folders(out: Path, after_step: int) -> list[Path]:
    """Folders of checkpoints newer than ``after_step``, finished or not (``step_N`` or ``step_N.tmp``)."""
    root = checkpoints_root(out)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = re.fullmatch(r"step_(\d+)(\.tmp)?", name)
        if match and int(match.group(1)) > after_step:
            found.append(root / name)
    return found


def _files(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pkl")}


def _mrp_args(model_dir, corpus_dir, max_steps: int, *extra: str) -> list[str]:
    """A tiny pretraining run with a checkpoint every step (every kill and disk test starts from this)."""
    return ["--model_name_or_path", str(model_dir), "--dataset_dir", str(corpus_dir), "--max_steps", str(max_steps),
            "--per_device_train_batch_size", "4", "--logging_steps", "1", "--learning_rate", "1e-3",
            "--mixed_precision", "no", "--checkpointing_steps", "1", "--seed", "5", *extra]


def _reference_losses(out: Path, args: list[str]) -> dict[int, dict]:
    """Run pretraining uninterrupted in-process into ``out``; its train records by step."""
    load_cli("pretrain/run_mrp.py").main([*args, "--output_dir", str(out)])
    return {r["step"]: r for r in _train_records(out)}


def _assert_latest_loads(out: Path, whole: dict[str, int] | None = None) -> int:
    """What `--resume_from_checkpoint latest` would pick must be whole: state parses, weights load, and
    (given ``whole``, a finished checkpoint's file sizes) no file is missing or short."""
    from safetensors.torch import load_file

    found = list_checkpoints(out)
    if not found:
        return 0
    step, path = found[-1]
    assert json.loads((path / STATE_FILE).read_text())["step"] == step
    weights = sorted(path.glob("*.safetensors"))
    assert weights, f"no weights in {path}"
    for file in weights:
        assert load_file(str(file)), file
    if whole is not None:
        assert _files(path) == whole, f"{path} is not a whole checkpoint"
    return step


@pytest.mark.slow
def test_sigkill_at_random_moments_and_mid_save_then_resume_repeats_the_uninterrupted_losses(
        tmp_path, model_dir, corpus_dir):
    args = _mrp_args(model_dir, corpus_dir, 10, "--warmup_ratio", "0.2", "--save_total_limit", "2")
    reference = tmp_path / "reference"
    want = _reference_losses(reference, args)
    assert sorted(want) == list(range(1, 11))

    out = tmp_path / "killed"
    resume = [*args, "--output_dir", str(out), "--resume_from_checkpoint", "latest"]
    rng = random.Random(20261126)
    whole = _files(checkpoints_root(reference) / "step_10")  # what a finished checkpoint holds
    killed_mid_save = 0
    for attempt, moment in enumerate(["mid-save", "random", "mid-save", "mid-save", "random", "mid-save", "mid-save"]):
        latest = _assert_latest_loads(out, whole)

        def saving(latest=latest) -> bool:
            return bool(_step_folders(out, latest))

        def trained(latest=latest) -> bool:
            return any(r["step"] > latest for r in _train_records(out))

        # mid-save: held inside the next save after its first or second file (HOLD_IN_SAVE), so the kill lands
        # there however loaded the machine is (timed by polling, a loaded machine's kills landed after the save);
        # random: anywhere in the next ~3 steps.
        if moment == "mid-save":
            marker = tmp_path / f"held_{attempt}"
            proc = _start(HOLD_IN_SAVE, ["pretrain/run_mrp.py", *resume], tmp_path / "killed.out",
                          HOLD_AT_SAVE=str(rng.choice([1, 2])), HOLD_MARKER=str(marker))
            hit = _wait_until(proc, marker.exists)
        else:
            proc = _start("pretrain/run_mrp.py", resume, tmp_path / "killed.out")
            hit = _wait_until(proc, trained)
            time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=60)
        if not hit or code == 0:
            break  # the run finished before the kill landed: nothing left to interrupt
        assert code == -signal.SIGKILL, (tmp_path / "killed.out").read_text()[-3000:]
        # Mid-save means: a newer checkpoint folder exists and none of them holds a whole checkpoint.
        newer = _step_folders(out, latest)
        killed_mid_save += bool(newer) and not any(_files(folder) == whole for folder in newer)
        assert _assert_latest_loads(out, whole) >= latest, f"attempt {attempt}: the checkpoint went backwards"
    assert killed_mid_save >= 5, f"only {killed_mid_save} kills landed inside a save (5 were held there)"

    done = subprocess.run([sys.executable, "pretrain/run_mrp.py", *resume], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(checkpoints_root(out).glob("*.tmp")), "a killed save's partial folder was left behind"
    got = _train_records(out)
    assert [r["step"] for r in got] == list(range(1, 11)), "each step logged once after the resumes"
    for record in got:
        expected = want[record["step"]]
        for key in ("loss", "mlm_loss", "mrp_loss", "lr"):
            assert record[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-7), (record["step"], key)
    final_ref = json.loads((reference / "all_results.json").read_text())
    final_got = json.loads((out / "all_results.json").read_text())
    assert final_got == pytest.approx(final_ref, rel=1e-6)


def _glue_args(model_dir, out: Path) -> list[str]:
    return ["--model_name_or_path", str(model_dir), "--task_name", "rte", "--data_dir", str(GLUE_RTE),
            "--output_dir", str(out), "--do_train", "--num_train_epochs", "2", "--per_device_train_batch_size",
            "4", "--gradient_accumulation_steps", "2", "--learning_rate", "1e-3", "--logging_steps", "1",
            "--checkpointing_steps", "1000", "--max_seq_length", "48", "--disable_tqdm", "true", "--seed", "3"]


def _losses(out: Path) -> dict[int, float]:
    losses = {}
    for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "loss" in record and "step" in record:
            losses[record["step"]] = record["loss"]
    return losses


@pytest.mark.slow
def test_sigterm_makes_a_finetuning_cli_save_and_exit_and_resume_is_exact(tmp_path, model_dir):
    reference = tmp_path / "reference"
    load_cli("finetune/run_glue.py").main(_glue_args(model_dir, reference))
    want = _losses(reference)
    assert len(want) >= 6

    out = tmp_path / "preempted"
    proc = _start("finetune/run_glue.py", _glue_args(model_dir, out), tmp_path / "preempted.out")
    log = out / "log.jsonl"
    _wait_until(proc, lambda: log.is_file() and '"loss"' in log.read_text(encoding="utf-8"))
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=300)
    printed = (tmp_path / "preempted.out").read_text()
    assert code == 128 + signal.SIGTERM, printed[-3000:]
    assert "SIGTERM: saved" in printed and "Traceback" not in printed
    saved = [step for step, _ in list_checkpoints(out)]
    assert len(saved) == 1 and saved[0] < max(want), "one checkpoint, at the update the signal interrupted"

    done = subprocess.run([sys.executable, "finetune/run_glue.py", *_glue_args(model_dir, out),
                           "--resume_from_checkpoint", "latest"], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = _losses(out)
    assert sorted(got) == sorted(want)
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-6), step
    from safetensors.torch import load_file

    a, b = load_file(str(reference / "last" / "model.safetensors")), load_file(str(out / "last" / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)


@pytest.mark.slow
def test_sigkill_mid_save_in_a_finetuning_cli_then_resume_repeats_the_uninterrupted_run(tmp_path, model_dir):
    """The fine-tuning side of the kill test: `checkpoints/step_N`, `best/` and `last/` are written side by side, so a
    kill inside any of their saves must leave `latest` whole and the resumed run exact (losses, best, last)."""
    argv = _glue_args(model_dir, tmp_path / "x")
    argv[argv.index("--checkpointing_steps") + 1] = "1"
    argv += ["--do_eval", "--eval_steps", "2", "--save_total_limit", "2"]

    def with_out(out: Path) -> list[str]:
        changed = list(argv)
        changed[changed.index("--output_dir") + 1] = str(out)
        return changed

    reference = tmp_path / "reference"
    load_cli("finetune/run_glue.py").main(with_out(reference))
    want = _losses(reference)
    out = tmp_path / "killed"
    resume = [*with_out(out), "--resume_from_checkpoint", "latest"]
    rng = random.Random(7)
    kills = 0
    for attempt in range(4):
        def names() -> set[str]:  # best/ and last/ beside checkpoints/step_N
            return {str(p.relative_to(out)) for p in [*out.glob("*"), *out.glob("checkpoints/*")]}

        before = names() if out.is_dir() else set()

        def saving(before=before) -> bool:
            return any(n.endswith(".tmp") and n not in before for n in (names() if out.is_dir() else set()))

        if attempt < 2:  # held inside a checkpoint's save (HOLD_IN_SAVE): two kills there on any machine
            marker = tmp_path / f"held_{attempt}"
            proc = _start(HOLD_IN_SAVE, ["finetune/run_glue.py", *resume], tmp_path / "killed.out",
                          HOLD_AT_SAVE=str(rng.choice([1, 2])), HOLD_MARKER=str(marker))
            hit = _wait_until(proc, marker.exists)
        else:  # a few milliseconds after any save starts (checkpoint, best/ or last/), where it lands
            proc = _start("finetune/run_glue.py", resume, tmp_path / "killed.out")
            hit = _wait_until(proc, saving)
            time.sleep(rng.uniform(0.0, 0.006))
        proc.send_signal(signal.SIGKILL)
        if proc.wait(timeout=60) == 0 or not hit:
            break
        kills += 1
        found = list_checkpoints(out)
        if found:  # what latest would pick loads, with its trainer state
            from safetensors.torch import load_file

            assert load_file(str(Path(found[-1][1]) / "model.safetensors"))
    assert kills >= 2, (tmp_path / "killed.out").read_text()[-3000:]

    done = subprocess.run([sys.executable, "finetune/run_glue.py", *resume], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [p for p in [*out.iterdir(), *(out / "checkpoints").iterdir()] if p.name.endswith((".tmp", ".deleting"))]
    got = _losses(out)
    assert sorted(got) == sorted(want)
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-6), step
    from safetensors.torch import load_file

    for name in ("last", "best"):
        a, b = load_file(str(reference / name / "model.safetensors")), load_file(str(out / name / "model.safetensors"))
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)


# --- a full disk, an unwritable output directory --------------------------------------------------------------


def _fail_after(calls: int, real):
    """A save_state that writes part of a checkpoint and then hits ENOSPC on its ``calls``-th call."""
    count = {"n": 0}

    def save_state(self, output_dir=None, **kwargs):
        count["n"] += 1
        if count["n"] < calls:
            return real(self, output_dir, **kwargs)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        (Path(output_dir) / "model.safetensors").write_bytes(b"\0" * 1000)  # the part that fit
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(output_dir) / "optimizer.bin"))

    return save_state


def test_disk_full_during_a_checkpoint_keeps_the_previous_one_and_resume_continues(
        tmp_path, model_dir, corpus_dir, monkeypatch, capsys):
    from accelerate import Accelerator

    base = _mrp_args(model_dir, corpus_dir, 4)
    want = {step: r["loss"] for step, r in _reference_losses(tmp_path / "reference", base).items()}
    args = [*base, "--output_dir", str(tmp_path / "run")]

    monkeypatch.setattr(Accelerator, "save_state", _fail_after(3, Accelerator.save_state))
    with pytest.raises(SystemExit) as exit_info:
        load_cli("pretrain/run_mrp.py").main(args)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    run = tmp_path / "run"
    assert error.startswith(f"error: {checkpoints_root(run) / 'step_3.tmp'}: could not write checkpoint step_3 "
                            "(disk full)"), error
    assert f"the last complete checkpoint is {checkpoints_root(run) / 'step_2'}" in error
    assert "--resume_from_checkpoint latest" in error
    assert sorted(p.name for p in checkpoints_root(run).iterdir()) == ["step_1", "step_2"], \
        "the partial save must be removed (it holds the space the disk lacks)"

    monkeypatch.undo()
    load_cli("pretrain/run_mrp.py").main([*args, "--resume_from_checkpoint", "latest"])
    got = {r["step"]: r["loss"] for r in _train_records(run)}
    assert got == pytest.approx(want, rel=1e-6)


@pytest.mark.slow
def test_a_real_full_disk_during_a_checkpoint(tmp_path, model_dir, corpus_dir):
    """A tmpfs with room for one checkpoint and a half, in a private mount namespace: the second save
    hits ENOSPC inside safetensors / torch.save (which do not raise OSError), and the run still ends in
    one line with the first checkpoint whole; resumed elsewhere, it finishes with the uninterrupted losses."""
    mount = tmp_path / "small_disk"
    if not can_mount_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root and unshare (CI and the dev machines have both)")
    args = _mrp_args(model_dir, corpus_dir, 3, "--save_total_limit", "1")
    reference = tmp_path / "reference"
    want = {step: r["loss"] for step, r in _reference_losses(reference, args).items()}
    checkpoint = sum(f.stat().st_size for f in (checkpoints_root(reference) / "step_3").iterdir())
    size_kib = (checkpoint * 3 // 2 + 64 * 1024) // 1024

    copy = tmp_path / "copied_out"
    script = ('mount -t tmpfs -o size="$1"k tmpfs "$2" || exit 99; "$3" pretrain/run_mrp.py "$@"; code=$?; '
              'cp -a "$2/run" "$4"; exit $code')
    cmd = ["unshare", "-m", "sh", "-c", script.replace('"$@"', " ".join(f"'{a}'" for a in args) +
                                                       ' --output_dir "$2/run"'),
           "sh", str(size_kib), str(mount), sys.executable, str(copy)]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    run = mount / "run" / "checkpoints"
    assert last == (f"error: {run}/step_2.tmp: could not write checkpoint step_2 (disk full); removed the partial "
                    f"copy, the last complete checkpoint is {run}/step_1. Free space or choose another "
                    "--output_dir, then rerun with --resume_from_checkpoint latest"), done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert [p.name for p in checkpoints_root(copy).iterdir()] == ["step_1"]
    assert _files(checkpoints_root(copy) / "step_1") == _files(checkpoints_root(reference) / "step_3")

    load_cli("pretrain/run_mrp.py").main([*args, "--output_dir", str(copy), "--resume_from_checkpoint", "latest"])
    got = {r["step"]: r["loss"] for r in _train_records(copy)}
    assert got == pytest.approx(want, rel=1e-6)


@pytest.mark.slow
@pytest.mark.distributed
def test_a_full_disk_on_one_of_two_processes_stops_both_in_one_line_each(tmp_path, model_dir, corpus_dir):
    """Under DDP only process 0 writes weights, so its failed save must reach process 1 too. Without that,
    process 1 dies in its next collective with a gloo traceback (checked by reverting the fix), or under NCCL
    waits there until the watchdog timeout."""
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), "tests/fixtures/crash/run_mrp_full_disk_on_rank0.py",
           *_mrp_args(model_dir, corpus_dir, 4, "--per_device_train_batch_size", "2"), "--output_dir", str(out)]
    # A process that waited for the one that failed would sit in gloo's collective (30 min): the timeout ends the
    # test then, and the second error line below is that process's own. (A limit of 300 s measured load too.)
    done = subprocess.run(cmd, cwd=ROOT, env={**_env(), "ACCELERATE_USE_CPU": "true"}, capture_output=True,
                          text=True, timeout=540)
    assert done.returncode != 0
    # Two processes share one stderr: an error line may follow the other's progress bar on the same line.
    errors = [line[line.index("error: "):] for line in done.stderr.splitlines() if "error: " in line]
    partial = checkpoints_root(out) / "step_2.tmp"
    assert sorted(errors) == sorted([
        f"error: {partial}: could not write checkpoint step_2 (disk full); removed the partial copy, the last "
        f"complete checkpoint is {checkpoints_root(out) / 'step_1'}. Free space or choose another --output_dir, "
        "then rerun with --resume_from_checkpoint latest",
        f"error: {partial}: another process could not write checkpoint step_2; its error line says why",
    ]), done.stderr[-3000:]
    assert [p.name for p in checkpoints_root(out).iterdir()] == ["step_1"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_disk_full_while_saving_the_finetuned_model_keeps_the_old_one(tmp_path, model_dir, monkeypatch, capsys):
    from transformers import PreTrainedModel

    out = tmp_path / "ft"
    argv = _glue_args(model_dir, out)
    argv[argv.index("--num_train_epochs") + 1] = "1"
    load_cli("finetune/run_glue.py").main(argv)
    before = (out / "last" / "model.safetensors").read_bytes()

    real_save = PreTrainedModel.save_pretrained

    def no_space_for_last(self, save_directory, **kwargs):
        if not str(save_directory).endswith("last.tmp"):
            return real_save(self, save_directory, **kwargs)
        Path(save_directory).mkdir(parents=True, exist_ok=True)
        (Path(save_directory) / "model.safetensors").write_bytes(b"\0" * 100)  # the part that fit
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", no_space_for_last)
    with pytest.raises(SystemExit) as exit_info:
        load_cli("finetune/run_glue.py").main([*argv, "--overwrite_output_dir", "true"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {out}/last.tmp: could not write the model last/ (disk full)"), error
    assert (out / "last" / "model.safetensors").read_bytes() == before, "the previous model must survive"
    assert not (out / "last.tmp").exists()


def _unwritable(tmp_path: Path) -> Path:
    """A real directory this process cannot write: root writes anywhere chmod allows, but not under /sys."""
    if os.geteuid() == 0:
        return Path("/sys/corefbert_output")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return locked / "out"


def test_an_unwritable_output_dir_fails_before_anything_is_loaded(tmp_path):
    target = _unwritable(tmp_path)
    with pytest.raises(CorefBertError) as error:
        check_writable(target)
    assert str(error.value) == (f"{target}: --output_dir cannot be written (permission denied); free space, "
                                "fix its permissions or choose another --output_dir")
    assert not target.exists()


@pytest.mark.parametrize("script", ["pretrain/run_mrp.py", "finetune/run_glue.py"])
def test_clis_refuse_an_unwritable_output_dir_in_one_line(tmp_path, model_dir, script, capsys, monkeypatch):
    target = _unwritable(tmp_path)
    argv = (["--model_name_or_path", str(model_dir), "--output_dir", str(target), "--train_file",
             str(ROOT / "tests" / "fixtures" / "tiny_corpus.txt")] if "mrp" in script
            else _glue_args(model_dir, target))
    from transformers import PreTrainedModel

    def no_model(*args, **kwargs):  # the check must come before any model is loaded (a limit in seconds measured load)
        raise AssertionError("a model was loaded before the --output_dir check")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(no_model))
    with pytest.raises(SystemExit) as exit_info:
        load_cli(script).main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {target}: --output_dir cannot be written (permission denied); free space, fix " \
                      "its permissions or choose another --output_dir"


def test_an_interrupted_deletion_of_an_old_checkpoint_never_looks_like_one(tmp_path):
    """Pruning renames a checkpoint out of the step_N namespace first: a half-deleted folder is never
    picked by `latest` even when its trainer_state.json is the last file left."""
    from corefbert.text.durable import remove_folder

    root = checkpoints_root(tmp_path)
    for step in (1, 2):
        (root / f"step_{step}").mkdir(parents=True)
        (root / f"step_{step}" / STATE_FILE).write_text(json.dumps({"step": step}))
    real_rmtree = shutil.rmtree

    def killed_rmtree(path, ignore_errors=False):
        raise KeyboardInterrupt  # the process dies before a single file is gone

    shutil.rmtree = killed_rmtree
    try:
        with pytest.raises(KeyboardInterrupt):
            remove_folder(root / "step_2")
    finally:
        shutil.rmtree = real_rmtree
    assert [step for step, _ in list_checkpoints(tmp_path)] == [1]
    assert is_complete(root / "step_2.deleting")  # the leftovers are intact, just no longer a checkpoint


def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before_and_the_run_ends_the_same(
        tmp_path, model_dir, corpus_dir, capsys):
    """Whole on rename is not whole after a power loss (files are not fsynced one by one) or disk damage:
    `latest` skips a checkpoint whose files do not load, with a warning; an explicit path gets one line."""
    args = _mrp_args(model_dir, corpus_dir, 5, "--save_total_limit", "10")
    reference = tmp_path / "reference"
    want = {step: r["loss"] for step, r in _reference_losses(reference, args).items()}

    out = tmp_path / "damaged"
    shutil.copytree(reference, out)
    root = checkpoints_root(out)
    for name in ("step_4", "step_5"):
        shutil.rmtree(root / name)
    shutil.rmtree(out / "final")
    weights = next((root / "step_3").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a write the disk never finished
    capsys.readouterr()

    with pytest.raises(SystemExit) as exit_info:
        load_cli("pretrain/run_mrp.py").main([*args, "--output_dir", str(out), "--resume_from_checkpoint",
                                              str(root / "step_3")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {root / 'step_3'}: checkpoint cannot be loaded (") and error.endswith(
        "; resume from an earlier checkpoint or delete this one"), error

    every_one_damaged = tmp_path / "every_one_damaged"
    shutil.copytree(out, every_one_damaged)
    for name in ("step_1", "step_2"):
        weights = next((checkpoints_root(every_one_damaged) / name).glob("*.safetensors"))
        weights.write_bytes(b"")
    with pytest.raises(SystemExit):
        load_cli("pretrain/run_mrp.py").main([*args, "--output_dir", str(every_one_damaged),
                                              "--resume_from_checkpoint", "latest"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {checkpoints_root(every_one_damaged) / 'step_3'}: checkpoint cannot be "
                            "loaded (") and error.endswith(
        "), nor can the 2 earlier one(s); delete them, or train from the start without --resume_from_checkpoint"
    ), error

    load_cli("pretrain/run_mrp.py").main([*args, "--output_dir", str(out), "--resume_from_checkpoint", "latest"])
    printed = capsys.readouterr()
    assert f"warning: {root / 'step_3'}: checkpoint cannot be loaded (" in printed.err
    assert f"resumed from {root / 'step_2'} at step 2" in printed.out
    got = {r["step"]: r["loss"] for r in _train_records(out)}
    assert got == pytest.approx(want, rel=1e-6)


def test_a_checkpoint_without_its_random_state_is_passed_over_naming_the_file_and_the_run_ends_the_same(
        tmp_path, model_dir, corpus_dir, capsys):
    """With ``random_states_0.pkl`` deleted, a resume went on silently with other randomness (exit 0,
    other losses): accelerate skips an RNG file it cannot load. Now a checkpoint lacking a file its save wrote is
    named in one line: refused when given by path, passed over for the one before with ``latest``, and the run
    then ends with the uninterrupted run's losses."""
    args = _mrp_args(model_dir, corpus_dir, 4, "--save_total_limit", "10")
    reference = tmp_path / "reference"
    want = {step: r["loss"] for step, r in _reference_losses(reference, args).items()}
    out = tmp_path / "no_rng"
    shutil.copytree(reference, out)
    root = checkpoints_root(out)
    shutil.rmtree(root / "step_4")
    shutil.rmtree(out / "final")
    (root / "step_3" / "random_states_0.pkl").unlink()
    capsys.readouterr()

    with pytest.raises(SystemExit) as exit_info:
        load_cli("pretrain/run_mrp.py").main([*args, "--output_dir", str(out), "--resume_from_checkpoint",
                                              str(root / "step_3")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {root / 'step_3'}: checkpoint cannot be loaded (incomplete: random_states_0.pkl is missing); resume "
        "from an earlier checkpoint or delete this one")

    load_cli("pretrain/run_mrp.py").main([*args, "--output_dir", str(out), "--resume_from_checkpoint", "latest"])
    printed = capsys.readouterr()
    assert [line for line in printed.err.splitlines() if line.startswith("warning: ") and "checkpoint" in line] == [
        f"warning: {root / 'step_3'}: checkpoint cannot be loaded (incomplete: random_states_0.pkl is missing); "
        f"trying {root / 'step_2'}"]
    assert f"resumed from {root / 'step_2'} at step 2" in printed.out
    assert {r["step"]: r["loss"] for r in _train_records(out)} == want  # bit for bit


def test_replacing_a_folder_deletes_the_old_copy_only_after_the_new_one_is_in_place(tmp_path):
    from corefbert.text.durable import replace_folder

    final, new = tmp_path / "best", tmp_path / "best.tmp"
    final.mkdir()
    (final / "model.safetensors").write_text("old")
    new.mkdir()
    (new / "model.safetensors").write_text("new")
    real_rmtree = shutil.rmtree

    def killed_rmtree(path, ignore_errors=False):
        raise KeyboardInterrupt  # the process dies while the old copy is being deleted

    shutil.rmtree = killed_rmtree
    try:
        with pytest.raises(KeyboardInterrupt):
            replace_folder(new, final)
    finally:
        shutil.rmtree = real_rmtree
    assert (final / "model.safetensors").read_text() == "new"
    assert not new.exists()
    replace_folder_again = tmp_path / "best.tmp"
    replace_folder_again.mkdir()
    (replace_folder_again / "model.safetensors").write_text("newer")
    replace_folder(replace_folder_again, final)  # the leftover of the killed deletion is cleared too
    assert (final / "model.safetensors").read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
