"""What :mod:`corefbert.pretraining.convert` checks before it builds a model or writes a file.

- **Where it reads.** ``OFFICIAL_DIR`` is a local folder, or a Hub id (``nielsr/coref-bert-base``) downloaded
  when online; offline that is one line showing the download command.
- **Where it writes.** ``OUTPUT_DIR`` (and its ``.converting`` / ``.deleting`` siblings) must neither equal,
  contain nor lie inside the source once links are resolved: ``--overwrite_output_dir`` would otherwise delete
  the released folder it reads.
- **What config.json says.** Every architecture value has the type and range BertConfig / RobertaConfig
  expect, and agrees with the shapes of the checkpoint's tensors before anything is allocated (a
  ``vocab_size`` of 400,000,000 beside a 30k-row embedding would make the model 51 GB).
- **What the weights hold.** NaN or infinity is refused unless ``--allow_non_finite``; float64 and integer
  tensors are converted to float32 with a warning.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from corefbert.errors import CorefBertError

# config.json entries that size the model: each must be a positive integer (bool is an int in Python: refused).
POSITIVE_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size")
PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob")
POSITIVE_FLOATS = ("layer_norm_eps", "initializer_range")
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")
# What a Hub download fetches: the files convert reads, not a repository's every format (TF, Flax, ONNX).
HUB_FILES = ["config.json", "*.safetensors", "pytorch_model*.bin", "vocab.txt", "vocab.json", "merges.txt",
             "tokenizer_config.json"]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _number_text(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def check_config_values(config: dict, where) -> None:
    """One line for an architecture value of ``config.json`` with the wrong type or range."""
    for key in POSITIVE_INTS:
        value = config.get(key, 1)  # absent: the transformers default applies
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CorefBertError(f"config.json {key} must be a positive integer, got {_number_text(value)}; fix "
                                 "the file (is it the released one?)", path=where)
    for key in (*PROBABILITIES, *POSITIVE_FLOATS):
        value = config.get(key, 0.1)
        number = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
        if not number or (key in PROBABILITIES and not 0 <= value < 1) or (key in POSITIVE_FLOATS and value <= 0):
            want = "a number in [0, 1)" if key in PROBABILITIES else "a positive number"
            raise CorefBertError(f"config.json {key} must be {want}, got {_number_text(value)}", path=where)
    for key in TOKEN_IDS:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise CorefBertError(f"config.json {key} must be a non-negative integer or null, got "
                                 f"{_number_text(value)}", path=where)
    if "hidden_act" in config and not isinstance(config["hidden_act"], str):
        raise CorefBertError(f"config.json hidden_act must be a name such as \"gelu\", got "
                             f"{_number_text(config['hidden_act'])}", path=where)
    hidden, heads = config.get("hidden_size", 768), config.get("num_attention_heads", 12)
    if hidden % heads:  # BertSelfAttention raises a ValueError on it, as a traceback
        raise CorefBertError(f"config.json hidden_size {hidden} is not a multiple of num_attention_heads {heads}",
                             path=where)


def _layer_count(names, model_type: str) -> int:
    layers = {int(m.group(1)) for n in names if (m := re.match(rf"{model_type}\.encoder\.layer\.(\d+)\.", n))}
    return max(layers) + 1 if layers else 0


def check_config_against_weights(config: dict, shapes: dict[str, tuple], model_type: str, where) -> None:
    """One line when ``config.json`` sizes a model other than the one whose tensor ``shapes`` (corefbert
    names) the checkpoint holds; asked before any model is built."""
    embeddings = f"{model_type}.embeddings"
    checks = [  # (config key, tensor, dimension)
        ("vocab_size", f"{embeddings}.word_embeddings.weight", 0),
        ("hidden_size", f"{embeddings}.word_embeddings.weight", 1),
        ("max_position_embeddings", f"{embeddings}.position_embeddings.weight", 0),
        ("type_vocab_size", f"{embeddings}.token_type_embeddings.weight", 0),
        ("intermediate_size", f"{model_type}.encoder.layer.0.intermediate.dense.weight", 0),
    ]
    for key, name, dim in checks:
        shape = shapes.get(name)
        if key not in config or shape is None or len(shape) <= dim:
            continue  # a missing tensor is reported by the encoder check, with the others missing
        if shape[dim] != config[key]:
            raise CorefBertError(f"config.json {key} is {config[key]} but the weight {name} has shape {tuple(shape)}: "
                                 "config and weights are of different models; use the config.json released with "
                                 "these weights", path=where)
    layers = _layer_count(shapes, model_type)
    if layers and "num_hidden_layers" in config and layers != config["num_hidden_layers"]:
        raise CorefBertError(f"config.json num_hidden_layers is {config['num_hidden_layers']} but the weights hold "
                             f"{layers} layer(s): config and weights are of different models", path=where)


def expected_shapes(model_class, hf_config) -> dict:
    """``{name: tensor on the meta device}`` of the model ``hf_config`` describes (shapes, no memory)."""
    import torch

    with torch.device("meta"):
        return model_class(hf_config).state_dict()


def check_weight_values(renamed: dict, allow_non_finite: bool, notes: list[str], where) -> None:
    """Refuse NaN/infinity (unless ``allow_non_finite``: then a warning); warn for float64 and integer tensors,
    which are written as float32."""
    import torch

    non_finite, wide, integral = [], [], []
    for name, tensor in renamed.items():
        if tensor.dtype == torch.float64:
            wide.append(name)
        elif not tensor.is_floating_point():
            integral.append(f"{name} ({str(tensor.dtype).removeprefix('torch.')})")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            non_finite.append(f"{name} ({bad} of {tensor.numel()} values)")
    if non_finite and not allow_non_finite:
        raise CorefBertError(f"{len(non_finite)} tensor(s) hold NaN or infinity (first: {non_finite[0]}): a model "
                             "converted from them computes NaN. Use an undamaged copy, or pass --allow_non_finite "
                             "to convert them as they are", path=where)
    if non_finite:
        notes.append(f"warning: {len(non_finite)} tensor(s) hold NaN or infinity, written as they are "
                     f"(--allow_non_finite): {', '.join(non_finite[:3])}{', ...' if len(non_finite) > 3 else ''}")
    if wide:
        notes.append(f"warning: {len(wide)} float64 tensor(s) written as float32 (the model's precision; values "
                     f"beyond float32's range or precision change): {', '.join(wide[:3])}"
                     f"{', ...' if len(wide) > 3 else ''}")
    if integral:
        notes.append(f"warning: {len(integral)} integer tensor(s) written as float32 weights (a quantised or "
                     f"damaged checkpoint? the model computes with whole numbers there): {', '.join(integral[:3])}"
                     f"{', ...' if len(integral) > 3 else ''}")


def _contains(outer: Path, inner: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_output_location(source: Path, target: Path) -> Path:
    """The real path to write ``OUTPUT_DIR`` at; one line when it (or the ``.converting`` / ``.deleting``
    folder the conversion writes and deletes beside it) equals, contains or lies inside the source, after
    resolving links, or when OUTPUT_DIR is a link that never ends."""
    try:
        real_target = target.resolve()
    except (RuntimeError, OSError):  # Python 3.11/3.12 raise RuntimeError for a loop, later ones OSError
        raise CorefBertError("OUTPUT_DIR is a symlink that points back at itself (a loop); remove the link or pass "
                             "another folder", path=target) from None
    real_source = source.resolve()
    for path, what in ((real_target, "OUTPUT_DIR"),
                       (real_target.with_name(real_target.name + ".converting"), "the conversion's scratch folder"),
                       (real_target.with_name(real_target.name + ".deleting"), "the folder an old OUTPUT_DIR is "
                                                                               "moved to for deletion")):
        if _contains(path, real_source) or _contains(real_source, path):
            if path == real_source:
                how = "is the released folder"
            elif _contains(path, real_source):
                how = "contains the released folder"
            else:
                how = "lies inside the released folder"
            linked = real_target != Path(os.path.abspath(target))
            via = f" (the link {target} leads to {real_target})" if linked else ""
            raise CorefBertError(f"{what} {path} {how}{via}; writing there would replace or delete the files being "
                                 f"converted. Pass an OUTPUT_DIR outside {real_source}", path=target)
    return real_target


def resolve_source(official_dir: str) -> Path:
    """The local folder to convert: ``official_dir`` itself, or the snapshot of a Hub id (online only)."""
    path = Path(official_dir)
    if path.exists() or path.is_symlink() or not HUB_ID.match(official_dir):
        return path
    from corefbert.training.hub import hub_offline

    local = official_dir.rsplit("/", 1)[1]
    command = (f"hf download {official_dir} --local-dir {local}, then python -m corefbert.pretraining.convert {local} "
               "OUTPUT_DIR")
    if hub_offline():
        raise CorefBertError(f"not a local folder, and HF_HUB_OFFLINE=1 keeps the Hub id {official_dir} from being "
                             f"downloaded; download it first where the network is reachable: {command}",
                             path=official_dir)
    import huggingface_hub

    print(f"downloading {official_dir} from the Hub ({', '.join(HUB_FILES)})", flush=True)
    try:
        folder = huggingface_hub.snapshot_download(official_dir, allow_patterns=HUB_FILES)
    except Exception as err:  # noqa: BLE001 - any failed download (no such repo, no network) is one line
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise CorefBertError(f"not a local folder, and downloading the Hub id failed ({type(err).__name__}: "
                             f"{reason}); check the name, or download it yourself: {command}",
                             path=official_dir) from None
    return Path(folder)
