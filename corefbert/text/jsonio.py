"""The one reader of JSON and JSON Lines files (a user's and a run's own), and the values JSON writers share.

Format readers check only the structure: this module turns "missing, unreadable, not UTF-8, not JSON" into
the same one-line ``CorefBertError`` (``file:line:column: not valid JSON (...)``); ``.gz`` and ``.bz2`` are
read decompressed. No other module parses JSON but the run log's reader, through :func:`parse_json`.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import json
import math
import os
import zlib
from collections.abc import Iterator
from typing import IO, Any

from corefbert.errors import CorefBertError, one_line

COMPRESSED_SUFFIXES = (".gz", ".bz2")
_BOM = b"\xef\xbb\xbf"


def json_safe(value: Any) -> Any:
    """``value`` with numpy/torch scalars as Python numbers and NaN/inf as None (JSON has no NaN), for writing."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def json_value(value: Any) -> Any:
    """``value`` as a JSON file holds it once written and read back (tuples as lists, keys as strings, anything
    JSON has no type for as its ``str``): what a run's recorded settings are compared in."""
    return json.loads(json.dumps(value, default=str))


def open_compressed(path: str):
    """``path`` opened for reading bytes, decompressed when it ends in ``.gz`` or ``.bz2``."""
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".bz2"):
        return bz2.open(path, "rb")
    return open(path, "rb")


def read_json(path: str, missing: str = "file not found; check the path") -> Any:
    """The parsed content of the JSON file ``path``; ``missing`` is the message when it does not exist."""
    if not os.path.isfile(path):
        raise CorefBertError(missing, path=path)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except UnicodeDecodeError as err:
        raise CorefBertError(f"not UTF-8 text ({err.reason} at byte {err.start}); re-encode it as UTF-8",
                             path=path) from None
    except json.JSONDecodeError as err:
        raise CorefBertError(f"not valid JSON ({err.msg}); fix or re-download the file", path=path,
                             position=f"{err.lineno}:{err.colno}") from None
    except (ValueError, RecursionError) as err:  # an integer of more than 4300 digits, nesting beyond the stack
        raise CorefBertError(f"not valid JSON ({_reason(err)}); fix or re-download the file", path=path) from None
    except OSError as err:
        raise CorefBertError(f"cannot read the file ({err.strerror})", path=path) from None


def parse_json(text: str | bytes) -> Any:
    """The JSON value of ``text`` (UTF-8 bytes or a string); ``ValueError`` when it is not one (the caller decides
    what that means: the torn last line of a log, a record to refuse)."""
    try:
        return json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except (UnicodeDecodeError, RecursionError) as err:
        raise ValueError(_reason(err)) from None


def read_record(path: str, fix: str) -> dict | None:
    """A JSON object of the toolkit's own making (a point's record, a probe's cached result), None when there
    is none; a file cut short, not JSON or not an object is one line naming it and ending in ``fix``."""
    if not os.path.isfile(path):
        return None
    try:
        value = read_json(path)
    except CorefBertError as err:
        raise CorefBertError(f"damaged ({str(err).split(': ', 1)[-1].split(';')[0]}); {fix}", path=path) from None
    if not isinstance(value, dict):
        raise CorefBertError(f"damaged (a JSON {type(value).__name__}, not an object); {fix}", path=path)
    return value


def read_jsonl(path: str, expected: str = "one JSON value per line expected",
               source: IO[bytes] | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, value)`` for each non-blank line of the JSON Lines file ``path``.

    ``expected`` ends the message of a line that is not JSON ("expected MRQA JSONL"). Line ends are ``\\n``,
    ``\\r\\n`` or ``\\r`` only (U+2028 inside a string is a character of the value); a UTF-8 byte-order mark
    is ignored. ``source``: the bytes already opened (standard input), ``path`` then only names them.
    """
    if source is None and not os.path.isfile(path):
        raise CorefBertError("file not found; check the path", path=path)
    number, offset = 0, 0  # the line last read; the byte (decompressed) where the next one starts
    try:
        with contextlib.nullcontext(source) if source is not None else open_compressed(path) as handle:
            for raw in handle:
                if offset == 0 and raw.startswith(_BOM):
                    raw, offset = raw[len(_BOM):], len(_BOM)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise CorefBertError(f"not UTF-8 text ({err.reason} at byte {offset + err.start}); re-encode "
                                         "it as UTF-8", path=path, position=number + 1) from None
                offset += len(raw)
                text = text.removesuffix("\n").removesuffix("\r")
                # A raw \r cannot occur inside a JSON string, so splitting on it never cuts a value.
                for line in text.split("\r"):
                    number += 1
                    if line.strip():
                        yield number, _parse_line(line, path, number, expected)
    except (OSError, EOFError, zlib.error) as err:
        if path.endswith(COMPRESSED_SUFFIXES):
            raise CorefBertError(f"unreadable compressed file ({_reason(err)})", path=path,
                                 position=number + 1) from None
        raise CorefBertError(f"cannot read the file ({_reason(err)})", path=path) from None


def _parse_line(line: str, path: str, number: int, expected: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise CorefBertError(f"not valid JSON ({err.msg}); {expected}", path=path,
                             position=f"{number}:{err.colno}") from None
    except (ValueError, RecursionError) as err:
        raise CorefBertError(f"not valid JSON ({_reason(err)}); {expected}", path=path, position=number) from None


def _reason(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return "nested too deeply"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return one_line(err, first_line=True)
