"""The one timer the micro-benchmarks share (run as ``python benchmarks/x.py``, which puts this folder on the path)."""

from __future__ import annotations

import time
from collections.abc import Callable


def seconds_per_call(fn: Callable[[], object], repeats: int) -> float:
    """Mean wall seconds of ``fn()`` over ``repeats`` calls, after one untimed warm-up call."""
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats
