"""Bounded memory for wide intermediates: a computation over many rows (spans, pairs) done a chunk of rows at
a time, each chunk recomputed in the backward pass when autograd is on. End-to-end coreference ([spans, K,
span size]) and DocRED ([pairs, relations × size]) would otherwise hold intermediates that grow with the input
times a width of hundreds to thousands of floats.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch.utils.checkpoint import checkpoint

# Floats one chunk of a wide intermediate may hold (64 MiB in float32).
CHUNK_ELEMENTS = 1 << 24


def map_row_chunks(function: Callable[..., torch.Tensor], rows: int, per_row: int, budget: int,
                   *tensors: torch.Tensor) -> torch.Tensor:
    """``function(start, end, *tensors)`` -> [end - start, ...] over consecutive chunks of ``rows`` rows, each
    chunk at most ``budget`` elements at ``per_row`` elements a row, concatenated -> [rows, ...].

    Under autograd each chunk (if more than one) is recomputed in the backward pass with the same dropout
    masks (activation checkpointing; the CPU RNG and that of ``tensors``' device are replayed), so only the
    chunks' outputs stay in memory. ``tensors``: what ``function`` reads (besides its closure)."""
    size = max(1, budget // max(1, per_row))
    if rows <= size:
        return function(0, rows, *tensors)
    chunk = partial(checkpoint, function, use_reentrant=False) if torch.is_grad_enabled() else function
    return torch.cat([chunk(start, min(start + size, rows), *tensors) for start in range(0, rows, size)])
