"""The one layout of a fine-tuned folder: the encoder as an ordinary Hugging Face checkpoint at the top level
(``AutoModel.from_pretrained(folder)`` loads it with no missing encoder key), task heads in a sidecar
``<task>_head.safetensors`` (weights, keys as in the task model) + ``<task>_head.json`` (what rebuilds the
head: sizes, label sets, a threshold).

Tasks whose model is a standard Hugging Face head class (GLUE and FEVER-concat: sequence classification; MRQA:
question answering) save that class instead. The QA class has no pooler, so MRQA carries the backbone's,
frozen (:func:`frozen_pooler`). RoBERTa's sequence classifier has none either (its head reads the first token
through its own dense layer), so ``AutoModel`` of such a folder draws a fresh pooler, as for any RoBERTa
classifier on the Hub; every other encoder weight is there (``tests/tasks/test_glue.py``). Here too is the
one weight loader, :func:`load_weights`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import torch

from corefbert.errors import CorefBertError, one_line
from corefbert.text.durable import output_path, replace_file
from corefbert.text.jsonio import read_json
from corefbert.training.model_folders import (
    check_shapes,
    check_sizes_against_weights,
    safetensors_files,
    weight_shapes,
)

ENCODER_PREFIX = "encoder."


def head_weights_file(task: str) -> str:
    """``<task>_head.safetensors``: the sidecar weights of ``task``'s head."""
    return f"{task}_head.safetensors"


def head_config_file(task: str) -> str:
    """``<task>_head.json``: what rebuilds ``task``'s head (sizes, labels, options)."""
    return f"{task}_head.json"


def weight_files(directory: str) -> list[str]:
    """:func:`safetensors_files` of ``directory``, each of which must exist (one line naming the folder else:
    a folder whose weights were deleted, or kept only as a pickle, which is never read)."""
    files = safetensors_files(directory)
    for path in files:
        if not os.path.isfile(path):
            raise CorefBertError(f"no {os.path.basename(path)} (the model's weights) in this model folder; pass the "
                                 "folder the training run wrote, whole", path=directory)
    return files


def load_weights(model: torch.nn.Module, directory: str, extra_prefixes: tuple[str, ...] = ()) -> None:
    """The one weight loader: ``model.safetensors`` (or its shards) of ``directory`` into ``model`` in place.
    Keys missing from the file must be tied to a loaded tensor (``save_pretrained`` drops tied copies). Keys
    starting with one of ``extra_prefixes`` may be in the file without being in ``model`` (a frozen pooler
    saved beside a head class that has none, see :func:`frozen_pooler`). Every mismatch (a shape, asked of the
    headers before any weight is read; a key too many or too few) is one :class:`CorefBertError` line naming
    the folder."""
    from safetensors.torch import load_file

    files = weight_files(directory)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    check_shapes(expected, weight_shapes(files), "the model", directory)
    state = {}
    for path in files:
        state.update(load_file(path))
    state = {k: v for k, v in state.items() if not (extra_prefixes and k.startswith(extra_prefixes))}
    missing, unexpected = model.load_state_dict(state, strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded = {params[k].data_ptr() for k in state if k in params}
    untied = [k for k in missing if k not in params or params[k].data_ptr() not in loaded]
    if unexpected or untied:
        raise CorefBertError(f"the weights do not match the model (missing {untied[:4]}, unexpected {unexpected[:4]}): "
                             "they were saved from another model or with other settings; pass the folder saved with "
                             "this model's settings", path=directory)


def load_encoder(model_name_or_path: str) -> torch.nn.Module:
    """``AutoModel.from_pretrained`` with its pooler kept but frozen. Kept, so the saved folder is a complete
    checkpoint of the encoder class (``AutoModel`` then loads it with no missing key); frozen, because heads
    that never read it would leave it an unused trainable parameter (DDP fails at the second step) and AdamW's
    weight decay would still shrink it."""
    from transformers import AutoConfig, AutoModel

    try:
        if os.path.isdir(model_name_or_path):
            config = AutoConfig.from_pretrained(model_name_or_path)
            check_sizes_against_weights(lambda: AutoModel.from_config(config), safetensors_files(model_name_or_path),
                                        "config.json", model_name_or_path)
        encoder = AutoModel.from_pretrained(model_name_or_path)
    except (OSError, ValueError) as err:
        raise CorefBertError(f"cannot load an encoder ({one_line(err, first_line=True)})", path=model_name_or_path) from None
    pooler = getattr(encoder, "pooler", None)
    if pooler is not None:
        pooler.requires_grad_(False)
    return encoder


def write_head_config(output_dir: str, task: str, config: dict) -> None:
    """Write ``<task>_head.json`` (what rebuilds the head) into ``output_dir``."""
    replace_file(os.path.join(output_dir, head_config_file(task)), json.dumps(config, indent=1), "the head config")


def read_head_config(directory: str, task: str) -> dict | None:
    """``<task>_head.json`` of a folder :func:`save_encoder_and_head` wrote; None for any other checkpoint
    (a base encoder, a pretraining checkpoint), which then gets a fresh head."""
    path = os.path.join(str(directory), head_config_file(task))
    return read_json(path) if os.path.isfile(path) else None


def save_encoder_and_head(model: torch.nn.Module, output_dir: str, task: str, config: dict,
                          state_dict: dict | None = None) -> None:
    """Save ``model.encoder`` as an ordinary Hugging Face checkpoint at the top of ``output_dir``, every
    other weight (the task head) in ``<task>_head.safetensors`` and ``config`` in ``<task>_head.json``."""
    from safetensors.torch import save_file

    os.makedirs(output_dir, exist_ok=True)
    state_dict = model.state_dict() if state_dict is None else state_dict
    encoder_state = {k[len(ENCODER_PREFIX):]: v for k, v in state_dict.items() if k.startswith(ENCODER_PREFIX)}
    model.encoder.save_pretrained(output_dir, state_dict=encoder_state)
    head = {k: v.detach().contiguous().cpu() for k, v in state_dict.items() if not k.startswith(ENCODER_PREFIX)}
    with output_path(os.path.join(output_dir, head_weights_file(task)), "the head weights") as fresh:
        save_file(head, fresh)
    write_head_config(output_dir, task, config)


def check_head_weights(directory: str, task: str) -> str:
    """``directory/<task>_head.safetensors``; its absence is one error line, before any weight is read."""
    name = head_weights_file(task)
    path = os.path.join(str(directory), name)
    if not os.path.isfile(path):
        raise CorefBertError(f"no {name} (the task head) in this fine-tuned folder; fine-tune it again "
                             "with this version, or give the base encoder checkpoint", path=directory)
    return path


def load_encoder_and_head(model: torch.nn.Module, directory: str, task: str, with_encoder: bool = True) -> None:
    """Load what :func:`save_encoder_and_head` wrote into ``model`` in place; every weight must match.
    ``with_encoder=False``: the head alone (the encoder already came from ``directory``)."""
    from safetensors.torch import load_file

    path = check_head_weights(directory, task)
    if with_encoder:
        load_weights(model.encoder, directory)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.startswith(ENCODER_PREFIX)}
    stored = weight_shapes([path])
    if set(stored) != set(expected):
        raise CorefBertError(f"{head_weights_file(task)} does not match this model (differing keys: "
                             f"{sorted(set(stored) ^ set(expected))[:4]}); was it saved by another task or with other "
                             "head options?", path=directory)
    check_shapes(expected, stored, head_config_file(task), directory)
    model.load_state_dict(load_file(path), strict=False)


