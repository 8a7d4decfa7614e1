"""Fine-tuning: the benchmark protocol every ``corefbert finetune <task>`` shares, on the one training loop.

A benchmark is a :class:`FinetuningTask` (its flags a dataclass, ``args_class``, with the paper's defaults;
the paper's training settings in ``training_defaults``); :func:`main`, run by its entry in
:mod:`corefbert.tasks.registry`, is the whole CLI of any task. :func:`run_finetuning` wires the task's
datasets, collation, model, evaluation and submission files to :func:`corefbert.training.loop.core.train`
(optimizer, schedule, mixed precision, exact resume, signals, tracking) and adds evaluation every
``--eval_steps`` (default: every epoch) keeping the best model in ``output_dir/best``, ``last/``,
``--do_eval``/``--do_predict`` and ``all_results.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, Dataset

from corefbert.argparser import parse_args
from corefbert.errors import CorefBertError, cli_entry
from corefbert.tasks.heads import load_weights
from corefbert.text.durable import check_writable, write_failure
from corefbert.text.jsonio import json_value
from corefbert.training.checkpoints.folders import resolve_checkpoint
from corefbert.training.hub import public_settings, push_finetuned
from corefbert.training.loop.core import train
from corefbert.training.loop.job import TrainingJob
from corefbert.training.loop.optimization import build_optimizer, build_scheduler
from corefbert.training.loop.setup import (
    build_accelerator,
    check_training_start,
    prepare_output_dir,
    total_training_steps,
)
from corefbert.training.model_folders import check_model_folder
from corefbert.training.outputs import lock as run_lock
from corefbert.training.outputs.evaluation import Evaluator, save_model, write_json
from corefbert.training.outputs.runlog import RunLog
from corefbert.training.training_args import TrainingArguments, resolve_num_workers

__all__ = ["FinetuningArguments", "FinetuningTask", "HeldOutArguments", "held_out_split", "main",
           "parse_task_arguments", "run_finetuning"]

Item = TypeVar("Item")


@dataclass(kw_only=True)
class FinetuningArguments(TrainingArguments):
    """:class:`TrainingArguments` with fine-tuning's defaults (BERT's recipe) and the ``--do_*`` protocol."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Checkpoint directory (a corefbert pretraining one works); tasks whose "
                                        "models train from scratch (recurrent readers) need none."})
    output_dir: str = field(metadata={"help": "Where metrics, predictions, checkpoints and the best model go."})
    do_train: bool = field(default=False, metadata={"help": "Fine-tune on the training split."})
    do_eval: bool = field(default=False, metadata={"help": "Evaluate on the dev split."})
    do_predict: bool = field(default=False, metadata={"help": "Write predictions for the test split."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Batch size per process."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Evaluation batch size per process."})
    learning_rate: float = field(default=3e-5, metadata={"help": "Peak learning rate of the optimizer (--optim)."})
    warmup_ratio: float = field(default=0.1, metadata={"help": "Share of the optimizer steps for warm-up."})
    eval_steps: int | None = field(default=None, metadata={"help": "Evaluate every N steps (default: each epoch)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set (debugging)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the eval set (debugging)."})
    load_best_model_at_end: bool = field(
        default=True, metadata={"help": "Evaluate/predict after training with the best model, not the last."})

    def validate(self) -> None:
        super().validate()
        if not (self.do_train or self.do_eval or self.do_predict):
            raise CorefBertError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict")


@dataclass(kw_only=True)
class HeldOutArguments:
    """The held-out-split convention of every task that can evaluate on part of its training file (QA, DocRED,
    FEVER), named as in corpus preparation. Task arguments that support it extend this class."""

    validation_split_percentage: int = field(
        default=0, metadata={"help": "Without --validation_file: hold out this percentage of --train_file for "
                                     "evaluation (0: none)."})
    split_seed: int = field(
        default=42, metadata={"help": "Seed of the held-out split (apart from --seed: runs with other seeds "
                                      "evaluate on the same examples)."})

    def __post_init__(self):
        if not 0 <= self.validation_split_percentage < 100:
            raise CorefBertError(f"--validation_split_percentage must be in [0, 100), not "
                                 f"{self.validation_split_percentage}")


