"""One run per output folder: an exclusive ``flock`` on ``output_dir/.run.lock`` for the whole run.

Two runs in one ``--output_dir`` interleave ``log.jsonl`` and rotate each other's checkpoints away. The
main process of a run holds the lock from :func:`corefbert.training.loop.prepare_output_dir` until
:func:`release` (or its exit: the kernel drops a ``flock`` with the last descriptor, so a killed run never
leaves a stale lock). The file holds the holder's pid, for the error line of the run that is refused.

The lock path is opened without following links and must be a regular file of one name: a ``.run.lock``
planted as a symlink (or a hard link) to another file would otherwise have that file truncated and
overwritten with a pid, and a directory there would be a traceback.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

from corefbert.errors import CorefBertError

LOCK_FILE = ".run.lock"
_held: dict[Path, int] = {}  # resolved output folder -> descriptor holding its lock (this process)
# O_NOFOLLOW: a symlink at the path fails (ELOOP) instead of opening its target; O_NONBLOCK: a FIFO planted
# there opens at once instead of waiting for a writer (it is refused after the open, by its type).
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _lock_path(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir).resolve() / LOCK_FILE


def _not_a_lock_file(path: Path, mode: int, links: int) -> CorefBertError | None:
    """The refusal for a lock path of type ``mode`` with ``links`` names, or None for a plain lock file."""
    if stat.S_ISLNK(mode):
        what = f"a symlink (to {os.readlink(path)})" if os.path.islink(path) else "a symlink"
    elif stat.S_ISDIR(mode):
        what = "a directory"
    elif not stat.S_ISREG(mode):
        what = "not a regular file (a FIFO, socket or device)"
    elif links > 1:
        what = f"a file with {links} hard links (another name of it lies elsewhere)"
    else:
        return None
    return CorefBertError(f"the run lock {LOCK_FILE} here is {what}; corefbert writes its pid into that path and "
                          f"never through a link: remove {path} (check what planted it) or choose another "
                          "--output_dir", path=path.parent)


def check_lock_path(output_dir: str | os.PathLike) -> None:
    """One line when ``output_dir/.run.lock`` exists and is not a plain file (symlink, directory, FIFO,
    hard link); nothing when it is absent or a plain file."""
    path = _lock_path(output_dir)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        return  # output_dir is a file: the output checks say so in their own line
    refusal = _not_a_lock_file(path, info.st_mode, info.st_nlink)
    if refusal is not None:
        raise refusal


def is_empty_output(output_dir: str | os.PathLike) -> bool:
    """Whether the folder ``output_dir`` holds nothing but a plain lock file (a run's own, or a killed one's).

    A ``.run.lock`` that is a symlink, a directory or a hard link was put there by something else: the
    folder is not empty, so no run treats it as a fresh folder.
    """
    names = os.listdir(output_dir)
    if not names:
        return True
    if names != [LOCK_FILE]:
        return False
    info = os.lstat(os.path.join(output_dir, LOCK_FILE))
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def holder(output_dir: str | os.PathLike) -> str | None:
    """Who holds the lock of ``output_dir`` ("process 123 on host"), or None when nobody (or this process)."""
    path = _lock_path(output_dir)
    if path.parent in _held:
        return None
    check_lock_path(output_dir)
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # swapped since the check: acquire() refuses it with the descriptor in hand
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(fd)
    finally:
        os.close(fd)  # closing drops the probe's shared lock
    return None


def _describe(fd: int) -> str:
    """The holder's line, read through the descriptor already open (never the path again: it may be swapped)."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = os.pread(fd, 512, 0).decode("utf-8").strip()
        if text:
            return f"process {text}"
    return "another process"


def refuse_if_locked(output_dir: str | os.PathLike) -> None:
    """One line when another run holds ``output_dir``, or its lock path is not a plain file (asked before
    loading anything)."""
    other = holder(output_dir)
    if other is not None:
        raise CorefBertError(f"another run is using this --output_dir ({other}); wait for it to finish or "
                             "choose another --output_dir", path=output_dir)


def _open_lock_file(path: Path) -> int:
    """A read-write descriptor of the plain lock file at ``path`` (created if absent), never through a link."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
    except OSError as err:
        try:
            info = os.lstat(path)  # ELOOP (a symlink), EISDIR (a directory): say which in one line
        except OSError:
            info = None
        refusal = _not_a_lock_file(path, info.st_mode, info.st_nlink) if info is not None else None
        raise refusal or CorefBertError(f"cannot open the run lock {LOCK_FILE} ({err.strerror}); check this "
                                        "folder's permissions or choose another --output_dir", path=path.parent) from None
    info = os.fstat(fd)
    refusal = _not_a_lock_file(path, info.st_mode, info.st_nlink)
    if refusal is not None:
        os.close(fd)
        raise refusal
    return fd


def acquire(output_dir: str | os.PathLike) -> None:
    """Take the lock of ``output_dir`` (which exists) for this process; one line naming the holder if taken,
    or saying what the lock path is when it is not a plain file.

    Held already by this process (an earlier run of a notebook or test that stopped with an error): kept.
    """
    path = _lock_path(output_dir)
    if path.parent in _held:
        return
    while True:
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _describe(fd)
            os.close(fd)
            raise CorefBertError(f"another run is using this --output_dir ({other}); wait for it to finish or "
                                 "choose another --output_dir", path=output_dir) from None
        # A releasing run unlinks the file while holding the lock: a lock taken on that unlinked file
        # guards nothing, so take it again on the file the path names now.
        try:
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    _held[path.parent] = fd


def release(output_dir: str | os.PathLike) -> None:
    """Drop this process's lock of ``output_dir`` and remove the lock file (no-op when not held).

    The file is removed only while it is still the one locked: a run that replaced its whole output folder
    (``prepare_corpus.py`` renames the finished corpus into place) no longer has its lock file under that
    path, and the file there may be the next run's.
    """
    path = _lock_path(output_dir)
    fd = _held.pop(path.parent, None)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            path.unlink()  # removed while still locked, so no other run can be holding it
    os.close(fd)


@contextlib.contextmanager
def holding(output_dir: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of ``output_dir`` (created when absent) for the ``with`` block.

    Already held by this process (a training run that prepares its corpus into its own folder): left to its
    holder. A folder this created is removed again when the block leaves it empty (a refused or failed run).
    """
    folder = Path(output_dir)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    mine = _lock_path(folder).parent not in _held
    try:
        acquire(folder)
    except CorefBertError:
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    try:
        yield
    finally:
        if mine:
            release(folder)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only an empty folder: a finished run's output stays
