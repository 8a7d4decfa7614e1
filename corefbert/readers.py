"""Opening a user's file: every OS, encoding and JSON problem becomes one ``CorefBertError`` line.

The benchmark readers in ``corefbert/tasks/`` check the structure of what they read; this module is the
one place that turns "missing, not UTF-8, not JSON" into the same messages for all of them.
"""

from __future__ import annotations

import json
import os
from typing import Any

from corefbert.errors import CorefBertError


def read_json_file(path: str, missing: str = "file not found; check the path") -> Any:
    """The parsed content of the JSON file ``path``; ``missing`` is the message when it does not exist."""
    if not os.path.isfile(path):
        raise CorefBertError(missing, path=path)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except UnicodeDecodeError as err:
        raise CorefBertError(
            f"not UTF-8 text ({err.reason} at byte {err.start}); re-encode it as UTF-8", path=path
        ) from None
    except json.JSONDecodeError as err:
        raise CorefBertError(
            f"not valid JSON ({err.msg}); fix or re-download the file", path=path,
            position=f"{err.lineno}:{err.colno}",
        ) from None
    except OSError as err:
        raise CorefBertError(f"cannot read the file ({err.strerror})", path=path) from None