def held_out_split(items: Sequence[Item], percentage: int, seed: int,
                   group: Callable[[Item], Hashable] | None = None) -> tuple[list[Item], list[Item]]:
    """``(kept, held_out)``: ``percentage`` % of ``items`` (at least one) held out, drawn with ``seed``.
    ``group`` keeps items with the same key on one side (QA: questions on one passage), and the share is of
    the groups. Both parts keep the input order; the same items, percentage and seed give the same split."""
    keys = [group(item) if group is not None else i for i, item in enumerate(items)]
    order = sorted(set(keys), key=keys.index)  # first-seen order: independent of hashing
    random.Random(seed).shuffle(order)
    held = set(order[:max(1, round(len(order) * percentage / 100))])
    return ([item for item, key in zip(items, keys) if key not in held],
            [item for item, key in zip(items, keys) if key in held])


class FinetuningTask:
    """One benchmark. Subclasses (in ``corefbert/tasks/``) set ``name``/``main_metric``/``args_class``/
    ``training_defaults``, take ``(task_args, training_args)`` and fill the methods."""

    name: str = "task"
    main_metric: str = "loss"
    greater_is_better: bool = True
    tokenizer: Any = None
    #: The dataclass of the task's own flags; its defaults are the paper's settings (else the guide's source).
    args_class: type | None = None
    #: :class:`FinetuningArguments` values the task sets differently (learning rate, epochs, batch size).
    training_defaults: dict[str, Any] = {}
    #: Whether the model starts from ``--model_name_or_path`` (False: a model trained from scratch).
    uses_model_folder: bool = True

    def __init__(self, task_args, training_args: FinetuningArguments):
        family = next(c for c in type(self).__mro__ if "variant_for" in vars(c))
        if family is type(self) and family is not FinetuningTask:
            raise TypeError(f"{family.__name__} is a family of variants; build the class "
                            f"{family.__name__}.variant_for(argv) picks")
        self.task_args, self.args = task_args, training_args

    @classmethod
    def run(cls, task_args, training_args: FinetuningArguments) -> dict[str, float]:
        """What the CLI runs: one :func:`run_finetuning` of this task (bAbI's runs tasks x seeds)."""
        return run_finetuning(cls(task_args, training_args), training_args)

    @classmethod
    def variant_for(cls, argv: list[str]) -> type[FinetuningTask]:
        """The task class that runs command line ``argv``: a family whose variants change the recipe (FEVER's
        concat/KGAT, ...) returns the variant the arguments name (:func:`corefbert.argparser.peek_argument`),
        whose ``training_defaults`` then apply; the family class itself is never built."""
        return cls

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

    def token_masks(self, batch: dict) -> list[torch.Tensor]:
        """The ``[batch, length]`` masks of real tokens the training log counts (``attention_mask``)."""
        return [batch["attention_mask"]] if "attention_mask" in batch else []

    def memory_advice(self, split: str) -> str:
        """What to lower when ``split`` ("train", "eval", "predict") runs out of memory (one line)."""
        if split == "train":
            return ("lower --per_device_train_batch_size (--gradient_accumulation_steps keeps the batch an update "
                    "sees)")
        return "lower --per_device_eval_batch_size"

    def learning_rates(self, model) -> dict[str, float] | None:
        """``{parameter-name prefix: learning rate}`` for parameters not trained at ``--learning_rate``
        (:func:`corefbert.training.loop.optimization.parameter_groups`); None: every one is."""
        return None

    def load_weights(self, model, directory: str) -> None:
        """Load what :meth:`save_pretrained` wrote back into ``model`` in place (the best model at the end)."""
        load_weights(model, directory)


def _subset(dataset: Dataset | None, limit: int | None) -> Dataset | None:
    if dataset is None or limit is None or limit >= len(dataset):
        return dataset
    return torch.utils.data.Subset(dataset, range(limit))


def check_data_flags(args: FinetuningArguments, task_args, kind: str = "") -> None:
    """Fail before any model loads when a ``--do_*`` flag of ``task_args`` (its ``*_file`` fields and, from
    :class:`HeldOutArguments`, a held-out split) has no data; ``kind`` names the expected format."""
    hint = f" ({kind})" if kind else ""
    if args.do_train and not task_args.train_file:
        raise CorefBertError(f"--do_train needs --train_file{hint}")
    if args.do_predict and not task_args.test_file:
        raise CorefBertError(f"--do_predict needs --test_file{hint}")
    can_split = getattr(task_args, "validation_split_percentage", 0) > 0 and task_args.train_file
    if args.do_eval and not (task_args.validation_file or can_split):
        raise CorefBertError("--do_eval needs --validation_file, or --train_file with --validation_split_percentage "
                             "to hold out part of it")


