"""The arguments every training CLI shares (Hugging Face example names), and their one validation.
Pretraining's (:class:`corefbert.pretraining.pretraining_args.PretrainingArguments`) and fine-tuning's
(:class:`corefbert.tasks.base.FinetuningArguments`) override a default only where their paper's differs.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field

from corefbert.argparser import conform_value
from corefbert.errors import CorefBertError, one_line
from corefbert.training.checkpoints.signals import any_process
from corefbert.training.outputs.lock import is_empty_output

MIXED_PRECISION = ("auto", "no", "bf16", "fp16")
ON_NONFINITE = ("stop", "skip")
#: ``--torch_compile_scope``: the repeated encoder layers (regional compilation) or the whole model.
COMPILE_SCOPES = ("layers", "model")
#: ``--num_workers auto`` on an accelerator: at most this many loader workers per training process.
AUTO_WORKERS = 4
#: ``--optim``, Hugging Face's names: AdamW (every recipe but one) and Adagrad (Parikh et al.'s Decomposable
#: Attention, the pronoun-pair classifier's paper setting).
OPTIMIZERS = ("adamw_torch", "adagrad")
OFFLINE_TRACKER = " (the offline one: pip install 'corefbert[tracking]')"


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
    optim: str = field(default="adamw_torch", metadata={"help": "Optimizer, Hugging Face's names: adamw_torch | "
                                                                  "adagrad (torch.optim.Adagrad; --adam_* unused)."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of the optimizer."})
    weight_decay: float = field(default=0.01, metadata={
        "help": "Weight decay (never on 1-D parameters: biases, LayerNorm, the copy vector V); AdamW's "
                "decoupled decay, Adagrad's L2 term."})
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    lr_scheduler_type: str = field(default="linear", metadata={
        "help": "step (warm-up, then x --lr_decay_factor every --lr_decay_steps) or a transformers "
                "scheduler name (linear, cosine, constant_with_warmup, ...)."})
    lr_decay_steps: int = field(default=0, metadata={
        "help": "--lr_scheduler_type step: optimizer steps between two decays of the learning rate; "
                "warmup_stable_decay: the last steps, over which the LR decays linearly to 0 (before them "
                "it is constant after warm-up)."})
    lr_decay_factor: float = field(default=0.5, metadata={"help": "--lr_scheduler_type step: the factor of each decay."})
    warmup_ratio: float = field(default=0.0, metadata={"help": "Share of the optimizer steps for warm-up."})
    warmup_steps: int = field(default=0, metadata={"help": "Warm-up steps; overrides --warmup_ratio if > 0."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm; 0 turns clipping off."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for activation memory."})
    torch_compile: bool = field(
        default=False, metadata={"help": "Compile the model (torch.compile, dynamic shapes; --torch_compile_scope): "
                                         "faster steps on a GPU after a first step that compiles; the log's compile "
                                         "record gives that time and the graphs compiled."})
    torch_compile_scope: str = field(
        default="layers", metadata={"help": "What --torch_compile compiles: layers (each repeated encoder layer, one "
                                            "compiled graph shared by all of them; the rest runs eager) or model "
                                            "(the whole model at once: several times the compile time)."})
    torch_compile_backend: str = field(
        default="inductor", metadata={"help": "torch.compile backend (inductor; aot_eager and eager for debugging)."})
    torch_compile_mode: str | None = field(
        default=None, metadata={"help": "torch.compile mode: default | reduce-overhead | max-autotune."})
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
    ignore_changed_settings: bool = field(
        default=False, metadata={"help": "Resume although a setting that decides the result (batch size, seed, "
                                         "learning rate, corpus, model, ...) differs from the checkpoint's."})
    num_workers: str = field(
        default="0", metadata={"help": "DataLoader worker processes per training process: a number, or auto (a few "
                                       "on a GPU, where collation then overlaps the step; 0 on CPU, where workers "
                                       "would take cores from the step)."})
    with_tracking: bool = field(default=False, metadata={"help": "Also log to a tracker (see --report_to)."})
    report_to: str = field(default="tensorboard", metadata={
        "help": "The tracker(s) of --with_tracking: any accelerate knows (tensorboard, the offline one of the "
                "tracking extra; wandb, mlflow, trackio, comet_ml, aim, clearml, dvclive, swanlab, ...), several "
                "joined by commas, or all (every one installed)."})
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bars."})
    # The Hub round trip (corefbert/training/hub.py): Hugging Face's names, used at the end of a run.
    push_to_hub: bool = field(
        default=False, metadata={"help": "At the end, upload the model (pretraining: final/; fine-tuning: best/, "
                                         "else last/) with a model card to the Hub; staged in output_dir/hub first."})
    hub_model_id: str | None = field(
        default=None, metadata={"help": "Hub repository, user/name or org/name (default: the --output_dir folder's "
                                        "name under the token's account)."})
    hub_private_repo: bool = field(default=False, metadata={"help": "Create the Hub repository private."})
    hub_token: str | None = field(  # repr=False: a printed or logged args object never shows it
        default=None, repr=False,
        metadata={"help": "Hub token (default: $HF_TOKEN or `hf auth login`); never written to disk or shown."})

    def validate(self) -> None:
        """Reject values that cannot work, each in one line; subclasses add their own after this."""
        _check_types(self)
        if self.output_dir is not None and not self.output_dir.strip():
            raise CorefBertError("--output_dir is empty; pass the folder the run should write to")
        if self.seed < 0:
            raise CorefBertError(f"--seed must be >= 0 (got {self.seed})")
        _check_num_workers(self.num_workers)
        _check_choice("torch_compile_scope", self.torch_compile_scope, COMPILE_SCOPES)
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise CorefBertError(f"--{name} must be within [0, 1) (got {getattr(self, name)})")
        for name in ("adam_epsilon", "learning_rate"):
            if getattr(self, name) <= 0:
                raise CorefBertError(f"--{name} must be > 0 (got {getattr(self, name)})")
        if self.max_steps <= 0 and self.num_train_epochs <= 0:
            raise CorefBertError(f"--num_train_epochs must be > 0 when --max_steps is not given (got "
                                 f"{self.num_train_epochs})")
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
        for name in ("max_grad_norm", "weight_decay", "warmup_steps"):
            if getattr(self, name) < 0:
                raise CorefBertError(f"--{name} must be >= 0 (got {getattr(self, name)})")
        _check_choice("optim", self.optim, OPTIMIZERS)
        _check_choice("mixed_precision", self.mixed_precision, MIXED_PRECISION)
        _check_choice("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
        _check_choice("report_to", self.report_to, known_trackers(), several=True)
        from transformers import SchedulerType

        _check_choice("lr_scheduler_type", self.lr_scheduler_type, ["step", *(s.value for s in SchedulerType)])
        if self.lr_scheduler_type in ("step", "warmup_stable_decay") and self.lr_decay_steps < 1:
            raise CorefBertError(f"--lr_scheduler_type {self.lr_scheduler_type} needs --lr_decay_steps >= 1 (got "
                                 f"{self.lr_decay_steps})")
        if not 0.0 < self.lr_decay_factor <= 1.0:
            raise CorefBertError(f"--lr_decay_factor must be within (0, 1] (got {self.lr_decay_factor})")
        if self.mixed_precision == "fp16":
            import torch

            if not torch.cuda.is_available():
                raise CorefBertError("--mixed_precision fp16 needs a CUDA GPU; use bf16 or no on this machine")
        if self.output_dir and os.path.exists(self.output_dir) and not os.path.isdir(self.output_dir):
            raise CorefBertError("--output_dir is a file, not a directory; pass a directory path", path=self.output_dir)
        if self.with_tracking:
            tracking_backends(self.report_to)
        # huggingface_hub loads only where arguments are checked
        from corefbert.training.hub import check_hub_arguments

        check_hub_arguments(self)


def _check_num_workers(value: str) -> None:
    """``--num_workers``: ``auto`` or a count >= 0."""
    if value == "auto":
        return
    if not value.strip().lstrip("+-").isdigit():
        raise CorefBertError(f"--num_workers must be auto or a number (got {value!r})")
    if int(value) < 0:
        raise CorefBertError(f"--num_workers must be >= 0 (got {int(value)})")


_SCALARS = {int, float, str, bool, type(None)}


def _check_types(args) -> None:
    """Every scalar field holds its declared type (:func:`corefbert.argparser.conform_value`'s rules, which
    every ``--config`` value passed already): for arguments built in code."""
    hints = typing.get_type_hints(type(args))
    for f in dataclasses.fields(args):
        declared = hints.get(f.name)
        kinds = set(typing.get_args(declared)) if isinstance(declared, types.UnionType) else {declared}
        if kinds <= _SCALARS:  # lists and other shapes: the subclass checks them
            setattr(args, f.name, conform_value(f.name, getattr(args, f.name), declared))


def _check_choice(name: str, value: str, allowed, several: bool = False) -> None:
    """``several``: ``value`` may join several of ``allowed`` by commas."""
    for one in value.split(",") if several else [value]:
        if one.strip() not in allowed:
            raise CorefBertError(f"--{name} {value!r} is not one of {', '.join(allowed)}"
                                 f"{' (several joined by commas)' if several else ''}")


def check_output_dir(args: TrainingArguments) -> None:
    """Refuse to start a new run in the folder of an earlier one unless told to resume or overwrite: the old
    run's later checkpoints would rotate the new run's away, and ``latest`` would continue the old run."""
    out = args.output_dir
    if args.resume_from_checkpoint or args.overwrite_output_dir or not os.path.isdir(out) or is_empty_output(out):
        return
    raise CorefBertError("output directory is not empty (an earlier run?); pass --resume_from_checkpoint "
                         "latest to continue it, --overwrite_output_dir to start over (deletes its "
                         "checkpoints and log), or another --output_dir", path=out)


def known_trackers() -> list[str]:
    """``--report_to``'s names: every tracker accelerate knows, then ``all``."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    return [*sorted(LOGGER_TYPE_TO_CLASS), "all"]


