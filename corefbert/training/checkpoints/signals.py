"""SIGTERM/SIGINT during a run (:class:`StopSignal`: save at the next step and exit; an evaluation abandoned
within one batch, :class:`EvaluationStopped`) and the question all processes answer (:func:`any_process`)."""

from __future__ import annotations

import signal


class EvaluationStopped(Exception):
    """A SIGTERM/SIGINT came during an evaluation of the training loop: it is abandoned between two batches
    (none of its partial results is written); the loop then saves what is not saved yet and exits."""


class StopSignal:
    """Remembers SIGTERM/SIGINT (sent before preemption) so a training loop can save at its next optimizer
    step and exit. While entered it is :attr:`active`: evaluations call :func:`raise_if_stopping` between
    batches, so a signal ends one within a batch (schedulers kill ~30 s after SIGTERM)."""

    #: The StopSignal the running training loop listens with; None outside a loop (a signal kills as usual).
    active: StopSignal | None = None

    def __init__(self, accelerator):
        self.received: int | None = None
        self.accelerator = accelerator  # to agree with the other processes
        self._previous = {}
        self._outer: StopSignal | None = None

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread (e.g. a notebook worker): keep default handling
                pass
        self._outer, StopSignal.active = StopSignal.active, self
        return self

    def _handle(self, signum, frame):
        self.received = signum

    def __exit__(self, *exc):
        StopSignal.active = self._outer
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def requested(self) -> bool:
        """Whether any process received a signal (every process must ask at the same point: they all stop at
        the same batch, or the ones that go on would wait forever in their next collective)."""
        return any_process(self.accelerator, self.received is not None)


def raise_if_stopping() -> None:
    """Called by an evaluation before each batch: inside a training loop that received SIGTERM/SIGINT (on any
    process) it raises :class:`EvaluationStopped`; elsewhere it does nothing. Every process of a run must call
    it equally often (accelerate's prepared eval loaders give each the same number of batches)."""
    stop = StopSignal.active
    if stop is not None and stop.requested():
        raise EvaluationStopped


def any_process(accelerator, flag: bool, if_peer_gone: bool | None = None) -> bool:
    """True when ``flag`` is set on any process (every process must call this at the same point).
    ``if_peer_gone``: the answer when the exchange itself fails because another process has already exited
    (gloo raises "Connection closed by peer" on the one still waiting); None lets that error through."""
    if accelerator.num_processes == 1:
        return flag
    import torch

    value = torch.tensor([1.0 if flag else 0.0], device=accelerator.device)
    try:
        return bool(accelerator.reduce(value, reduction="sum").item() > 0)
    except RuntimeError:
        if if_peer_gone is None:
            raise
        return if_peer_gone
