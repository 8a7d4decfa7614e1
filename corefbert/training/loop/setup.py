"""Before the loop: the run's Accelerator (precision, accumulation, the seedable sampler, trackers, compilation),
its output folder (taken with the run lock, an earlier run's files cleared on ``--overwrite_output_dir``), the checks
that must fail before any model or data is loaded, and the run's length in optimizer steps."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from corefbert.errors import CorefBertError
from corefbert.text.durable import check_writable
from corefbert.training.checkpoints.folders import (
    checkpoints_root,
    list_checkpoints,
    remove_folder,
    resolve_checkpoint,
)
from corefbert.training.checkpoints.signals import any_process
from corefbert.training.outputs import lock as run_lock
from corefbert.training.outputs.runlog import log_path
from corefbert.training.training_args import (
    TrainingArguments,
    check_output_dir,
    resolve_mixed_precision,
    tracking_backends,
)


def build_accelerator(args: TrainingArguments):
    """The run's Accelerator: seedable sampler, accumulation across epoch ends, the launcher's precision under
    ``--mixed_precision auto``, trackers when asked. Resets accelerate's process-wide singletons first, so a
    second run in one process (tests, notebooks) may use another precision."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, TorchDynamoPlugin

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    # --torch_compile_scope model: compiled at prepare(), with dynamic shapes (loop/compiling.py says why;
    # the default scope, the repeated layers, is compiled by train()).
    compile_plugin = (TorchDynamoPlugin(backend=args.torch_compile_backend, dynamic=True, mode=args.torch_compile_mode)
                      if args.torch_compile and args.torch_compile_scope == "model" else None)
    return Accelerator(
        dynamo_plugin=compile_plugin,
        mixed_precision=resolve_mixed_precision(args.mixed_precision),
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False),
        # non_blocking: host-to-GPU copies of pinned batches overlap the step (see the loaders' pin_memory).
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed,
                                                  non_blocking=torch.cuda.is_available()),
        # We step the scheduler once per optimizer step ourselves; the default would step it once per
        # process per step, ending warm-up N times too early on N processes.
        step_scheduler_with_optimizer=False,
        log_with=tracking_backends(args.report_to) if args.with_tracking else None,
        project_dir=args.output_dir,
    )


def prepare_output_dir(args: TrainingArguments, accelerator) -> Path:
    """Create ``output_dir``; on ``--overwrite_output_dir`` (no resume) delete the earlier run's checkpoints
    and log, which would otherwise be rotated into this run and found by ``latest``."""
    output_dir = Path(args.output_dir)
    refused = None
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        try:  # held until run_lock.release(output_dir) or this process ends
            run_lock.acquire(output_dir)
        except CorefBertError as err:
            refused = err
    if any_process(accelerator, refused is not None):
        raise refused or CorefBertError("another run is using this --output_dir", path=output_dir)
    if accelerator.is_main_process and args.overwrite_output_dir and (
            not args.resume_from_checkpoint
            or (args.resume_from_checkpoint == "latest" and not list_checkpoints(output_dir))):
        remove_folder(checkpoints_root(output_dir))
        log_path(output_dir).unlink(missing_ok=True)
    accelerator.wait_for_everyone()
    return output_dir


def check_training_start(args: TrainingArguments) -> None:
    """Everything about the output folder that must fail before any model or data is loaded."""
    resolve_checkpoint(args.resume_from_checkpoint, args.output_dir, args.overwrite_output_dir)  # bad path first
    if int(os.environ.get("RANK", "0")) != 0:
        # The folder is rank 0's to check: another rank's checks would meet rank 0's lock and first files.
        return
    run_lock.refuse_if_locked(args.output_dir)
    check_output_dir(args)
    check_writable(args.output_dir)


def total_training_steps(args: TrainingArguments, batches_per_epoch: int) -> int:
    """``--max_steps`` when given, else enough optimizer steps for ``--num_train_epochs`` of the data."""
    if args.max_steps > 0:
        return args.max_steps
    return max(1, math.ceil(args.num_train_epochs * batches_per_epoch / args.gradient_accumulation_steps))
