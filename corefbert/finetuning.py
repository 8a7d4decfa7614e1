"""The one fine-tuning loop shared by every ``finetune/run_*.py`` (docs/contracts.md, "Shared fine-tuning loop").

A benchmark plugs in through a :class:`FinetuningTask` (datasets, collation, model, evaluation, submission
files); :func:`run_finetuning` does everything else with Accelerate: AdamW without decay on biases and
LayerNorm weights, linear warm-up + decay stepped once per optimizer update (so it ends where it should on
N processes), gradient accumulation, clipping, mixed precision, evaluation every ``eval_steps`` keeping the
best model in ``output_dir/best``, resumable checkpoints, ``log.jsonl`` and ``all_results.json``.

Resuming replays exactly what an uninterrupted run does: the seedable sampler with ``set_epoch`` gives the
same order in every epoch, ``skip_first_batches`` drops what the checkpoint already consumed, and the RNG
state is put back after the resumed data iterator is created (creating it draws a seed from the global
generator, which the uninterrupted run drew before the checkpoint).
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DataLoaderConfiguration, set_seed
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from corefbert.checkpointing import StopSignal, any_process, check_writable, load_checkpoint, truncate_log
from corefbert.errors import CorefBertError
from corefbert.finetuning_io import (
    Evaluator,
    JsonlLogger,
    find_checkpoint,
    list_checkpoints,
    load_weights,
    save_checkpoint,
    save_model,
    write_json,
)
from corefbert.pretraining_args import resolve_mixed_precision

__all__ = ["FinetuningArguments", "FinetuningTask", "build_accelerator", "optimizer_parameter_groups", "run_finetuning",
           "save_model"]


@dataclass
class FinetuningArguments:
    """Training/evaluation settings, named as in the Hugging Face examples."""

    model_name_or_path: str = field(metadata={"help": "Checkpoint directory (a corefbert pretraining one works)."})
    output_dir: str = field(metadata={"help": "Where metrics, predictions, checkpoints and the best model go."})
    do_train: bool = field(default=False, metadata={"help": "Fine-tune on the training split."})
    do_eval: bool = field(default=False, metadata={"help": "Evaluate on the dev split."})
    do_predict: bool = field(default=False, metadata={"help": "Write predictions for the test split."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Batch size per process."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Evaluation batch size per process."})
    learning_rate: float = field(default=3e-5, metadata={"help": "Peak learning rate of AdamW."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (never on biases/LayerNorm)."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Epochs (fractions allowed)."})
    max_steps: int = field(default=-1, metadata={"help": "Optimizer updates; overrides num_train_epochs if > 0."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Batches per optimizer update."})
    warmup_ratio: float = field(default=0.1, metadata={"help": "Share of updates with linear warm-up."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0: no clipping)."})
    seed: int = field(default=42, metadata={"help": "Seed of initialization, dropout and data order."})
    mixed_precision: str = field(
        default="auto", metadata={"help": "auto (a launcher's setting, e.g. accelerate launch --config_file; else "
                                          "bf16 where the GPU supports it, else no) | no | bf16 | fp16."}
    )
    eval_steps: int | None = field(default=None, metadata={"help": "Evaluate every N updates (default: each epoch)."})
    checkpointing_steps: str | None = field(
        default=None, metadata={"help": "Save a resumable checkpoint every N updates, or 'epoch'."}
    )
    save_total_limit: int = field(default=2, metadata={"help": "Keep the last K checkpoints (best is kept apart)."})
    resume_from_checkpoint: str | None = field(
        default=None, metadata={"help": "A checkpoint directory, or 'latest' in output_dir."}
    )
    logging_steps: int = field(default=10, metadata={"help": "Log loss and LR every N updates."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set (debugging)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the eval set (debugging)."})
    num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Allow training into a non-empty dir."})
    load_best_model_at_end: bool = field(
        default=True, metadata={"help": "Evaluate/predict after training with the best model, not the last."}
    )
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bars."})


class FinetuningTask:
    """One benchmark. Subclasses (in ``corefbert/tasks/``) set ``name``/``main_metric`` and fill the methods."""

    name: str = "task"
    main_metric: str = "loss"
    greater_is_better: bool = True
    tokenizer: Any = None

    def build_model(self) -> torch.nn.Module:
        """The model; ``forward(**batch)`` returns an object with ``.loss`` when the batch has labels."""
        raise NotImplementedError

    def train_dataset(self) -> Dataset | None:
        return None

    def eval_dataset(self) -> Dataset | None:
        return None

    def predict_dataset(self) -> Dataset | None:
        return None

    def collate(self, features: list) -> dict[str, torch.Tensor]:
        """Features -> batch of tensors (padding here)."""
        raise NotImplementedError

    def evaluate(self, model, dataloader, accelerator: Accelerator, split: str) -> tuple[dict[str, float], Any]:
        """Run ``model`` (already in eval mode, under ``no_grad``) over ``dataloader``; gather with
        ``accelerator.gather_for_metrics``. Returns ``(metrics without split prefix, predictions)``;
        ``split`` is "eval" or "predict" (where labels may be absent and metrics may be ``{}``)."""
        raise NotImplementedError

    def num_examples(self, dataset: Dataset) -> int:
        """How many examples of the input file(s) ``dataset`` covers (``eval_samples``/``predict_samples``);
        a task whose features are not one per example (QA windows) counts the examples behind them."""
        return len(dataset)

    def write_predictions(self, predictions, output_dir: str, split: str) -> list[str]:
        """Write ``predictions`` in the benchmark's submission format; return the paths written."""
        return []

    def save_pretrained(self, model, output_dir: str, state_dict: dict | None = None) -> None:
        """Save the unwrapped ``model`` (and the tokenizer) so ``from_pretrained(output_dir)`` loads it."""
        model.save_pretrained(output_dir, state_dict=state_dict)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(output_dir)

    def load_weights(self, model, directory: str) -> None:
        """Load what :meth:`save_pretrained` wrote back into ``model`` in place (the best model at the end)."""
        load_weights(model, directory)


