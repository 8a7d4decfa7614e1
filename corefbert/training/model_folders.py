"""Checks of a model folder that must fail before any weight is read: its weights format and its length.

Every CLI calls :func:`check_model_folder` on ``--model_name_or_path`` before it loads a model.
"""

from __future__ import annotations

import glob
import os

from corefbert.errors import CorefBertError
from corefbert.text.jsonio import read_json
from corefbert.text.positions import max_positions, positions_reason

PICKLE_WEIGHTS = ("pytorch_model*.bin", "*.pt", "*.pth", "*.ckpt")


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
