"""What a model brings to the training loop (:class:`TrainingJob`) and what its step returns (:class:`StepOutput`):
the one protocol pretraining and every fine-tuning task implement (docs/contracts.md, "Training core")."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class StepOutput:
    """What a job's training step returns: the loss to back-propagate and named parts to log as means."""

    loss: torch.Tensor  # [] scalar
    logs: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [] scalar, e.g. mlm_loss, mrp_loss


class TrainingJob:
    """What a model brings to the loop. Subclasses override what they need."""

    #: Evaluate at the end of every epoch when ``--eval_steps`` is not given (fine-tuning's convention).
    evaluate_each_epoch: bool = False

    def training_step(self, model, batch: dict) -> StepOutput:
        """Forward one micro-batch; the default reads ``.loss`` of the model's output."""
        return StepOutput(model(**batch).loss)

    def memory_advice(self) -> str:
        """What to lower when a training step runs out of memory: the one line the run then ends in says it."""
        return "lower --per_device_train_batch_size (--gradient_accumulation_steps keeps the batch an update sees)"

    def token_masks(self, batch: dict) -> list[torch.Tensor]:
        """The ``[batch, length]`` masks of real tokens the log counts (``tokens``, ``tokens_per_s``,
        ``slot_fill``; none: no such fields); the first also sizes the FLOPs. Default: ``attention_mask``."""
        mask = batch.get("attention_mask") if isinstance(batch, dict) else None
        return [mask] if mask is not None else []

    def on_train_begin(self, model, step: int) -> None:
        """Called once after any resume, before the first step (``step`` is where training starts)."""

    def on_epoch_begin(self, epoch: int) -> None:
        """Called before the batches of each epoch are drawn (also for the epoch a resume continues)."""

    def evaluate(self, model, step: int, epoch: float) -> None:
        """Called every ``--eval_steps``, at epoch ends when :attr:`evaluate_each_epoch`, and at the last step
        (after its checkpoint; again on a resume from that checkpoint)."""

    def on_train_end(self, model, step: int) -> None:
        """The final save, after the last evaluation; a signal meanwhile waits for it to finish."""

    def settings(self) -> dict:
        """JSON-able settings that decide the result beyond :class:`TrainingArguments` (corpus, model, task
        files): kept in each checkpoint; a resume under other values is refused."""
        return {}

    def state_dict(self) -> dict:
        """JSON-able state to keep in each checkpoint (e.g. the best metric so far)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned, on resume."""
