"""The arguments every training CLI shares (Hugging Face example names), and their one validation.

:class:`TrainingArguments` holds each shared flag once, with its type and default; pretraining
(:class:`corefbert.pretraining_args.PretrainingArguments`) and fine-tuning
(:class:`corefbert.finetuning.FinetuningArguments`) extend it, overriding a default only where their
paper's setting differs. :meth:`TrainingArguments.validate` is the one place a bad value becomes one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from corefbert.errors import CorefBertError

MIXED_PRECISION = ("auto", "no", "bf16", "fp16")
ON_NONFINITE = ("stop", "skip")
REPORT_TO = ("tensorboard", "wandb", "all")


@dataclass(kw_only=True)
class TrainingArguments:
    """Schedule, precision, checkpointing, logging and fault policy of one training run."""

    output_dir: str | None = field(default=None, metadata={"help": "Where checkpoints, log.jsonl and results go."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Train in a non-empty --output_dir: the earlier run's checkpoints and "
                                         "log are deleted."})
    seed: int = field(default=42, metadata={"help": "Seed of the model init, data order, masks and dropout."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Examples per process per micro-batch."})
    per_device_eval_batch_size: int = field(default=16, metadata={"help": "Examples per process in evaluation."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    max_steps: int = field(default=-1, metadata={"help": "Optimizer steps; overrides --num_train_epochs if > 0."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Epochs (fractions allowed) when --max_steps <= 0."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW decay (never on 1-D parameters: biases, "
                                                                "LayerNorm, the copy vector V)."})
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    lr_scheduler_type: str = field(default="linear", metadata={"help": "A transformers scheduler name (linear, "
                                                                       "cosine, constant_with_warmup, ...)."})
    warmup_ratio: float = field(default=0.0, metadata={"help": "Share of the optimizer steps for warm-up."})
    warmup_steps: int = field(default=0, metadata={"help": "Warm-up steps; overrides --warmup_ratio if > 0."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm; 0 turns clipping off."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for activation memory."})
    mixed_precision: str = field(
        default="auto", metadata={"help": "auto (a launcher's setting, e.g. accelerate launch --config_file; else "
                                          "bf16 where the GPU supports it, else no) | no | bf16 | fp16."})
    on_nonfinite: str = field(
        default="stop", metadata={"help": "On a NaN/inf loss: stop (after saving) or skip the step."})
    max_consecutive_skips: int = field(
        default=25, metadata={"help": "Optimizer steps skipped in a row (non-finite loss with --on_nonfinite skip, "
                                      "or fp16 overflow) before the run saves and stops."})
    logging_steps: int = field(default=10, metadata={"help": "Write a train record to log.jsonl every N steps."})
    eval_steps: int | None = field(default=None, metadata={"help": "Evaluate every N optimizer steps."})
    checkpointing_steps: str | None = field(
        default=None, metadata={"help": "Save a resumable checkpoint every N optimizer steps, or 'epoch'."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep only the last K checkpoints (0: all)."})
    resume_from_checkpoint: str | None = field(
        default=None, metadata={"help": "A checkpoints/step_N folder, or 'latest' (starts fresh when none)."})
    num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes."})
    with_tracking: bool = field(default=False, metadata={"help": "Also log to a tracker (see --report_to)."})
    report_to: str = field(default="tensorboard", metadata={"help": "tensorboard | wandb | all."})
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bars."})

    def validate(self) -> None:
        """Reject values that cannot work, each in one line; subclasses add their own after this."""
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                     "logging_steps", "max_consecutive_skips"):
            if getattr(self, name) < 1:
                raise CorefBertError(f"--{name} must be at least 1 (got {getattr(self, name)})")
        if self.eval_steps is not None and self.eval_steps < 1:
            raise CorefBertError(f"--eval_steps must be at least 1 when given (got {self.eval_steps})")
        if self.save_total_limit is not None and self.save_total_limit < 0:
            raise CorefBertError(f"--save_total_limit must be >= 0 (got {self.save_total_limit}; 0 keeps every "
                                 "checkpoint)")
        steps = self.checkpointing_steps
        if steps is not None and steps != "epoch" and not (str(steps).isdigit() and int(steps) > 0):
            raise CorefBertError(f"--checkpointing_steps {steps!r} must be a positive integer or 'epoch'")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise CorefBertError(f"--warmup_ratio must be within [0, 1] (got {self.warmup_ratio})")
        if self.learning_rate <= 0 or self.max_grad_norm < 0 or self.weight_decay < 0 or self.warmup_steps < 0:
            raise CorefBertError("--learning_rate must be > 0; --max_grad_norm, --weight_decay and --warmup_steps "
                                 "must be >= 0")
        _check_choice("mixed_precision", self.mixed_precision, MIXED_PRECISION)
        _check_choice("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
        _check_choice("report_to", self.report_to, REPORT_TO)
        from transformers import SchedulerType

        _check_choice("lr_scheduler_type", self.lr_scheduler_type, [s.value for s in SchedulerType])
        if self.mixed_precision == "fp16":
            import torch

            if not torch.cuda.is_available():
                raise CorefBertError("--mixed_precision fp16 needs a CUDA GPU; use bf16 or no on this machine")
        if self.output_dir and os.path.exists(self.output_dir) and not os.path.isdir(self.output_dir):
            raise CorefBertError("--output_dir is a file, not a directory; pass a directory path", path=self.output_dir)
        if self.with_tracking:
            tracking_backends(self.report_to)


def _check_choice(name: str, value: str, allowed) -> None:
    if value not in allowed:
        raise CorefBertError(f"--{name} {value!r} is not one of {', '.join(allowed)}")


def check_output_dir(args: TrainingArguments) -> None:
    """Refuse to start a new run in the folder of an earlier one unless told to resume or overwrite.

    A second run there would have its early checkpoints rotated away by the old run's later ones, and
    ``--resume_from_checkpoint latest`` would then continue the old run.
    """
    out = args.output_dir
    if args.resume_from_checkpoint or args.overwrite_output_dir or not os.path.isdir(out) or not os.listdir(out):
        return
    raise CorefBertError(
        "output directory is not empty (an earlier run?); pass --resume_from_checkpoint latest to continue "
        "it, --overwrite_output_dir to start over (deletes its checkpoints and log), or another --output_dir",
        path=out,
    )


def tracking_backends(report_to: str) -> list[str]:
    """The trackers ``--report_to`` names that are installed; one line naming the package when none is.

    Asked before the Accelerator exists: accelerate's own filter logs through its state-bound logger and
    raises a RuntimeError traceback when a tracker package is missing.
    """
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    available = {"tensorboard": is_tensorboard_available(), "wandb": is_wandb_available()}
    wanted = ["tensorboard", "wandb"] if report_to == "all" else [report_to]
    found = [name for name in wanted if available[name]]
    if not found:
        raise CorefBertError(
            f"--with_tracking --report_to {report_to}: {' and '.join(wanted)} not installed; "
            f"pip install {' '.join(wanted)}, or drop --with_tracking (log.jsonl is written either way)"
        )
    return found


def resolve_mixed_precision(value: str) -> str | None:
    """``auto`` -> None when a launcher chose (accelerate reads its env), bf16 on bf16 GPUs, else no."""
    if value != "auto":
        return value
    if os.environ.get("ACCELERATE_MIXED_PRECISION"):
        return None
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16"
    return "no"
