"""Files of the fine-tuning loop: JSON/JSONL output, saving models and checkpoints (temp dir + rename),
checkpoint discovery and pruning, weight loading, evaluation progress, and the evaluator that keeps
``output_dir/best``."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from corefbert.checkpointing import remove_folder, replace_folder, writing
from corefbert.errors import CorefBertError


def _plain(value):
    """JSON-safe: numpy/torch scalars to Python numbers, NaN/inf to None (JSON has no NaN)."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write_json(path: str, values: dict) -> None:
    """Write ``values`` as indented JSON, atomically (temp file + rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(_plain(values), handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


class JsonlLogger:
    """Appends one JSON object per event to ``path`` (main process only), with a wall-clock stamp."""

    def __init__(self, path: str, enabled: bool = True):
        self.path, self.enabled = path, enabled

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"time": round(time.time(), 3), **_plain(record)}) + "\n")


def safetensors_files(directory: str) -> list[str]:
    """The weight files of a ``save_pretrained`` folder: the shards its index lists, else ``model.safetensors``."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as handle:
            files = sorted(set(json.load(handle)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    return [os.path.join(directory, name) for name in files]


def load_weights(model: torch.nn.Module, directory: str, extra_prefixes: tuple[str, ...] = ()) -> None:
    """Load ``model.safetensors`` (or its shards) from ``directory`` into ``model`` in place.

    Keys missing from the file must be tied to a loaded tensor (``save_pretrained`` drops tied copies).
    Keys starting with one of ``extra_prefixes`` may be in the file without being in ``model`` (a frozen
    pooler saved beside a head class that has none, see :func:`frozen_pooler`).
    """
    from safetensors.torch import load_file

    state = {}
    for path in safetensors_files(directory):
        state.update(load_file(path))
    state = {k: v for k, v in state.items() if not (extra_prefixes and k.startswith(extra_prefixes))}
    missing, unexpected = model.load_state_dict(state, strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded = {params[k].data_ptr() for k in state if k in params}
    untied = [k for k in missing if k not in params or params[k].data_ptr() not in loaded]
    if unexpected or untied:
        raise RuntimeError(f"weights in {directory} do not match the model: missing {untied}, unexpected {unexpected}")


def load_encoder(model_name_or_path: str) -> torch.nn.Module:
    """``AutoModel.from_pretrained`` with its pooler kept but frozen.

    Kept, so the saved folder is a complete checkpoint of the encoder class (``AutoModel`` then loads it
    with no missing key); frozen, because heads that never read it would leave it an unused trainable
    parameter (DDP fails at the second step) and AdamW's weight decay would still shrink it.
    """
    from transformers import AutoModel

    try:
        encoder = AutoModel.from_pretrained(model_name_or_path)
    except (OSError, ValueError) as err:
        raise CorefBertError(f"cannot load an encoder ({str(err).splitlines()[0]})", path=model_name_or_path) from None
    pooler = getattr(encoder, "pooler", None)
    if pooler is not None:
        pooler.requires_grad_(False)
    return encoder


def save_encoder_and_head(model: torch.nn.Module, output_dir: str, head_file: str,
                          state_dict: dict | None = None) -> None:
    """Save ``model.encoder`` as an ordinary Hugging Face checkpoint at the top of ``output_dir`` and every
    other weight (the task head) in the sidecar ``head_file`` (safetensors, keys as in ``model``)."""
    from safetensors.torch import save_file

    state_dict = model.state_dict() if state_dict is None else state_dict
    prefix = "encoder."
    encoder_state = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    model.encoder.save_pretrained(output_dir, state_dict=encoder_state)
    head = {k: v.detach().contiguous().cpu() for k, v in state_dict.items() if not k.startswith(prefix)}
    save_file(head, os.path.join(output_dir, head_file))


def head_weights_path(directory: str, head_file: str) -> str:
    """``directory/head_file``; a fine-tuned folder without it (e.g. one written before the encoder/head
    split, with the whole model under ``encoder.``) is one clear error, before any weight is read."""
    path = os.path.join(directory, head_file)
    if not os.path.isfile(path):
        raise CorefBertError(f"no {head_file} (the task head) in this fine-tuned folder; fine-tune it again "
                             "with this version, or give the base encoder checkpoint", path=directory)
    return path


def load_encoder_and_head(model: torch.nn.Module, directory: str, head_file: str, with_encoder: bool = True) -> None:
    """Load what :func:`save_encoder_and_head` wrote into ``model`` in place; every weight must match.
    ``with_encoder=False``: the head alone (the encoder already came from ``directory``)."""
    from safetensors.torch import load_file

    path = head_weights_path(directory, head_file)
    if with_encoder:
        load_weights(model.encoder, directory)
    head = load_file(path)
    expected = {k for k in model.state_dict() if not k.startswith("encoder.")}
    if set(head) != expected:
        raise CorefBertError(f"{head_file} does not match this model (differing keys: "
                             f"{sorted(set(head) ^ expected)[:4]}); was it saved by another task?", path=directory)
    model.load_state_dict(head, strict=False)


def frozen_pooler(config, weights: dict[str, torch.Tensor] | None) -> torch.nn.Linear:
    """The backbone's pooler (``weights`` from :func:`saved_pooler`, else freshly initialized), frozen.

    For task models on a head class without a pooler (QA, masked LM): they never use it, but carry it so
    their saved folder is a complete encoder checkpoint (``AutoModel`` loads it with no missing key).
    """
    hidden = config.hidden_size
    pooler = torch.nn.Linear(hidden, hidden)
    if weights is None:
        torch.nn.init.normal_(pooler.weight, std=getattr(config, "initializer_range", 0.02))
        torch.nn.init.zeros_(pooler.bias)
    else:
        pooler.load_state_dict(weights)
    return pooler.requires_grad_(False)


def with_pooler(state_dict: dict, pooler_key: str, base_model_prefix: str) -> dict:
    """``state_dict`` of the head class plus the pooler at ``pooler_key`` (``pooler.weight``/``.bias`` of the
    wrapper) renamed to where the encoder class keeps it (``bert.pooler.dense.*``)."""
    prefix = f"{pooler_key}."
    extra = {f"{base_model_prefix}.pooler.dense.{k[len(prefix):]}": v for k, v in state_dict.items()
             if k.startswith(prefix)}
    return {**{k: v for k, v in state_dict.items() if not k.startswith(prefix)}, **extra}


def saved_pooler(directory: str) -> dict[str, torch.Tensor] | None:
    """``{"weight", "bias"}`` of the pooler saved in a checkpoint folder (any model prefix), else None.

    For task models built on a head class without a pooler (QA, masked LM): they carry it frozen and save it
    so that ``AutoModel`` finds every weight of the encoder in their folder."""
    from safetensors import safe_open

    found = {}
    for path in safetensors_files(directory) if os.path.isdir(directory) else []:
        if os.path.isfile(path):
            with safe_open(path, framework="pt") as weights:  # reads only the two tensors wanted
                for key in weights.keys():
                    name = key.rsplit("pooler.dense.", 1)[-1]
                    if (key.startswith("pooler.dense.") or ".pooler.dense." in key) and name in ("weight", "bias"):
                        found[name] = weights.get_tensor(key)
    return found if len(found) == 2 else None


class ProgressLoader:
    """Iterates a dataloader with a tqdm bar; every other attribute is the dataloader's own."""

    def __init__(self, dataloader, desc: str, disable: bool):
        self._dataloader, self._desc, self._disable = dataloader, desc, disable

    def __len__(self) -> int:
        return len(self._dataloader)

    def __iter__(self):
        yield from tqdm(self._dataloader, desc=self._desc, leave=False, disable=self._disable)

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
        with torch.no_grad():
            metrics, predictions = self.task.evaluate(
                model, ProgressLoader(dataloader, f"{split} {self.task.name}", disable), self.accelerator, split)
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
