"""Checks of a model folder that must fail before any weight is read: its weights format and length
(:func:`check_model_folder`, on every CLI's ``--model_name_or_path``), and its config's sizes against the
stored tensors (:func:`check_sizes_against_weights`, in every loader of a folder).
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable

import torch

from corefbert.errors import CorefBertError, one_line
from corefbert.text.jsonio import read_json
from corefbert.text.positions import max_positions, positions_reason

PICKLE_WEIGHTS = ("pytorch_model*.bin", "*.pt", "*.pth", "*.ckpt")


def folder_identity(path: str | os.PathLike) -> str:
    """What a model folder is, whatever it is called: SHA-256 (16 hex digits) of its ``config.json`` and weight
    files; a name that is no local folder (a Hub id) is its name."""
    if not os.path.isdir(path):
        return str(path)
    digest = hashlib.sha256()
    for name in ["config.json", *sorted(os.path.basename(f) for f in glob.glob(os.path.join(path, "*.safetensors")))]:
        file = os.path.join(path, name)
        if os.path.isfile(file):
            digest.update(name.encode())
            with open(file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
    return digest.hexdigest()[:16]


def check_model_folder(path: str, max_seq_length: int | None = None) -> None:
    """One line, before any weight is read, for a local folder whose weights are pickles only, or whose model
    embeds fewer positions than ``max_seq_length``. A name that is not a local folder is left to the loader."""
    if not path or not os.path.isdir(path):
        return
    has_safetensors = bool(glob.glob(os.path.join(path, "*.safetensors")))
    pickles = sorted(os.path.basename(p) for pattern in PICKLE_WEIGHTS for p in glob.glob(os.path.join(path, pattern)))
    if pickles and not has_safetensors:
        # Unpickling runs code from the file: the README promises weights are read as safetensors only.
        raise CorefBertError(
            f"the weights here are pickle files only ({', '.join(pickles[:3])}); corefbert reads safetensors only, "
            "since unpickling can run code from the file. In an environment you trust, convert once with "
            "transformers (from_pretrained, then save_pretrained, which writes model.safetensors) and pass the "
            "converted folder", path=path)
    config_path = os.path.join(path, "config.json")
    if max_seq_length is None or not os.path.isfile(config_path):
        return
    try:
        config = read_json(config_path)
    except CorefBertError:
        return  # the loader reports an unreadable config in its own line
    limit = max_positions(config) if isinstance(config, dict) else None
    if limit is not None and max_seq_length > limit:
        raise CorefBertError(
            f"--max_seq_length {max_seq_length} exceeds the {limit} positions of this model "
            f"({positions_reason(config)}); "
            f"lower --max_seq_length to {limit}", path=path)


def safetensors_files(directory: str) -> list[str]:
    """The weight files of a ``save_pretrained`` folder: the shards its index lists, else ``model.safetensors``."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        files = sorted(set(read_json(index)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    return [os.path.join(directory, name) for name in files]


def weight_shapes(files: list[str]) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the tensors in safetensors ``files``, from their headers alone (no weight is read)."""
    from safetensors import safe_open

    shapes = {}
    for path in files:
        if os.path.isfile(path):
            try:
                with safe_open(path, framework="pt") as weights:
                    shapes.update({key: tuple(weights.get_slice(key).get_shape()) for key in weights.keys()})
            except Exception as err:  # noqa: BLE001 - safetensors' own error type for a damaged header
                raise CorefBertError(f"not a readable safetensors file ({one_line(err, first_line=True, limit=120)}); "
                                     "save or download the model again", path=path) from None
    return shapes


def check_shapes(expected: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]], sized_by: str,
                 where: str, prefix: str = "") -> None:
    """One line at the first stored tensor whose shape differs from the one ``sized_by`` (a config file, or "the
    model") gives it; stored names may carry ``prefix`` (a checkpoint saved from a class that wraps the model)."""
    for name, shape in stored.items():
        candidates = (name, name.removeprefix(prefix), prefix + name) if prefix else (name,)
        key = next((k for k in candidates if k in expected), name)
        if key in expected and expected[key] != shape:
            advice = (f"use the files saved with these weights ({sized_by})" if sized_by != "the model" else
                      "pass the folder saved with this model's settings")
            raise CorefBertError(f"{sized_by} sizes {key} as {list(expected[key])} but the stored weight has shape "
                                 f"{list(shape)}: config and weights are of different models; {advice}", path=where)


def check_sizes_against_weights(build: Callable[[], torch.nn.Module], files: list[str], config_name: str,
                                where: str) -> None:
    """One line when the config in ``config_name`` sizes a model whose tensors differ from those stored in
    ``files``, asked before the model is allocated: ``build`` runs on the meta device (shapes, no memory), so
    ``vocab_size: 400000000`` costs nothing. Stored names may carry the model's ``base_model_prefix``."""
    stored = weight_shapes(files)
    if not stored:
        return  # no safetensors here: the loader says so
    try:
        with torch.device("meta"):
            model = build()
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    except (TypeError, ValueError, RuntimeError, OverflowError) as err:
        raise CorefBertError(f"{config_name} does not describe a model that can be built "
                             f"({one_line(err, first_line=True, limit=160)}); use the file saved with the weights",
                             path=where) from None
    prefix = getattr(model, "base_model_prefix", "")
    check_shapes(expected, stored, config_name, where, f"{prefix}." if prefix else "")
