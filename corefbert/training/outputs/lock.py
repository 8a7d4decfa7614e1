"""One run per output folder: an exclusive ``flock`` on ``output_dir/.run.lock`` for the whole run (two runs
in one folder would interleave ``log.jsonl`` and rotate each other's checkpoints away).

The main process holds the lock from :func:`corefbert.training.loop.setup.prepare_output_dir` until
:func:`release` or its exit (the kernel drops a ``flock`` with the last descriptor: a killed run leaves no
stale lock). The file holds the holder's pid, for the error line of the run that is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from corefbert.errors import CorefBertError

LOCK_FILE = ".run.lock"
_held: dict[Path, int] = {}  # resolved output folder -> descriptor holding its lock (this process)


def _lock_path(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir).resolve() / LOCK_FILE


def is_empty_output(output_dir: str | os.PathLike) -> bool:
    """Whether the folder ``output_dir`` holds nothing but a lock file (a run's own, or a killed one's)."""
    return set(os.listdir(output_dir)) <= {LOCK_FILE}


def _describe(fd: int) -> str:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = os.pread(fd, 512, 0).decode("utf-8").strip()
        if text:
            return f"process {text}"
    return "another process"


def _taken(output_dir, other: str) -> CorefBertError:
    return CorefBertError(f"another run is using this --output_dir ({other}); wait for it to finish or choose another "
                          "--output_dir", path=output_dir)


def refuse_if_locked(output_dir: str | os.PathLike) -> None:
    """One line naming the holder when another process holds the lock of ``output_dir``."""
    path = _lock_path(output_dir)
    if path.parent in _held:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _taken(output_dir, _describe(fd)) from None
    finally:
        os.close(fd)  # closing drops the probe's shared lock


def acquire(output_dir: str | os.PathLike) -> None:
    """Take the lock of ``output_dir`` (which exists) for this process; one line naming the holder if taken.
    Held already by this process (an earlier run of a notebook or test that stopped with an error): kept."""
    path = _lock_path(output_dir)
    if path.parent in _held:
        return
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise CorefBertError(f"cannot open the run lock {LOCK_FILE} ({err.strerror}); check this folder's "
                                 "permissions or choose another --output_dir", path=path.parent) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _describe(fd)
            os.close(fd)
            raise _taken(output_dir, other) from None
        # A releasing run unlinks the file while holding the lock: a lock taken on that unlinked file
        # guards nothing, so take it again on the file the path names now.
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    _held[path.parent] = fd


def release(output_dir: str | os.PathLike) -> None:
    """Drop this process's lock of ``output_dir`` and remove the lock file (no-op when not held), only while
    it is still the one locked: a prepared corpus renamed into place replaced the folder that held it."""
    path = _lock_path(output_dir)
    fd = _held.pop(path.parent, None)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            path.unlink()  # removed while still locked, so no other run can be holding it
    os.close(fd)


@contextlib.contextmanager
def holding(output_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of ``output_dir`` (created when absent) for the ``with`` block. Already held by this process
    (a training run that prepares its corpus into its own folder): left to its holder. A folder this created is
    removed again when the block leaves it empty (a refused or failed run)."""
    folder = Path(output_dir)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    mine = _lock_path(folder).parent not in _held
    try:
        acquire(folder)
        yield
    finally:
        if mine:
            release(folder)  # nothing to release when acquire refused
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only an empty folder: a finished run's output stays
