"""The lock file of a C++ op build that was killed half-way, found before DeepSpeed waits for it forever.

DeepSpeed JIT-builds small C++ ops through ``torch.utils.cpp_extension.load`` (on CPU, ``deepspeed_shm_comm``
as soon as it initialises; others such as ``cpu_adam`` when a config asks for them). Each build takes
``<extensions root>/<op>/lock`` by creating it and removes it when done; every other process that wants the op
sleeps until the file is gone (torch's ``FileBaton``: no timeout, no message). A build killed half-way (a
timed-out test, a stopped job) leaves the file behind, and from then on every DeepSpeed run of that user sleeps
forever at load 0 (issue 23.17).

:func:`check_extension_locks` runs before the Accelerator (and with it DeepSpeed) is built. A lock is
*stale* when no process this user can see has it open (the building process keeps the file it created open
until it removes it) and nothing in its build folder changed for :data:`STALE_AFTER_S` seconds; then the run
stops with one line naming the file and the ``rm`` that clears it. A lock a live build holds is waited for,
with a message, for at most :data:`WAIT_LIMIT_S` seconds.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from corefbert.errors import CorefBertError

#: A lock no visible process holds, whose build folder has not changed for this long, is left by a killed build.
#: The age guards against a build we cannot see (another user's process, another machine on a shared disk).
STALE_AFTER_S = 60.0
#: The longest this process waits for a build another process is running (DeepSpeed's ops build in about a minute).
WAIT_LIMIT_S = 600.0


def extensions_root() -> Path:
    """Where torch builds (and DeepSpeed finds) JIT extensions: ``$TORCH_EXTENSIONS_DIR``, else
    ``<user cache>/torch_extensions/py<version>_<cpu|cuXY|rocmXY>`` (torch.utils.cpp_extension's own rule)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        return Path(root)
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    if torch.version.hip is not None:
        accelerator = f"rocm{torch.version.hip.replace('.', '')}"
    elif torch.version.cuda is not None:
        accelerator = f"cu{torch.version.cuda.replace('.', '')}"
    else:
        accelerator = "cpu"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return Path(get_default_build_root()) / f"{python}_{accelerator}"


def lock_holders(lock: Path) -> list[int]:
    """Ids of the processes that have ``lock`` open, among those this user may inspect (Linux ``/proc``;
    elsewhere none is seen and only the age decides)."""
    target = os.path.realpath(lock)
    holders = []
    for fds in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == target for fd in fds.iterdir()):
                holders.append(int(fds.parent.name))
        except OSError:  # another user's process, or one that just ended
            continue
    return sorted(holders)


def _unchanged_for(lock: Path) -> float:
    """Seconds since anything in the lock's build folder (the lock, sources, objects, the library) changed."""
    newest = lock.stat().st_mtime
    for entry in lock.parent.iterdir():
        try:
            newest = max(newest, entry.stat().st_mtime)
        except OSError:
            continue
    return time.time() - newest


def check_extension_locks(root: Path | None = None, stale_after: float = STALE_AFTER_S,
                          wait_limit: float = WAIT_LIMIT_S, say: Callable[[str], None] | None = None) -> None:
    """Before DeepSpeed loads its ops: stop in one line at a stale ``<root>/<op>/lock`` (naming it and the
    ``rm`` that clears it), wait for one a live build holds (saying so once; at most ``wait_limit`` seconds,
    then one line naming the holder). ``root``: :func:`extensions_root`; ``say``: where the waiting message
    goes (default: stderr, local main process only)."""
    root = extensions_root() if root is None else Path(root)
    say = say or _say_on_local_main
    deadline, announced = time.monotonic() + wait_limit, set()
    while True:
        waiting = []
        for lock in sorted(root.glob("*/lock")) if root.is_dir() else []:
            try:
                quiet = _unchanged_for(lock)
            except FileNotFoundError:  # the build finished meanwhile
                continue
            holders, op = lock_holders(lock), lock.parent.name
            if not holders and not lock.exists():  # released between the scan and the holders' lookup: done
                continue
            if not holders and quiet >= stale_after:
                raise CorefBertError(
                    f"DeepSpeed would wait forever for this lock of its {op} op build: no process holds it and its "
                    f"build folder has not changed for over {stale_after:.0f} s (a build killed half-way left it). Remove it "
                    f"(rm {shlex.quote(str(lock))}) and rerun", path=lock)
            who = f"process {', '.join(map(str, holders))}" if holders else "a process not visible here"
            waiting.append((lock, op, who))
            if lock not in announced:
                announced.add(lock)
                say(f"waiting for the build of DeepSpeed's {op} op ({who} holds {lock}); at most {wait_limit:.0f} s")
        if not waiting:
            return
        if time.monotonic() >= deadline:
            lock, op, who = waiting[0]
            raise CorefBertError(
                f"waited {wait_limit:.0f} s for the build of DeepSpeed's {op} op ({who} holds this lock); let it "
                f"finish or stop it, remove the lock if no build is running (rm {shlex.quote(str(lock))}), and rerun",
                path=lock)
        time.sleep(min(1.0, max(stale_after / 4, 0.05)))


def deepspeed_requested() -> bool:
    """Whether this process is about to run under DeepSpeed (``accelerate launch`` with a DeepSpeed config
    sets ``ACCELERATE_USE_DEEPSPEED``)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").strip().lower() in ("1", "true", "yes", "y", "on")


def _say_on_local_main(message: str) -> None:
    if os.environ.get("LOCAL_RANK", "0") == "0":
        print(message, file=sys.stderr, flush=True)
