"""Bounded memory for wide intermediates: a computation over many rows (spans, pairs) done a chunk of rows at a
time, each chunk recomputed in the backward pass when autograd is on.

End-to-end coreference scores kept spans against their antecedents ([spans, K, span size]) and DocRED scores
entity pairs against every relation ([pairs, relations × size]); done in one call, these intermediates grow
with the input (the number of kept spans, the pairs of a batch's largest document) times a width of hundreds
to thousands of floats. :func:`map_row_chunks` holds at most :data:`CHUNK_ELEMENTS` of them at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

# Floats one chunk of a wide intermediate may hold (64 MiB in float32).
CHUNK_ELEMENTS = 1 << 24


def map_row_chunks(function: Callable[..., torch.Tensor], rows: int, per_row: int, budget: int,
                   *tensors: torch.Tensor) -> torch.Tensor:
    """``function(start, end, *tensors)`` -> [end - start, ...] over consecutive chunks of ``rows`` rows, each
    chunk at most ``budget`` elements at ``per_row`` elements a row, concatenated -> [rows, ...].

    Rows that fit in one chunk are one call, as if unchunked. Otherwise, under autograd, each chunk runs under
    activation checkpointing: what it computes is dropped after the forward pass and recomputed in the backward
    pass (with the same dropout masks: the CPU RNG and that of ``tensors``' device are replayed), so only the
    chunks' outputs stay in memory. ``tensors`` are the tensors ``function`` reads (they name the device whose
    RNG is replayed; ``function`` may read others through its closure)."""
    size = max(1, budget // max(1, per_row))
    if rows <= size:
        return function(0, rows, *tensors)
    parts = []
    for start in range(0, rows, size):
        end = min(start + size, rows)
        if torch.is_grad_enabled():
            parts.append(checkpoint(function, start, end, *tensors, use_reentrant=False))
        else:
            parts.append(function(start, end, *tensors))
    return torch.cat(parts)
