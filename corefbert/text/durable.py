"""Durable writes: whole-or-nothing files and folders, and one error line for a write the disk refuses.

A file or folder is written under a temporary name, fsync'd and renamed into place (a rename within one
directory is atomic, so a kill leaves the old copy or the new one). A write that fails for lack of space or
permission (:func:`writing`) removes its partial folder and says what is still intact.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from corefbert.errors import COMMAND_INPUTS, CorefBertError


def check_writable(output_dir: str | os.PathLike, flag: str = "--output_dir") -> None:
    """Create ``output_dir`` and write a probe file in it; one error line if the filesystem refuses (run
    before loading models or data: a read-only mount costs seconds, not the hour to the first checkpoint)."""
    path = Path(output_dir)
    if path.is_file():
        raise CorefBertError(f"{flag} is a file, not a directory; pass a directory path", path=path)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        _write_probe(path, b"corefbert")
        if created:
            path.rmdir()  # a check leaves nothing behind; the run creates the folder when it writes
    except OSError as err:
        raise CorefBertError(f"{flag} cannot be written ({os_error_reason(err)}); free space, fix its "
                             f"permissions or choose another {flag}", path=path) from None


def _write_probe(folder: Path, content: bytes) -> None:
    """Write and fsync ``content`` into a probe file in ``folder``, then remove it; OSError when refused."""
    probe = folder / f".write_probe_{os.getpid()}"
    try:
        with open(probe, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


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
    deleting ``partial``; any other exception goes up unchanged. ``fallback`` says what is still intact (the
    previous checkpoint), ``then`` how to go on once space is freed."""
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
    try:  # ask the filesystem, before the partial copy is deleted and the space is free again
        _write_probe(folder, b"\0" * (1 << 20))
    except OSError as probe_err:
        return os_error_reason(probe_err)
    return None


def remove_folder(path: Path) -> None:
    """Delete a folder so that no interruption leaves a half-deleted one under its old name; a link at ``path`` is
    removed itself (the folder it points to is the user's)."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
        return
    if not path.exists():
        return
    trash = path if path.name.endswith(".deleting") else path.with_name(path.name + ".deleting")
    if trash != path:
        try:
            remove_folder(trash)
            os.replace(path, trash)
        except OSError:
            trash = path
    shutil.rmtree(trash, ignore_errors=True)


def replace_folder(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Put the finished folder ``tmp`` in the place of ``final``: the old one is renamed aside and deleted
    only once the new one is in place, so only between the two renames does ``final`` not exist."""
    tmp, final = Path(tmp), Path(final)
    aside = final.with_name(final.name + ".deleting")
    if final.exists():
        remove_folder(aside)
        os.replace(final, aside)
    os.replace(tmp, final)
    remove_folder(aside)


def _refuse_replacing_an_input(final: Path) -> None:
    inputs = COMMAND_INPUTS.get()
    if not inputs:
        return
    try:
        info = os.lstat(final)  # the entry the rename replaces (a link there is replaced, not its target)
    except OSError:
        return
    source = inputs.get((info.st_dev, info.st_ino))
    if source is not None:
        raise CorefBertError(f"writing here would replace the input {source}; choose another output folder (no "
                             "command writes onto one of its inputs)", path=final)


@contextlib.contextmanager
def output_path(path: str | os.PathLike, what: str = "the file") -> Iterator[Path]:
    """A fresh path to write ``path``'s new content at: a temporary file in ``path``'s folder, fsync'd and
    renamed over ``path`` when the block ends cleanly (a kill leaves the old file or the new one; a link at
    ``path`` is replaced, never its target). The one way a file enters an output folder, never over one of the
    command's inputs. A block that raises leaves ``path`` as it was; a refused write is one line naming
    ``path`` and ``what``. Library writers (safetensors, matplotlib) write at the yielded path."""
    final = Path(path)
    _refuse_replacing_an_input(final)
    try:
        handle, name = tempfile.mkstemp(prefix=f".{final.name[:40]}.", suffix=".partial", dir=final.parent)
        os.close(handle)
    except OSError as err:
        raise _output_error(final, what, err) from None
    fresh = Path(name)
    try:
        yield fresh
        try:
            with open(fresh, "rb+") as written:
                os.fsync(written.fileno())
            if final.is_dir() and not final.is_symlink():
                raise IsADirectoryError(errno.EISDIR, "is a folder")
            os.replace(fresh, final)
        except OSError as err:
            raise _output_error(final, what, err) from None
    except Exception as err:
        reason = write_failure(err, final.parent) if not isinstance(err, CorefBertError) else None
        if reason is None:
            raise
        raise _output_error(final, what, reason) from None
    finally:
        with contextlib.suppress(OSError):
            fresh.unlink()


