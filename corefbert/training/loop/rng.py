"""The random state the loop keeps exact: a resumed or evaluated run draws what an uninterrupted one does."""

from __future__ import annotations

import random
from contextlib import contextmanager

import torch


@contextmanager
def rng_untouched():
    """Every RNG a training step draws from (Python, NumPy, torch CPU, CUDA), restored on leaving the block,
    also when it raises: an evaluation's draws (its loader's seed, a task's own) must not shift dropout."""
    import numpy as np

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])


def epoch_batches(accelerator, loader, skip: int = 0) -> PreservedRng:
    """An epoch's batches of a prepared ``loader`` after the ``skip`` already trained on, RNG untouched."""
    return PreservedRng(accelerator.skip_first_batches(loader, skip) if skip else loader)


class PreservedRng:
    """Iterate a DataLoader without letting it consume the global torch RNG: creating its iterator draws a
    base seed, which after a resume would follow the restored RNG state and shift every later dropout mask."""

    def __init__(self, dataloader):
        self.dataloader = dataloader

    def __iter__(self):
        iterator = None
        while True:
            state = torch.get_rng_state()
            try:
                if iterator is None:
                    iterator = iter(self.dataloader)
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                torch.set_rng_state(state)
            yield batch
