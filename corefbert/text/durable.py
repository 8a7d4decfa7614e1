"""Durable writes: whole-or-nothing folders, fsync'd files, and one error line for a write the disk refuses.

A folder is written under a temporary name and renamed into place (:func:`replace_folder`); a rename within
one directory is atomic, so a kill at any moment leaves the old copy or the new one, never half of one. A
write that fails for lack of space or permission (:func:`writing`) removes its partial folder and says what
is still intact. Checkpoints (:mod:`corefbert.training.checkpointing`), prepared corpora
(:mod:`corefbert.corpus`), final models and converted checkpoints are all written this way.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from corefbert.errors import CorefBertError


def check_writable(output_dir: str | os.PathLike, flag: str = "--output_dir") -> None:
    """Create ``output_dir`` and write a probe file in it; one error line if the filesystem refuses.

    Run before loading models or data: a read-only mount or a full disk should cost seconds, not the hour
    it takes to reach the first checkpoint.
    """
    path = Path(output_dir)
    if path.is_file():
        raise CorefBertError(f"{flag} is a file, not a directory; pass a directory path", path=path)
    probe = path / f".write_probe_{os.getpid()}"
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as handle:
            handle.write(b"corefbert")
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
        if created:
            path.rmdir()  # a check leaves nothing behind; the run creates the folder when it writes
    except OSError as err:
        with contextlib.suppress(OSError):
            probe.unlink()
        raise CorefBertError(
            f"{flag} cannot be written ({os_error_reason(err)}); free space, fix its permissions or choose another "
            f"{flag}", path=path,
        ) from None


def os_error_reason(err: OSError) -> str:
    """A short reason for a failed write: disk full, read-only file system, permission denied, ..."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    if err.errno == errno.EROFS:
        return "read-only file system"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return err.strerror or type(err).__name__


@contextlib.contextmanager
def writing(partial: str | os.PathLike, what: str, fallback: str,
            then: str = "rerun with --resume_from_checkpoint latest") -> Iterator[None]:
    """Turn a failed write of ``partial`` (disk full, read-only, no permission) into one error line, after
    deleting ``partial``; any other exception is a bug and goes up unchanged.

    ``fallback`` says what is still intact (e.g. the previous checkpoint), so the message tells the user
    exactly where to resume from once space is freed.
    """
    try:
        yield
    except Exception as err:
        reason = write_failure(err, Path(partial).parent)
        if reason is None:
            raise
        remove_folder(Path(partial))
        raise write_error(partial, what, reason, fallback, then) from None


def write_error(partial, what: str, reason: str, fallback: str,
                then: str = "rerun with --resume_from_checkpoint latest") -> CorefBertError:
    return CorefBertError(f"could not write {what} ({reason}); removed the partial copy, {fallback}. Free space "
                          f"or choose another --output_dir, then {then}", path=partial)


# Writers that do not raise OSError: safetensors (Rust) raises SafetensorError naming the OS error, and
# torch.save's zip writer a RuntimeError ("unexpected pos ...") that names nothing.
_OS_ERROR_TEXT = {"os error 28": "disk full", "No space left": "disk full", "os error 122": "disk full",
                  "os error 30": "read-only file system", "os error 13": "permission denied"}


def write_failure(err: Exception, folder: Path) -> str | None:
    """Why writing into ``folder`` failed, or None when ``err`` is not a failure to write."""
    if isinstance(err, OSError):
        return os_error_reason(err)
    text = str(err)
    for marker, reason in _OS_ERROR_TEXT.items():
        if marker in text:
            return reason
    if not isinstance(err, RuntimeError | ValueError) and type(err).__name__ != "SafetensorError":
        return None
    # Ask the filesystem directly, before the partial copy is deleted and the space is free again.
    probe = folder / f".write_probe_{os.getpid()}"
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * (1 << 20))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as probe_err:
        return os_error_reason(probe_err)
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def remove_folder(path: Path) -> None:
    """Delete a folder so that no interruption leaves a half-deleted one under its old name."""
    if not path.exists():
        return
    trash = path if path.name.endswith(".deleting") else path.with_name(path.name + ".deleting")
    if trash != path:
        try:
            os.replace(path, trash)
        except OSError:
            trash = path
    shutil.rmtree(trash, ignore_errors=True)


def replace_folder(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Put the finished folder ``tmp`` in the place of ``final``.

    The old ``final`` is renamed aside and deleted only once the new one is in place, so the old copy stays
    whole through the slow part (the deletion); only between the two renames does ``final`` not exist.
    Deleting first, as before, left no ``final`` at all for as long as the deletion took.
    """
    tmp, final = Path(tmp), Path(final)
    aside = final.with_name(final.name + ".deleting")
    if final.exists():
        remove_folder(aside)
        os.replace(final, aside)
    os.replace(tmp, final)
    remove_folder(aside)


def replace_files(partial: str | os.PathLike, final: str | os.PathLike, names: list[str]) -> None:
    """Put the files and folders ``names`` of the finished folder ``partial`` in place in ``final``, one rename
    each (a folder by :func:`replace_folder`); a link planted at a name in ``final`` is replaced, never written
    through. For outputs that share ``final`` with files of the user's, where the whole folder cannot be swapped."""
    partial, final = Path(partial), Path(final)
    for name in names:
        if (partial / name).is_dir():
            replace_folder(partial / name, final / name)
        else:
            os.replace(partial / name, final / name)
    fsync_dir(final)


def replace_file(path: str | os.PathLike, text: str) -> None:
    """Put ``text`` in ``path`` whole or not at all: written beside (``path.tmp``), fsync'd, renamed over it.

    A kill mid-write leaves the old file (or none), never half a file that reads as done or as a cut log.
    """
    tmp = Path(f"{os.fspath(path)}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json_durably(path: Path, values: dict) -> None:
    """Write ``values`` as indented JSON into ``path`` and fsync it: on disk before anything renamed after it."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(values, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    """Fsync a directory, so the renames in it survive a power loss; best effort (some filesystems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
