"""The toolkit's one exception type for user-facing problems, and the CLI edge that prints it."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


class CorefBertError(Exception):
    """A problem with the user's input or setup: one line saying where, what is wrong, what to do.

    Everything else that raises is a bug in corefbert and keeps its traceback.
    """

    def __init__(self, message: str, *, path: object | None = None, position: object | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if position is not None:
                where += f":{position}"
            where += ": "
        super().__init__(where + " ".join(str(message).split()))


def cli_entry(main: F) -> F:
    """Wrap a CLI ``main`` so a :class:`CorefBertError` prints one line and exits with status 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except CorefBertError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