@contextlib.contextmanager
def output_file(path: str | os.PathLike, mode: str = "w", what: str = "the file", **open_args) -> Iterator[IO]:
    """:func:`output_path` opened (``mode`` "w" or "wb"; ``encoding`` UTF-8 by default in text mode)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"output_file writes a new file: mode 'w' or 'wb', not {mode!r}")
    if mode == "w":
        open_args.setdefault("encoding", "utf-8")
    with output_path(path, what) as fresh, open(fresh, mode, **open_args) as handle:
        yield handle
        handle.flush()


def replace_file(path: str | os.PathLike, content: str | bytes, what: str = "the file") -> None:
    """Put ``content`` in ``path`` whole or not at all (:func:`output_path`)."""
    with output_file(path, "wb" if isinstance(content, bytes) else "w", what) as handle:
        handle.write(content)


def fresh_file(path: str | os.PathLike, mode: str = "w") -> IO:
    """A new empty file at ``path`` for a writer that spans several calls and is moved into place later by its
    caller (a streamed ``.partial``, :func:`put_in_place`)."""
    return open(path, mode, **({"encoding": "utf-8"} if "b" not in mode else {}))


def append_file(path: str | os.PathLike) -> IO:
    """``path`` opened for appending text (created when missing); a folder there is one line."""
    if Path(path).is_dir():
        raise CorefBertError("is a folder, not a file; remove it (or choose another --output_dir)", path=path)
    return open(path, "a", encoding="utf-8")


def put_in_place(partial: str | os.PathLike, path: str | os.PathLike, what: str = "the file") -> None:
    """Rename the finished file ``partial`` (a streamed ``.partial`` from :func:`fresh_file`) over ``path``: an
    input is never replaced, a refused rename is one line."""
    _refuse_replacing_an_input(Path(path))
    try:
        os.replace(partial, path)
    except OSError as err:
        raise _output_error(Path(path), what, err) from None


def replace_files(partial: str | os.PathLike, final: str | os.PathLike, names: list[str]) -> None:
    """Put the files and folders ``names`` of the finished folder ``partial`` in place in ``final``, one rename
    each (a folder by :func:`replace_folder`). For outputs that share ``final`` with files of the user's, where
    the whole folder cannot be swapped."""
    partial, final = Path(partial), Path(final)
    for name in names:
        if (partial / name).is_dir():
            replace_folder(partial / name, final / name)
        else:
            put_in_place(partial / name, final / name)
    fsync_dir(final)


def refuse_writing_inputs(outputs: Iterable[str | os.PathLike], inputs: Iterable[str | os.PathLike],
                          flag: str = "--output_dir") -> None:
    """One line when a file a command is about to write is one of the files it reads (the same path after
    resolving links, or the same file by another name): no command ever writes onto one of its inputs. An input
    ``-`` is standard input: the file it was redirected from, as for ``/dev/stdin``."""
    read = {}
    for source in inputs:
        try:
            if os.fspath(source) == "-":
                info = os.fstat(sys.stdin.fileno())
            else:
                read[Path(source).resolve()] = source
                info = os.stat(source)
            read[(info.st_dev, info.st_ino)] = source
        except (OSError, RuntimeError, ValueError, AttributeError):
            continue  # a missing input is reported by its reader; standard input may be closed or replaced
    for target in outputs:
        keys = []
        with contextlib.suppress(OSError, RuntimeError):
            keys.append(Path(target).resolve())
            info = os.stat(target)
            keys.append((info.st_dev, info.st_ino))
        clash = next((read[k] for k in keys if k in read), None)
        if clash is not None:
            raise CorefBertError(f"the output {target} would replace the input {clash}; choose another {flag} "
                                 "(no command writes onto one of its inputs)", path=clash)


def _output_error(final: Path, what: str, err: OSError | str) -> CorefBertError:
    reason = err if isinstance(err, str) else os_error_reason(err)
    if isinstance(err, IsADirectoryError):
        return CorefBertError(f"could not write {what}: a folder stands at this name; remove it or choose another "
                              "output folder", path=final)
    return CorefBertError(f"could not write {what} ({reason}); nothing was written there and an earlier copy, if "
                          "any, is intact. Free space, fix the permissions or choose another output folder",
                          path=final)


def write_json_durably(path: Path, values: dict) -> None:
    """``values`` as indented JSON in ``path`` (:func:`replace_file`)."""
    replace_file(path, json.dumps(values, indent=2))


def fsync_dir(path: Path) -> None:
    """Fsync a directory, so the renames in it survive a power loss; best effort (some filesystems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
