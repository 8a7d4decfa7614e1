"""One run per output folder: an exclusive ``flock`` on ``output_dir/.run.lock`` for the whole run.

Two runs in one ``--output_dir`` interleave ``log.jsonl`` and rotate each other's checkpoints away. The
main process of a run holds the lock from :func:`corefbert.training.prepare_output_dir` until
:func:`release` (or its exit: the kernel drops a ``flock`` with the last descriptor, so a killed run never
leaves a stale lock). The file holds the holder's pid, for the error line of the run that is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from corefbert.errors import CorefBertError

LOCK_FILE = ".run.lock"
_held: dict[Path, int] = {}  # resolved output folder -> descriptor holding its lock (this process)


def _lock_path(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir).resolve() / LOCK_FILE


def holder(output_dir: str | os.PathLike) -> str | None:
    """Who holds the lock of ``output_dir`` ("process 123 on host"), or None when nobody (or this process)."""
    path = _lock_path(output_dir)
    if path.parent in _held or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(path)
    finally:
        os.close(fd)  # closing drops the probe's shared lock
    return None


def _describe(path: Path) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return f"process {text}"
    return "another process"


def refuse_if_locked(output_dir: str | os.PathLike) -> None:
    """One line when another run holds ``output_dir`` (asked before loading anything)."""
    other = holder(output_dir)
    if other is not None:
        raise CorefBertError(f"another run is using this --output_dir ({other}); wait for it to finish or "
                             "choose another --output_dir", path=output_dir)


def acquire(output_dir: str | os.PathLike) -> None:
    """Take the lock of ``output_dir`` (which exists) for this process; one line naming the holder if taken.

    Held already by this process (an earlier run of a notebook or test that stopped with an error): kept.
    """
    path = _lock_path(output_dir)
    if path.parent in _held:
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            refuse_if_locked(output_dir)
            raise CorefBertError("another run is using this --output_dir; wait for it to finish or choose another "
                                 "--output_dir", path=output_dir) from None
        # A releasing run unlinks the file while holding the lock: a lock taken on that unlinked file
        # guards nothing, so take it again on the file the path names now.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode())
    _held[path.parent] = fd


def release(output_dir: str | os.PathLike) -> None:
    """Drop this process's lock of ``output_dir`` and remove the lock file (no-op when not held)."""
    path = _lock_path(output_dir)
    fd = _held.pop(path.parent, None)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        path.unlink()  # removed while still locked, so no other run can be holding it
    os.close(fd)