def tracking_backends(report_to: str) -> list[str]:
    """The trackers ``--report_to`` names (``all``: every one installed); one line naming the package to
    install, or the login wandb lacks, before any model or data is loaded (accelerate's own filter raises a
    traceback for a missing tracker package and skips an unknown one silently)."""
    import accelerate.tracking
    import accelerate.utils

    def installed(name: str) -> bool:  # asked now: accelerate's own list was made when it was imported
        check = getattr(accelerate.utils, f"is_{name}_available", None)
        return check() if check else name in map(str, accelerate.tracking.get_available_trackers())

    known = known_trackers()[:-1]
    wanted = known if report_to == "all" else [name.strip() for name in report_to.split(",")]
    found = [name for name in wanted if installed(name)]
    missing = [name for name in wanted if name not in found]
    if not found or (missing and report_to != "all"):
        names = missing if report_to != "all" else ["tensorboard"]
        what = "no tracker accelerate knows is installed" if report_to == "all" else \
            f"{' and '.join(missing)} not installed"
        raise CorefBertError(
            f"--with_tracking --report_to {report_to}: {what}; pip install {' '.join(names)}"
            f"{OFFLINE_TRACKER if 'tensorboard' in names else ''}, or drop --with_tracking (log.jsonl is written "
            "either way)")
    if "wandb" in found:
        _check_wandb_login(report_to)
    return found



