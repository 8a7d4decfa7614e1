"""Issue 23.17: a DeepSpeed op build killed half-way leaves ``<torch extensions>/<op>/lock``; every later DeepSpeed
run then slept forever at load 0, silently, the test suite and CI included.

Now the toolkit stops in one line naming the lock and the ``rm`` that clears it (or waits, bounded and saying
so, for a build that is alive), the tests build into their own extensions folder, and every test has a timeout.
Locks here are real files in real folders, held open by real processes.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import ROOT

from corefbert.errors import CorefBertError
from corefbert.training.extension_locks import check_extension_locks, lock_holders


def _plant(root: Path, op: str = "deepspeed_shm_comm", age_s: float = 3600.0) -> Path:
    """A lock as a killed build leaves it: the file in the op's build folder, not touched for ``age_s``."""
    folder = root / op
    folder.mkdir(parents=True)
    (folder / "shm.o").write_bytes(b"half a build")
    lock = folder / "lock"
    lock.touch()
    then = time.time() - age_s
    for path in (lock, folder / "shm.o"):
        os.utime(path, (then, then))
    return lock


def _holding(lock: Path, seconds: float, release: bool = False, until: Path | None = None) -> subprocess.Popen:
    """A process that creates ``lock`` (as torch's FileBaton does) or opens the planted one, keeps it open for
    ``seconds`` (or until the file ``until`` appears, at most ``seconds``) and then (``release``) removes it, as a
    live build does."""
    code = textwrap.dedent(f'''
        import os, sys, time
        fd = os.open({str(lock)!r}, os.O_CREAT | os.O_RDONLY)
        print("holding", flush=True)
        deadline = time.monotonic() + {seconds}
        while time.monotonic() < deadline and not ({str(until)!r} != "None" and os.path.exists({str(until)!r})):
            time.sleep(0.05)
        if {release}:  # removed before it is closed: with stale_after 0 an open-but-unheld moment reads as stale
            os.remove({str(lock)!r})
        os.close(fd)
    ''')
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_a_stale_lock_is_one_line_naming_it_and_the_rm(tmp_path):
    lock = _plant(tmp_path)
    started = time.monotonic()
    with pytest.raises(CorefBertError) as caught:
        check_extension_locks(tmp_path, say=pytest.fail)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert message.startswith(f"{lock}: DeepSpeed would wait forever for this lock of its deepspeed_shm_comm op build: "
                              "no process holds it and its build folder has not changed for over 60 s ")
    assert message.endswith(f"(rm {shlex.quote(str(lock))}) and rerun")


def test_a_lock_a_live_build_holds_is_waited_for_saying_so_until_it_is_released(tmp_path):
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    finished = tmp_path / "build_finished"
    # The build ends only once the wait has been announced, however slow the /proc scan is on a loaded machine.
    holder = _holding(lock, seconds=120, release=True, until=finished)
    assert lock_holders(lock) == [holder.pid]
    said = []

    def say(message):
        said.append(message)
        finished.touch()

    started = time.monotonic()
    check_extension_locks(tmp_path, stale_after=0.0, wait_limit=60, say=say)  # stale_after 0: held decides
    assert time.monotonic() - started < 60
    assert holder.wait(timeout=30) == 0 and not lock.exists()
    assert said == [f"waiting for the build of DeepSpeed's deepspeed_shm_comm op (process {holder.pid} holds {lock}); "
                    "at most 60 s"]


def test_a_held_lock_that_outlasts_the_wait_is_one_line_naming_the_holder(tmp_path):
    lock = _plant(tmp_path)
    holder = _holding(lock, seconds=60)
    try:
        with pytest.raises(CorefBertError, match=rf"waited 1 s for the build of DeepSpeed's deepspeed_shm_comm op "
                                                 rf"\(process {holder.pid} holds this lock\)"):
            check_extension_locks(tmp_path, wait_limit=1, say=lambda _: None)
    finally:
        holder.kill()
        holder.wait()