class FinetuningJob(TrainingJob):
    """A task's loss is its model's ``.loss``; evaluation keeps ``output_dir/best`` (:class:`Evaluator`);
    the end of training saves ``output_dir/last``."""

    evaluate_each_epoch = True

    def __init__(self, task: FinetuningTask, args: FinetuningArguments, evaluator: Evaluator, eval_loader):
        self.task, self.args, self.evaluator, self.eval_loader = task, args, evaluator, eval_loader

    def on_train_end(self, model, step: int) -> None:
        save_model(self.task, model, self.evaluator.accelerator, os.path.join(self.args.output_dir, "last"))

    def token_masks(self, batch: dict) -> list[torch.Tensor]:
        return self.task.token_masks(batch)

    def memory_advice(self) -> str:
        return self.task.memory_advice("train")

    def settings(self) -> dict:
        """What decides the result beyond the training flags: the model, the task's flags and the size of each
        input file it names (a resume on other files is refused)."""
        task_args = getattr(self.task, "task_args", None)
        task_args = asdict(task_args) if task_args is not None else {}
        paths = [v for value in task_args.values() for v in (value if isinstance(value, list) else [value])
                 if isinstance(v, str) and os.path.isfile(v)]
        return {"model_name_or_path": self.args.model_name_or_path, "task": self.task.name,
                "task_args": json_value(task_args), "max_train_samples": self.args.max_train_samples,
                "file_sizes": {path: os.path.getsize(path) for path in paths}}

    def evaluate(self, model, step: int, epoch: float) -> None:
        if self.eval_loader is not None:
            self.evaluator.evaluate_and_keep_best(model, self.eval_loader, step, epoch)

    def state_dict(self) -> dict:
        return {"best_metric": self.evaluator.best_metric, "best_step": self.evaluator.best_step}

    def load_state_dict(self, state: dict) -> None:
        self.evaluator.best_metric, self.evaluator.best_step = state.get("best_metric"), state.get("best_step")


def run_finetuning(task: FinetuningTask, args: FinetuningArguments) -> dict[str, float]:
    """Train / evaluate / predict ``task`` as ``args`` say; returns what ``all_results.json`` holds."""
    args.validate()
    if task.uses_model_folder and not args.model_name_or_path:
        raise CorefBertError(f"task {task.name} starts from a checkpoint: pass --model_name_or_path")
    # Before any weight is read: pickle-only weights, and a --max_seq_length beyond the model's positions.
    check_model_folder(args.model_name_or_path,
                       getattr(getattr(task, "task_args", None), "max_seq_length", None))
    if args.do_train:
        check_training_start(args)
    else:
        resolve_checkpoint(args.resume_from_checkpoint, args.output_dir)
        check_writable(args.output_dir)
    accelerator = build_accelerator(args)
    set_seed(args.seed)
    prepare_output_dir(args, accelerator)  # takes the folder's lock: released when the run ends, however it ends
    try:
        return _run(task, args, accelerator)
    finally:
        run_lock.release(args.output_dir)


@contextlib.contextmanager
def results_written(output_dir: str) -> Iterator[None]:
    """A failed write of a run's result files (predictions, ``all_results.json``) into ``output_dir`` (disk full,
    read-only, no permission) as one line; any other exception passes unchanged."""
    try:
        yield
    except Exception as err:
        reason = write_failure(err, Path(output_dir))
        if reason is None:
            raise
        raise CorefBertError(f"could not write the run's results ({reason}); checkpoints and model folders written "
                             "before are intact. Free space or choose another --output_dir, then rerun the evaluation",
                             path=output_dir) from None