def _check_wandb_login(report_to: str) -> None:
    """One line when wandb has no login (``WANDB_API_KEY``, a ``~/.netrc`` entry) and is not offline: it would
    stop the run in ``init_trackers`` with a traceback, or wait on a prompt."""
    import netrc
    from urllib.parse import urlparse

    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled",
                                                                                           "dryrun"):
        return
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        if netrc.netrc(os.environ.get("NETRC")).authenticators(host):
            return
    except (OSError, netrc.NetrcParseError):
        pass  # no ~/.netrc, or one that cannot be read: no login there
    raise CorefBertError(f"--with_tracking --report_to {report_to}: wandb has no login here (no WANDB_API_KEY, no "
                         "`wandb login`); run `wandb login`, set WANDB_API_KEY, or log offline with WANDB_MODE=offline "
                         "(then `wandb sync` the run's wandb/ folder), or use --report_to tensorboard")


def start_trackers(accelerator, project: str, config: dict, report_to: str) -> None:
    """``accelerator.init_trackers(project, config)`` before the first step, or one line naming
    ``--report_to`` when a tracker cannot start (a server that does not answer, a refused login)."""
    failure = None
    try:
        accelerator.init_trackers(project, config=config)
    except Exception as err:  # each tracker raises its own kinds; none of them is corefbert's bug
        failure = one_line(err, first_line=True, limit=300)
    if any_process(accelerator, failure is not None):
        raise CorefBertError(f"--with_tracking --report_to {report_to}: a tracker could not start "
                             f"({failure or 'on another process'}); fix its setup, use another --report_to "
                             "(tensorboard logs offline under --output_dir), or drop --with_tracking")


