"""The training loop's state between optimizer steps: its position in the data and its running sums (a
checkpoint's trainer state holds these fields by name, beside ``step``, ``job`` and ``settings``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch

from corefbert.errors import CorefBertError


def new_window() -> dict[str, Any]:
    """An empty running log window. Loss, logs and tokens stay on the device between log steps (no host sync
    per micro-batch); slots (batch x padded length) and model FLOPs come from shapes alone."""
    return {"loss": 0.0, "logs": {}, "micro": 0, "tokens": 0, "slots": 0, "flops": 0.0}


@dataclass
class LoopState:
    """Where a run is and what it has summed so far; the resume position is ``(epoch, batches_in_epoch)``."""

    epoch: int = 0
    #: Micro-batches of ``epoch`` already drawn (the resume skips them).
    batches_in_epoch: int = 0
    #: Real tokens trained on, summed over processes (jobs whose batches name them).
    tokens: int = 0
    #: fp16 steps whose update the loss scaler skipped.
    overflow_steps: int = 0
    #: Skipped steps (non-finite loss or fp16 overflow) since the last good one: ``--max_consecutive_skips``.
    skipped_in_a_row: int = 0
    #: Sum and count of logged micro-batch losses: ``train_loss`` is their mean.
    loss_sum: float = 0.0
    loss_batches: int = 0
    #: The last micro-batch of an epoch was drawn; the step it completes ends the epoch (evaluation, save).
    epoch_end_pending: bool = False
    #: The evaluation of this step was abandoned at a signal: the resume repeats it.
    evaluation_pending: bool = False
    #: The running log window since the last log record (:func:`new_window`); part of the checkpoint so a
    #: resumed run logs the same means as an uninterrupted one.
    window: dict[str, Any] = field(default_factory=new_window)

    def host_window(self) -> dict[str, Any]:
        """The log window with every value read to the host (what a checkpoint stores as JSON)."""
        host = {key: float(value) if torch.is_tensor(value) else value for key, value in self.window.items()}
        host["tokens"] = int(host["tokens"])
        host["logs"] = {name: float(value) for name, value in self.window["logs"].items()}
        return host

    def to_checkpoint(self) -> dict[str, Any]:
        """The JSON-able fields, by name, as the trainer state file holds them."""
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"window": self.host_window()}

    @classmethod
    def from_checkpoint(cls, saved: dict[str, Any]) -> LoopState:
        """The state a trainer state file holds; one without one of the fields is refused in one line."""
        missing = [f.name for f in fields(cls) if f.name not in saved]
        if missing:
            raise CorefBertError(f"the checkpoint's trainer state has no {', '.join(missing)}: written by another "
                                 "version; train again (or resume with the version that wrote it)")
        return cls(**{f.name: saved[f.name] for f in fields(cls)})
