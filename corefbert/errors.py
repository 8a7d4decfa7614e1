"""The toolkit's one exception type for user-facing problems, and the CLI edge that prints it."""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


def one_line(text: object, *, first_line: bool = False, limit: int | None = None) -> str:
    """``text`` with line breaks and other control characters escaped (``\\n``), so it prints as one line.

    A file name may hold a newline; printed as is, one error would read as two ``error:`` lines.
    ``first_line``: only the first non-blank line, for a library's error quoted inside ours (transformers and
    torch put what went wrong first and paragraphs of advice after); an exception without text reads as its
    type's name. ``limit``: at most that many characters.
    """
    plain = str(text)
    if first_line:
        plain = next((line.strip() for line in plain.splitlines() if line.strip()), "")
        if not plain and isinstance(text, BaseException):
            plain = type(text).__name__
    escaped = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in plain)
    return escaped if limit is None else escaped[:limit]


class CorefBertError(Exception):
    """A problem with the user's input or setup: one line saying where, what is wrong, what to do.

    Everything else that raises is a bug in corefbert and keeps its traceback.
    """

    def __init__(self, message: str, *, path: object | None = None, position: object | None = None):
        where = ""
        if path is not None:
            where = one_line(path)
            if position is not None:
                where += f":{position}"
            where += ": "
        super().__init__(where + " ".join(str(message).split()))


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


def cli_entry(main: F) -> F:
    """Wrap a CLI ``main`` so a :class:`CorefBertError` prints one line and exits with status 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except CorefBertError as err:
            # One write of the whole line: print() writes the newline separately, and two processes
            # failing at once (DDP) could then join their lines.
            sys.stderr.write(f"error: {one_line(err)}\n")
            sys.stderr.flush()
            sys.exit(2)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
