"""The random state the loop keeps exact: an epoch's batches drawn without consuming the global RNG
(:class:`PreservedRng`, :func:`epoch_batches`), and every RNG put back around an evaluation (:func:`rng_untouched`),
so a resumed or evaluated run draws what an uninterrupted one draws."""

from __future__ import annotations

import random
from contextlib import contextmanager

import torch


@contextmanager
def rng_untouched():
    """Every RNG a training step draws from (Python, NumPy, torch CPU, CUDA), restored on leaving the block,
    also when it raises. Around an evaluation: creating its DataLoader iterator draws a seed from the torch RNG,
    and a task may draw more; none of that may shift the dropout masks of the steps that follow."""
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
    """An epoch's batches of a prepared ``loader`` as the training loop iterates them: after the ``skip`` batches
    already trained on (a resume mid-epoch), without consuming the global RNG."""
    return PreservedRng(accelerator.skip_first_batches(loader, skip) if skip else loader)


class PreservedRng:
    """Iterate a DataLoader without letting it consume the global torch RNG.

    Creating a DataLoader iterator draws a base seed from the global RNG. After a resume that draw would
    happen after the restored RNG state, shifting every later dropout mask; here it never counts.
    """

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