def test_a_fresh_lock_nobody_visible_holds_turns_stale_after_the_quiet_time(tmp_path):
    """A lock just made by a process this user cannot see (or a build between two files) is not refused at
    once; when its folder stays quiet for ``stale_after`` it is."""
    _plant(tmp_path, age_s=0.0)
    said = []
    started = time.monotonic()
    with pytest.raises(CorefBertError, match="no process holds it"):
        check_extension_locks(tmp_path, stale_after=2.0, wait_limit=60, say=said.append)
    assert 2 <= time.monotonic() - started < 30
    assert said and "a process not visible here" in said[0]


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_deepspeed_run_behind_a_killed_builds_lock_exits_2_in_one_line(tmp_path, tiny_bert_dir):
    """The DeepSpeed path for real: pretraining with the environment ``accelerate launch`` gives a ZeRO-2 process
    (as torchrun starts it), and a lock planted in its TORCH_EXTENSIONS_DIR. Before, it slept forever in
    DeepSpeed's op load; now exit 2 and one line, in seconds."""
    pytest.importorskip("deepspeed")
    from test_accelerate_configs import CONFIGS, _launch_env

    lock = _plant(tmp_path / "extensions")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, **_launch_env(CONFIGS / "deepspeed_zero2.yaml"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
           "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "pretrain/run_mrp.py", "--model_name_or_path", str(tiny_bert_dir),
                           "--dataset_dir", str(tmp_path / "no_corpus_needed_yet"), "--output_dir", str(tmp_path / "run"),
                           "--max_steps", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {lock}: DeepSpeed would wait forever for this lock of its deepspeed_shm_comm op build: no process "
        f"holds it and its build folder has not changed for over 60 s (a build killed half-way left it). Remove it "
        f"(rm {shlex.quote(str(lock))}) and rerun")
    assert seconds < 120, seconds  # interpreter, torch and transformers start-up; no wait on the lock
    assert lock.exists()  # it is the user's to remove: the line says how


@pytest.mark.slow
def test_every_test_has_a_timeout_and_its_own_extensions_folder_also_under_xdist(tmp_path):
    """The project's pytest settings and conftest, run as `.ci/run` runs them (`-n 2`): in each worker the
    default timeout is the configured one, a test that waits forever is stopped at its limit, and
    TORCH_EXTENSIONS_DIR is the tests' own folder, not the user's cache."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (project / "tests" / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (project / "tests" / "helpers.py").write_text((ROOT / "tests" / "helpers.py").read_text())  # conftest's builders
    (project / "tests" / "test_probe.py").write_text(textwrap.dedent('''
        import os, time
        import pytest

        def test_default(request):
            assert float(request.config.getini("timeout")) == 600

        def test_extensions_folder():
            assert os.environ["TORCH_EXTENSIONS_DIR"] == os.path.join(os.path.dirname(os.path.dirname(
                os.path.realpath(__file__))), ".pytest_cache", "torch_extensions")

        @pytest.mark.timeout(3)
        def test_waits_forever():
            time.sleep(3600)
    '''))
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    assert time.monotonic() - started < 120
    assert done.returncode == 1, done.stdout[-3000:]
    assert "2 passed" in done.stdout and "1 failed" in done.stdout, done.stdout[-3000:]
    assert "FAILED tests/test_probe.py::test_waits_forever - Failed: Timeout (>3.0s)" in done.stdout, done.stdout[-3000:]


def test_a_lock_released_between_the_scan_and_the_holders_lookup_is_not_called_stale(tmp_path, monkeypatch):
    """A build that finishes (removes its lock, then closes it) just after the scan found the lock has no holder
    left at the lookup: that is a finished build, not a stale lock."""
    import corefbert.training.extension_locks as extension_locks

    _plant(tmp_path)  # old and quiet: stale if it were still there with no holder

    def released_meanwhile(lock):
        lock.unlink()
        return []

    monkeypatch.setattr(extension_locks, "lock_holders", released_meanwhile)
    check_extension_locks(tmp_path, say=pytest.fail)  # returns: nothing left to wait for