def optimizer_parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on weights, none on biases and normalization weights (BERT's recipe)."""
    no_decay: set[str] = set()
    for module_name, module in model.named_modules():
        is_norm = isinstance(module, torch.nn.LayerNorm | torch.nn.GroupNorm) or "norm" in type(module).__name__.lower()
        for param_name, _ in module.named_parameters(recurse=False):
            if is_norm or param_name == "bias":
                no_decay.add(f"{module_name}.{param_name}" if module_name else param_name)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and n not in no_decay]
    plain = [p for n, p in model.named_parameters() if p.requires_grad and n in no_decay]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def _check_args(args: FinetuningArguments) -> None:
    if args.mixed_precision not in ("auto", "no", "bf16", "fp16"):
        raise CorefBertError(f"--mixed_precision {args.mixed_precision!r} is not one of auto, no, bf16, fp16")
    if args.gradient_accumulation_steps < 1 or args.per_device_train_batch_size < 1:
        raise CorefBertError("--gradient_accumulation_steps and --per_device_train_batch_size must be >= 1")
    steps = args.checkpointing_steps
    if steps is not None and steps != "epoch" and not (str(steps).isdigit() and int(steps) > 0):
        raise CorefBertError(f"--checkpointing_steps {steps!r} must be a positive integer or 'epoch'")
    if not (args.do_train or args.do_eval or args.do_predict):
        raise CorefBertError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict")
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        raise CorefBertError("--output_dir is a file, not a directory; pass a directory path", path=args.output_dir)
    if (
        args.do_train and not args.overwrite_output_dir and not args.resume_from_checkpoint
        and os.path.isdir(args.output_dir) and os.listdir(args.output_dir)
    ):
        raise CorefBertError(
            "output directory is not empty; pass --overwrite_output_dir or --resume_from_checkpoint latest",
            path=args.output_dir,
        )


def _subset(dataset: Dataset | None, limit: int | None) -> Dataset | None:
    if dataset is None or limit is None or limit >= len(dataset):
        return dataset
    return torch.utils.data.Subset(dataset, range(limit))


