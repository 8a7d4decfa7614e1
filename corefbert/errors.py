"""The toolkit's one exception type for user-facing problems, and the CLI edge that prints it."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


def one_line(text: object, *, first_line: bool = False, limit: int | None = None) -> str:
    """``text`` with line breaks and other control characters escaped (``\\n``), so it prints as one line (a
    file name may hold a newline). ``first_line``: only the first non-blank line, for a library's error quoted
    in ours, with the rest of its paragraph (at most 400 characters) where it ends in a colon; an exception
    without text reads as its type's name. ``limit``: at most that many characters.
    """
    plain = str(text)
    if first_line:
        lines = [line.strip() for line in plain.splitlines()]
        first = next((i for i, line in enumerate(lines) if line), len(lines))
        end = first + 1
        if first < len(lines) and lines[first].endswith(":"):
            while end < len(lines) and lines[end]:  # "... from one of:" introduces the lines after it
                end += 1
        plain = " ".join(lines[first:end])
        paragraph_chars = 400  # torch lists every mismatched weight in one paragraph
        if end > first + 1 and len(plain) > paragraph_chars:
            plain = plain[:paragraph_chars].rstrip() + " ..."
        if not plain and isinstance(text, BaseException):
            plain = type(text).__name__
    escaped = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in plain)
    return escaped if limit is None else escaped[:limit]


class CorefBertError(Exception):
    """A problem with the user's input or setup: one line saying where, what is wrong, what to do (everything
    else that raises is a bug and keeps its traceback)."""

    def __init__(self, message: str, *, path: object | None = None, position: object | None = None):
        where = ""
        if path is not None:
            where = one_line(path)
            if position is not None:
                where += f":{position}"
            where += ": "
        super().__init__(where + " ".join(str(message).split()))


# The running command's input files, (device, inode) -> path, which no write of it may replace
# (corefbert.text.durable). None outside a command: a library user who rewrites a file does so on purpose.
COMMAND_INPUTS: contextvars.ContextVar[dict[tuple[int, int], str] | None] = contextvars.ContextVar(
    "command_inputs", default=None)


def note_input(path: str | os.PathLike) -> None:
    """Remember ``path`` as one of the running command's inputs (``*_file`` arguments, CoNLL files, resolve's
    text; not the JSON readers, which also read a run's own state that it rewrites)."""
    inputs = COMMAND_INPUTS.get()
    if inputs is not None:
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            return  # a missing input is reported by its reader
        inputs[(info.st_dev, info.st_ino)] = os.fspath(path)


# What torch says when an allocation fails: the CPU allocator's RuntimeError ("can't allocate memory", "not
# enough memory"), torch.OutOfMemoryError (a RuntimeError: "CUDA out of memory", "MPS backend out of memory").
_OUT_OF_MEMORY = re.compile(r"can't allocate memory|not enough memory|out of memory", re.IGNORECASE)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says that an allocation failed (Python's ``MemoryError``, torch's CPU or GPU allocator)."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError" or \
        isinstance(err, RuntimeError) and bool(_OUT_OF_MEMORY.search(str(err)))


def _allocation(err: BaseException) -> str:
    """What the failed allocation asked for, as torch reports it ("4.0 GiB"), or "" when it does not say."""
    text = str(err)
    found = re.search(r"tried to allocate (\d+) bytes", text)
    if found:
        size = int(found.group(1))
        return f"{size / 2 ** 30:.1f} GiB" if size >= 2 ** 30 else f"{max(1, round(size / 2 ** 20))} MiB"
    found = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", text)
    return found.group(1) if found else ""


@contextlib.contextmanager
def out_of_memory_as_error(what: str, advice: str) -> Iterator[None]:
    """Turn a failed allocation inside the block into one :class:`CorefBertError` line: ``out of memory <what>
    (<the allocation>); <advice>``, where ``advice`` names the flag that bounds this memory. Other errors pass."""
    try:
        yield
    except Exception as err:  # MemoryError is an Exception too
        if not is_out_of_memory(err):
            raise
        asked = _allocation(err)
        raise CorefBertError(f"out of memory {what}{f' (an allocation of {asked} failed)' if asked else ''}; "
                             f"{advice}") from None


# What torch's DataLoader says when a worker process dies: its SIGCHLD handler ("DataLoader worker (pid 123) is
# killed by signal: Killed. "; "Bus error. It is possible that dataloader's workers are out of shared memory"), the
# reader that finds it gone ("DataLoader worker (pid(s) 123) exited unexpectedly"), or its exit status.
_WORKER_DIED = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (?:is killed by signal: ([^.]+)|"
                          r"exited unexpectedly(?: with exit code (-?\d+))?)")


def dataloader_worker_died(err: BaseException) -> str | None:
    """The one line for a data loader worker process that died under the command (killed by the kernel's
    out-of-memory killer, most often: 86 lines of traceback before), or None when ``err`` says no such thing."""
    matches, seen = [], err
    while seen is not None:  # "exited unexpectedly" is raised from the SIGCHLD handler's error, which names the signal
        found = _WORKER_DIED.search(str(seen)) if isinstance(seen, RuntimeError) else None
        matches += [found] if found else []
        seen = seen.__cause__ or seen.__context__
    if not matches:
        return None
    pid, signal_name, code = next((m for m in matches if m.group(2)), matches[0]).groups()
    how = f"was killed by signal {signal_name.strip()}" if signal_name else \
        f"exited with code {code}" if code else "exited unexpectedly"
    shm = " (out of shared memory: raise /dev/shm)" if signal_name and "Bus error" in signal_name else \
        " (the system's out-of-memory killer, most often)" if signal_name else ""
    return (f"a data loader worker process (pid {pid.strip()}) {how}{shm}; rerun with --num_workers 0 (batches made "
            "in the training process) or with more memory. Checkpoints written before stay: a training run "
            "continues from its newest with --resume_from_checkpoint latest")


def cli_entry(main: F) -> F:
    """Wrap a CLI ``main`` so a :class:`CorefBertError`, or a data loader worker that died
    (:func:`dataloader_worker_died`), prints one line and exits with status 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        token = COMMAND_INPUTS.set({})  # no write of the command may replace a file it read
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        except (CorefBertError, RuntimeError) as err:
            line = str(err) if isinstance(err, CorefBertError) else dataloader_worker_died(err)
            if line is None:
                raise
            # One write of the whole line: two processes failing at once (DDP) could join print()'s pieces.
            sys.stderr.write(f"error: {one_line(line)}\n")
            sys.stderr.flush()
            sys.exit(2)
        finally:
            COMMAND_INPUTS.reset(token)

    return wrapper  # type: ignore[return-value]