def _run(task: FinetuningTask, args: FinetuningArguments, accelerator) -> dict[str, float]:
    logger = RunLog(args.output_dir, accelerator)  # a failed append stops the run in one line, as in the loop
    train_set, eval_set, predict_set = _datasets(task, args, accelerator)
    model = task.build_model()

    def loader(dataset, batch_size, shuffle):
        if dataset is None:
            return None
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=task.collate,
                          num_workers=resolve_num_workers(args.num_workers, accelerator.device.type))

    eval_loader = loader(eval_set, args.per_device_eval_batch_size, False)
    evaluator = Evaluator(task, args, accelerator, logger)
    results: dict[str, float] = {}
    reloaded_best = False
    if args.do_train:
        model, train_results = _train(task, args, accelerator, model, loader(train_set, args.per_device_train_batch_size,
                                                                             True), eval_loader, evaluator)
        results.update(train_results)  # last/ was saved at the end of training (FinetuningJob.on_train_end)
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
            with results_written(args.output_dir):
                task.write_predictions(predictions, args.output_dir, "eval")
    if args.do_predict:
        predict_loader = accelerator.prepare(loader(predict_set, args.per_device_eval_batch_size, False))
        metrics, predictions = evaluator.run(model, predict_loader, "predict")
        results.update(metrics, predict_samples=task.num_examples(predict_set))
        if accelerator.is_main_process:
            with results_written(args.output_dir):
                paths = task.write_predictions(predictions, args.output_dir, "predict")
            accelerator.print("predictions: " + ", ".join(paths))
    if evaluator.best_step is not None:
        results[f"best_eval_{task.main_metric}"] = evaluator.best_metric
        results["best_step"] = evaluator.best_step
    if accelerator.is_main_process:
        with results_written(args.output_dir):
            write_json(os.path.join(args.output_dir, "all_results.json"), results)
            write_json(os.path.join(args.output_dir, "finetuning_args.json"), public_settings(args))
    push_finetuned(task, args, results, accelerator)  # --push_to_hub: stage output_dir/hub and upload it
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


def _datasets(task: FinetuningTask, args: FinetuningArguments, accelerator):
    """The train / eval / predict datasets the ``--do_*`` flags need; one line when one of them is empty."""
    with accelerator.main_process_first():
        train_set = _subset(task.train_dataset(), args.max_train_samples) if args.do_train else None
        eval_set = _subset(task.eval_dataset(), args.max_eval_samples) if (args.do_eval or args.do_train) else None
        predict_set = task.predict_dataset() if args.do_predict else None
    for wanted, dataset, what in ((args.do_train, train_set, "training"), (args.do_eval, eval_set, "evaluation"),
                                  (args.do_predict, predict_set, "test")):
        if wanted and (dataset is None or len(dataset) == 0):
            raise CorefBertError(f"task {task.name} has no {what} data; give its file or drop the --do_ flag")
    return train_set, eval_set, predict_set


def _train(task, args, accelerator, model, train_loader, eval_loader, evaluator):
    """Run the training loop; returns the prepared model and the train metrics (``train_loss``, ...)."""
    optimizer = build_optimizer(model, args, task.learning_rates(model))
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    # len() after prepare: per-process batches, so the schedule is right on N processes.
    total_steps = total_training_steps(args, len(train_loader))
    scheduler = build_scheduler(optimizer, args, total_steps)
    job = FinetuningJob(task, args, evaluator, accelerator.prepare(eval_loader) if eval_loader is not None else None)
    return model, train(job, args, accelerator, model, optimizer, scheduler, train_loader, total_steps,
                        project=f"corefbert_{task.name}")


@cli_entry
def main(task_class: type[FinetuningTask], argv: list[str] | None = None, prog: str | None = None) -> dict[str, float]:
    """The command line of ``task_class``: parse it (:func:`parse_task_arguments`), run the task, print and
    return ``all_results.json``'s values. Bad input: one line, exit 2."""
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # DataLoader workers fork after tokenizing
    argv = list(sys.argv[1:] if argv is None else argv)
    task_class = task_class.variant_for(argv)
    task_args, args = parse_task_arguments(task_class, argv, prog)
    args.validate()
    results = task_class.run(task_args, args)
    if int(os.environ.get("RANK", "0")) == 0:  # every rank of a DDP run holds the same dict: print it once
        print(json.dumps(results, indent=2, sort_keys=True))
    return results


def parse_task_arguments(task_class: type[FinetuningTask], argv: list[str] | None = None, prog: str | None = None):
    """``(task_args, training_args)`` of ``argv`` (default ``sys.argv[1:]``) for ``task_class``: the variant's
    ``training_defaults`` over the dataclass defaults, a ``--config`` file over those, flags over all."""
    argv = list(sys.argv[1:] if argv is None else argv)
    task_class = task_class.variant_for(argv)
    return parse_args((task_class.args_class, FinetuningArguments), argv, prog=prog,
                      defaults=dict(task_class.training_defaults))