def check_data_flags(args: FinetuningArguments, train_file, validation_file, test_file, can_split: bool,
                     kind: str = "") -> None:
    """Fail before any model loads when a ``--do_*`` flag has no data. ``can_split``: ``--split_seed``
    may hold out part of ``--train_file`` for evaluation. ``kind`` names the expected format."""
    hint = f" ({kind})" if kind else ""
    if args.do_train and not train_file:
        raise CorefBertError(f"--do_train needs --train_file{hint}")
    if args.do_predict and not test_file:
        raise CorefBertError(f"--do_predict needs --test_file{hint}")
    if args.do_eval and not (validation_file or can_split):
        raise CorefBertError("--do_eval needs --validation_file, or --split_seed to hold out part of --train_file")


def report_results(results: dict[str, float]) -> dict[str, float]:
    """Print ``results`` as JSON once (main process only: every rank of a DDP run holds the same dict)."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(results, indent=2, sort_keys=True))
    return results


def build_accelerator(args: FinetuningArguments) -> Accelerator:
    """The run's Accelerator. ``--mixed_precision auto`` leaves the choice to the launcher (``accelerate
    launch`` exports ACCELERATE_MIXED_PRECISION from its config) and else picks as pretraining does; an
    explicit value wins over the launcher."""
    # Accelerate keeps its state in process-wide singletons; a second run in one process (tests, notebooks)
    # with another mixed precision would be refused, and a crashed run leaves stale dataloader state.
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    return Accelerator(
        mixed_precision=resolve_mixed_precision(args.mixed_precision),
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
    )


def run_finetuning(task: FinetuningTask, args: FinetuningArguments) -> dict[str, float]:
    """Train / evaluate / predict ``task`` as ``args`` say; returns what ``all_results.json`` holds."""
    _check_args(args)
    check_writable(args.output_dir)
    accelerator = build_accelerator(args)
    set_seed(args.seed)
    if accelerator.is_main_process:
        os.makedirs(args.output_dir, exist_ok=True)
    accelerator.wait_for_everyone()
    logger = JsonlLogger(os.path.join(args.output_dir, "log.jsonl"), enabled=accelerator.is_main_process)
    show_bars = accelerator.is_local_main_process and not args.disable_tqdm

    with accelerator.main_process_first():
        train_set = _subset(task.train_dataset(), args.max_train_samples) if args.do_train else None
        eval_set = _subset(task.eval_dataset(), args.max_eval_samples) if (args.do_eval or args.do_train) else None
        predict_set = task.predict_dataset() if args.do_predict else None
    for wanted, dataset, what in ((args.do_train, train_set, "training"), (args.do_eval, eval_set, "evaluation"),
                                  (args.do_predict, predict_set, "test")):
        if wanted and (dataset is None or len(dataset) == 0):
            raise CorefBertError(f"task {task.name} has no {what} data; give its file or drop the --do_ flag")

    model = task.build_model()

    def loader(dataset, batch_size, shuffle):
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=task.collate,
                          num_workers=args.num_workers)

    eval_loader = loader(eval_set, args.per_device_eval_batch_size, False) if eval_set is not None else None
    predict_loader = loader(predict_set, args.per_device_eval_batch_size, False) if predict_set is not None else None
    evaluator = Evaluator(task, args, accelerator, logger)
    results: dict[str, float] = {}
    reloaded_best = False

    if args.do_train:
        train_loader = loader(train_set, args.per_device_train_batch_size, True)
        optimizer = torch.optim.AdamW(optimizer_parameter_groups(model, args.weight_decay), lr=args.learning_rate)
        model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
        # len() after prepare: per-process batches, so the schedule is right on N processes.
        updates_per_epoch = math.ceil(len(train_loader) / args.gradient_accumulation_steps)
        if args.max_steps > 0:
            total_updates = args.max_steps
        else:
            total_updates = math.ceil(args.num_train_epochs * updates_per_epoch)
        num_epochs = math.ceil(total_updates / updates_per_epoch)
        # Not prepared: a prepared scheduler steps once per process per update unless configured.
        scheduler = get_linear_schedule_with_warmup(
            optimizer, math.ceil(args.warmup_ratio * total_updates), total_updates
        )
        accelerator.register_for_checkpointing(scheduler)
        results.update(_train(task, args, accelerator, model, optimizer, scheduler, train_loader, eval_loader,
                              evaluator, logger, updates_per_epoch, total_updates, num_epochs, show_bars))
        save_model(task, model, accelerator, os.path.join(args.output_dir, "last"))
        reloaded_best = args.load_best_model_at_end and evaluator.best_step is not None
        if reloaded_best:
            task.load_weights(accelerator.unwrap_model(model), evaluator.best_dir)
            accelerator.print(f"loaded the best model (step {evaluator.best_step}) from {evaluator.best_dir}")
    else:
        model = accelerator.prepare(model)

    if args.do_eval:
        if reloaded_best and evaluator.best_evaluation is not None:
            metrics, predictions = evaluator.best_evaluation  # the same weights: no second pass over dev
        else:
            metrics, predictions = evaluator.run(model, accelerator.prepare(eval_loader), "eval")
        results.update(metrics, eval_samples=task.num_examples(eval_set))
        logger.log({"split": "eval", **metrics})
        if accelerator.is_main_process:
            task.write_predictions(predictions, args.output_dir, "eval")
    if args.do_predict:
        predict_loader = accelerator.prepare(predict_loader)
        metrics, predictions = evaluator.run(model, predict_loader, "predict")
        results.update(metrics, predict_samples=task.num_examples(predict_set))
        if accelerator.is_main_process:
            paths = task.write_predictions(predictions, args.output_dir, "predict")
            accelerator.print("predictions: " + ", ".join(paths))
    if evaluator.best_step is not None:
        results[f"best_eval_{task.main_metric}"] = evaluator.best_metric
        results["best_step"] = evaluator.best_step
    if accelerator.is_main_process:
        write_json(os.path.join(args.output_dir, "all_results.json"), results)
        write_json(os.path.join(args.output_dir, "finetuning_args.json"), asdict(args))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


def _train(task, args, accelerator, model, optimizer, scheduler, train_loader, eval_loader, evaluator, logger,
           updates_per_epoch, total_updates, num_epochs, show_bars) -> dict[str, float]:
    """The update loop; returns train metrics. Checkpoints hold the state to continue it exactly."""
    if eval_loader is not None:
        eval_loader = accelerator.prepare(eval_loader)
    state = {"completed_steps": 0, "epoch": 0, "updates_in_epoch": 0, "loss_sum": 0.0, "loss_batches": 0,
             "interval_loss": 0.0, "interval_batches": 0, "best_metric": None, "best_step": None,
             "overflow_updates": 0}
    resume_dir = find_checkpoint(args.output_dir, args.resume_from_checkpoint)
    rng_after_load = None
    if resume_dir is not None:
        earlier = [path for _, path in reversed(list_checkpoints(args.output_dir)) if path != resume_dir]
        resume_dir, saved = load_checkpoint(
            accelerator, resume_dir, earlier if args.resume_from_checkpoint == "latest" else ()
        )
        resume_dir = str(resume_dir)
        state.update(saved)
        evaluator.best_metric, evaluator.best_step = state["best_metric"], state["best_step"]
        if state["updates_in_epoch"]:
            rng_after_load = torch.get_rng_state()
        accelerator.print(f"resumed from {resume_dir} at update {state['completed_steps']}")
        if accelerator.is_main_process:
            truncate_log(Path(logger.path), state["completed_steps"])
        logger.log({"resumed_from": resume_dir, "step": state["completed_steps"]})

    every = args.checkpointing_steps
    eval_every = args.eval_steps
    interval_loss = torch.full((), state["interval_loss"], device=accelerator.device)
    interval_batches = state["interval_batches"]
    start_time = time.time()
    model.train()
    step = state["completed_steps"]

    def position(epoch: int, epoch_done: bool) -> dict:
        """The loop state a checkpoint needs to continue exactly after the current update."""
        state.update(completed_steps=step, epoch=epoch + 1 if epoch_done else epoch,
                     updates_in_epoch=0 if epoch_done else updates_in_epoch,
                     interval_loss=interval_loss.item(), interval_batches=interval_batches,
                     best_metric=evaluator.best_metric, best_step=evaluator.best_step)
        return state

    # The bar closes on any exit, so an error line starts on a line of its own.
    with tqdm(total=total_updates, initial=state["completed_steps"], desc=f"train {task.name}",
              disable=not show_bars) as bar, StopSignal() as stop:
        for epoch in range(state["epoch"], num_epochs):
            if step >= total_updates:
                break
            train_loader.set_epoch(epoch)
            if hasattr(train_loader.dataset, "set_epoch"):  # accelerate skips the dataset on N processes
                train_loader.dataset.set_epoch(epoch)
            skip = state["updates_in_epoch"] * args.gradient_accumulation_steps if epoch == state["epoch"] else 0
            epoch_loader = accelerator.skip_first_batches(train_loader, skip) if skip else train_loader
            updates_in_epoch = state["updates_in_epoch"] if epoch == state["epoch"] else 0
            for batch in epoch_loader:
                if rng_after_load is not None:
                    torch.set_rng_state(rng_after_load)  # undo the seed draw of the new iterator (module doc)
                    rng_after_load = None
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    interval_loss += loss.detach().float()
                    interval_batches += 1
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and args.max_grad_norm > 0:
                        accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad()
                if not accelerator.sync_gradients:
                    continue
                if accelerator.optimizer_step_was_skipped:  # fp16 overflow: update skipped, loss scale halved
                    state["overflow_updates"] += 1
                else:
                    scheduler.step()
                step += 1
                updates_in_epoch += 1
                bar.update(1)
                if step % args.logging_steps == 0 or step == total_updates:
                    mean_loss = accelerator.reduce(interval_loss, "mean").item() / max(interval_batches, 1)
                    state["loss_sum"] += mean_loss * interval_batches
                    state["loss_batches"] += interval_batches
                    logger.log({"step": step, "epoch": round(epoch + updates_in_epoch / updates_per_epoch, 4),
                                "loss": mean_loss, "learning_rate": scheduler.get_last_lr()[0]})
                    bar.set_postfix(loss=f"{mean_loss:.4f}")
                    interval_loss.zero_()
                    interval_batches = 0
                epoch_done = updates_in_epoch == updates_per_epoch
                if eval_loader is not None and ((eval_every and step % eval_every == 0) or
                                                (not eval_every and epoch_done) or step == total_updates):
                    evaluator.evaluate_and_keep_best(model, eval_loader, step, epoch + updates_in_epoch / updates_per_epoch)
                periodic = (every == "epoch" and epoch_done) or (every not in (None, "epoch") and step % int(every) == 0)
                stopping = any_process(accelerator, stop.received is not None)
                if periodic or stopping:
                    save_checkpoint(accelerator, args, position(epoch, epoch_done))
                if stopping:
                    name = signal.Signals(stop.received or signal.SIGTERM).name
                    where = os.path.join(args.output_dir, f"checkpoint-{step}")
                    accelerator.print(f"\n{name}: saved {where}; continue with --resume_from_checkpoint latest")
                    logger.log({"signal": name, "step": step, "checkpoint": where})
                    bar.close()
                    raise SystemExit(128 + (stop.received or signal.SIGTERM))
                if step >= total_updates:
                    break
            state["updates_in_epoch"] = 0
    bar.close()
    if interval_batches:
        state["loss_sum"] += accelerator.reduce(interval_loss, "mean").item()
        state["loss_batches"] += interval_batches
    results = {"train_loss": state["loss_sum"] / max(state["loss_batches"], 1),
               "train_steps": step, "train_runtime": round(time.time() - start_time, 2)}
    if accelerator.scaler is not None:
        results["train_fp16_skipped_updates"] = state["overflow_updates"]
        results["train_fp16_loss_scale"] = accelerator.scaler.get_scale()
    return results