def encoder_has_pooler(config) -> bool:
    """Whether ``AutoModel`` of ``config`` has a pooler (BERT and RoBERTa do; ModernBERT, DeBERTa, ELECTRA and
    DistilBERT do not), asked of a model built on the meta device (shapes only, no memory)."""
    from transformers import AutoModel

    with torch.device("meta"):
        encoder = AutoModel.from_config(config)
    return getattr(encoder, "pooler", None) is not None


def frozen_pooler(config, weights: dict[str, torch.Tensor] | None) -> torch.nn.Linear | None:
    """The backbone's pooler (``weights`` from :func:`saved_pooler`, else freshly initialized), frozen; None for a
    family whose encoder has none (:func:`encoder_has_pooler`). Task models on a head class without a pooler
    (QA, masked LM) never use it but carry it, so their saved folder is a complete encoder checkpoint."""
    if not encoder_has_pooler(config):
        return None
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


def stored_tensors(directory: str, wanted: Callable[[str], str | None]) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint folder's safetensors files that ``wanted`` names (``wanted(stored name)``: the
    name to give it, None to skip it); only those are read. ``{}`` for a folder without weights."""
    from safetensors import safe_open

    found = {}
    for path in safetensors_files(directory) if os.path.isdir(directory) else []:
        if os.path.isfile(path):
            with safe_open(path, framework="pt") as weights:
                for key in weights.keys():
                    name = wanted(key)
                    if name is not None and name not in found:
                        found[name] = weights.get_tensor(key)
    return found


def _pooler_part(key: str) -> str | None:
    """``weight`` / ``bias`` for a pooler's stored name (any model prefix), else None."""
    name = key.rsplit("pooler.dense.", 1)[-1]
    pooler = key.startswith("pooler.dense.") or ".pooler.dense." in key
    return name if pooler and name in ("weight", "bias") else None


def saved_pooler(directory: str) -> dict[str, torch.Tensor] | None:
    """``{"weight", "bias"}`` of the pooler saved in a checkpoint folder (any model prefix), else None
    (for :func:`frozen_pooler`)."""
    found = stored_tensors(directory, _pooler_part)
    return found if len(found) == 2 else None
