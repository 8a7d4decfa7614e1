"""What a training run writes: results as JSON, models saved into place (temp dir + rename), and the
:class:`Evaluator` that evaluates with a progress bar and keeps ``output_dir/best`` (the layout of a saved
fine-tuned folder itself is :mod:`corefbert.tasks.heads`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from tqdm.auto import tqdm

from corefbert.errors import CorefBertError, out_of_memory_as_error
from corefbert.text.durable import remove_folder, replace_file, replace_folder, writing
from corefbert.text.jsonio import json_safe
from corefbert.training.checkpoints.signals import raise_if_stopping


def write_json(path: str, values: dict) -> None:
    """Write ``values`` as indented JSON, atomically (temp file + rename)."""
    replace_file(path, json.dumps(json_safe(values), indent=2, sort_keys=True) + "\n")


class ProgressLoader:
    """Iterates a dataloader with a tqdm bar; every other attribute is the dataloader's own."""

    def __init__(self, dataloader, desc: str, disable: bool):
        self._dataloader, self._desc, self._disable = dataloader, desc, disable

    def __len__(self) -> int:
        return len(self._dataloader)

    def __iter__(self):
        for batch in tqdm(self._dataloader, desc=self._desc, leave=False, disable=self._disable):
            raise_if_stopping()  # a SIGTERM in a training loop's evaluation ends it here, within one batch
            yield batch

    def __getattr__(self, name):
        return getattr(self._dataloader, name)


def save_model(task, model, accelerator, output_dir: str) -> None:
    """Save the prepared ``model`` via ``task.save_pretrained`` into a temp dir renamed into place."""
    state_dict = accelerator.get_state_dict(model)  # gathers ZeRO-3 shards; collective, every process
    if accelerator.is_main_process:
        tmp = output_dir.rstrip("/") + ".tmp"
        remove_folder(Path(tmp))
        with writing(tmp, f"the model {os.path.basename(output_dir)}/", "the checkpoints are intact"):
            task.save_pretrained(accelerator.unwrap_model(model), tmp, state_dict=state_dict)
            replace_folder(tmp, output_dir)
    accelerator.wait_for_everyone()


class Evaluator:
    """Runs the task's evaluation, writes its predictions, and keeps ``output_dir/best``."""

    def __init__(self, task, args, accelerator, logger):
        self.task, self.args, self.accelerator, self.logger = task, args, accelerator, logger
        self.best_metric: float | None = None
        self.best_step: int | None = None
        self.best_evaluation: tuple[dict, object] | None = None  # the best model's, from this process's run
        self.best_dir = os.path.join(args.output_dir, "best")

    def run(self, model, dataloader, split: str) -> tuple[dict[str, float], object]:
        was_training = model.training
        model.eval()
        disable = self.args.disable_tqdm or not self.accelerator.is_local_main_process
        try:
            with torch.no_grad(), out_of_memory_as_error(f"in the {split} pass", self.task.memory_advice(split)):
                metrics, predictions = self.task.evaluate(
                    model, ProgressLoader(dataloader, f"{split} {self.task.name}", disable), self.accelerator, split)
        finally:  # also when a signal abandons the evaluation (EvaluationStopped)
            model.train(was_training)
        return {f"{split}_{k}": v for k, v in metrics.items()}, predictions

    def is_better(self, value: float) -> bool:
        if self.best_metric is None or math.isnan(self.best_metric):
            return True
        if math.isnan(value):  # e.g. a correlation of constant predictions: never the best
            return False
        return value > self.best_metric if self.task.greater_is_better else value < self.best_metric

    def evaluate_and_keep_best(self, model, dataloader, step: int, epoch: float) -> dict[str, float]:
        metrics, predictions = self.run(model, dataloader, "eval")
        key = f"eval_{self.task.main_metric}"
        if key not in metrics:
            raise CorefBertError(f"task {self.task.name} reported no {key}; it gave {sorted(metrics)}")
        self.logger.log({"step": step, "epoch": round(epoch, 4), **metrics})
        if self.is_better(metrics[key]):
            self.best_metric, self.best_step = float(metrics[key]), step
            self.best_evaluation = (metrics, predictions)
            save_model(self.task, model, self.accelerator, self.best_dir)
            if self.accelerator.is_main_process:
                write_json(os.path.join(self.best_dir, "eval_results.json"), {"step": step, **metrics})
                self.task.write_predictions(predictions, self.best_dir, "eval")
        return metrics