def resolve_num_workers(value: str | int, device_type: str) -> int:
    """``--num_workers`` as a count. ``auto``: 0 on CPU (workers would take cores from the step itself); on an
    accelerator :data:`AUTO_WORKERS` per training process of this machine (``$LOCAL_WORLD_SIZE``), fewer when
    it has fewer cores (one per process stays with the process that drives the device), at least 1."""
    if value != "auto":
        return int(value)
    if device_type == "cpu":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local_processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, min(AUTO_WORKERS, cores // local_processes - 1))


def resolve_mixed_precision(value: str) -> str | None:
    """``auto`` -> None when a launcher chose (accelerate reads its env), bf16 on bf16 GPUs, else no."""
    if value != "auto":
        return value
    if os.environ.get("ACCELERATE_MIXED_PRECISION"):
        return None
    import torch

    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


#: The settings that decide a run's result: a resume under other values would not repeat the uninterrupted
#: run (``--max_steps``, evaluation, logging and checkpoint cadence, workers and tracking may change).
EXACT_SETTINGS = ("seed", "per_device_train_batch_size", "gradient_accumulation_steps", "optim", "learning_rate",
                  "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "lr_scheduler_type", "warmup_ratio",
                  "warmup_steps", "max_grad_norm", "lr_decay_steps", "lr_decay_factor")


def run_settings(args: TrainingArguments, num_processes: int, precision: str, job_settings: dict) -> dict:
    """What a checkpoint records of the run that wrote it: :data:`EXACT_SETTINGS`, the process count and
    precision used (the batch per step and the numerics), and the job's own (corpus, model, task files)."""
    return {**{name: getattr(args, name) for name in EXACT_SETTINGS}, "num_processes": num_processes,
            "mixed_precision": precision, **job_settings}


def changed_settings(saved: dict | None, current: dict) -> list[tuple[str, object, object]]:
    """``(name, checkpoint's value, this run's value)`` for each recorded setting that differs."""
    if not saved:
        return []
    return [(name, saved[name], value) for name, value in current.items()
            if name in saved and saved[name] != value]


class _Absent:
    """A key one side of a compared setting lacks (``repr``: ``absent``)."""

    def __repr__(self) -> str:
        return "absent"


ABSENT = _Absent()


def _leaf_changes(name: str, old, new) -> list[tuple[str, str, object, object]]:
    """``(name, top-level setting, old, new)`` for each value that differs; a dict setting (a task's flags, the
    sizes of its files) is compared key by key, so a message names the key that changed, not both dicts."""
    top = name.split(".")[0].split("[")[0]
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [(name, top, old, new)]
    found = []
    for key in dict.fromkeys([*old, *new]):
        before, after = old.get(key, ABSENT), new.get(key, ABSENT)
        if before != after:
            found += _leaf_changes(f"{name}.{key}" if str(key).isidentifier() else f"{name}[{key!r}]", before, after)
    return found


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def refuse_changed_settings(changed: list, checkpoint, ignore: bool, warn) -> None:
    """One short line naming the first changed setting (the key within a dict setting) and both values, unless
    ``--ignore_changed_settings`` (then ``warn`` gets one line per changed value)."""
    leaves = [leaf for name, old, new in changed for leaf in _leaf_changes(name, old, new)]
    if not leaves:
        return
    if ignore:
        for name, _, old, new in leaves:
            warn(f"warning: {name} changed since the checkpoint ({_short(old)} -> {_short(new)}); resuming anyway "
                 "(--ignore_changed_settings): the run will not repeat the uninterrupted one")
        return
    name, _, old, new = leaves[0]
    # Keys that are not names (file paths in ``file_sizes``) are listed by their setting only.
    others = dict.fromkeys(top if "[" in leaf else leaf for leaf, top, _, _ in leaves[1:])
    more = f" (also changed: {', '.join(others)})" if others else ""
    raise CorefBertError(
        f"cannot resume: {name} was {_short(old)} in this checkpoint but is {_short(new)} now{more}; a resumed run "
        "would not repeat the run it continues. Use the checkpoint's value, or pass --ignore_changed_settings to "
        "resume anyway", path=checkpoint)
