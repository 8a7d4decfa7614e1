"""The files of a training checkpoint: recorded when saved, checked before any of them is loaded.

- **Whole.** ``trainer_state.json`` (written last) records the size of every file ``save_state`` wrote
  (:data:`FILES_KEY`); one missing or of another size is one line (:func:`check_files`), where accelerate
  would skip a missing RNG file with an INFO-level message.
- **No code.** accelerate and DeepSpeed unpickle the optimizer, RNG and scaler state with
  ``weights_only=False``: first every file that could be unpickled is read here with
  ``torch.load(weights_only=True)`` (plain types and :data:`SAFE_GLOBALS` only); one it refuses makes the
  checkpoint unusable. The LR schedule is JSON (:data:`SCHEDULER_KEY`); the RNG is applied from the checked
  file (:func:`restore_rng`).
"""

from __future__ import annotations

import codecs
import importlib
import random
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np

from corefbert.errors import one_line

#: ``trainer_state.json``: ``{path relative to the checkpoint: size in bytes}`` of each file save_state wrote.
FILES_KEY = "files"
#: ``trainer_state.json``: the LR scheduler's ``state_dict()``, as JSON.
SCHEDULER_KEY = "lr_scheduler"
STATE_FILE = "trainer_state.json"
#: Files no loader unpickles: safetensors, our JSON, DeepSpeed's ``latest`` (a tag name) and the conversion
#: script DeepSpeed copies beside it.
NEVER_UNPICKLED_SUFFIXES = (".safetensors", ".json", ".py")
NEVER_UNPICKLED_NAMES = ("latest",)

_NUMPY_CORE = getattr(np, "_core", None) or np.core
#: Globals the RNG file needs beyond PyTorch's own plain types (numpy's Mersenne Twister state is an array of
#: uint32; protocol 2 pickles its bytes through ``codecs.encode``). The same list accelerate allows itself.
SAFE_GLOBALS = [_NUMPY_CORE.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32)), codecs.encode]
#: DeepSpeed's optimizer state (ZeRO-2/3) also holds these plain classes (module, names); none has a
#: ``__setstate__`` or ``__reduce__`` of its own: unpickling one sets attributes, nothing more.
DEEPSPEED_GLOBALS = (("deepspeed.runtime.fp16.loss_scaler", ("LossScaler", "DynamicLossScaler")),
                     ("deepspeed.runtime.zero.config", ("ZeroStageEnum",)),
                     ("deepspeed.utils.tensor_fragment", ("fragment_address",)))


class UnusableCheckpoint(Exception):
    """A checkpoint that cannot be resumed from; the message names the file and what is wrong with it."""


def record_files(folder: Path) -> dict[str, int]:
    """``{relative path: size}`` of every file under ``folder`` (what save_state wrote), for :data:`FILES_KEY`."""
    return {path.relative_to(folder).as_posix(): path.stat().st_size
            for path in sorted(folder.rglob("*")) if path.is_file()}


def check_files(path: Path, trainer_state: dict, process_index: int) -> dict:
    """Every recorded file there at its size, every file that could be unpickled read without running code;
    returns this process' RNG state (``random_states_<process_index>.pkl``). Raises :class:`UnusableCheckpoint`."""
    missing, short = [], []
    for name, size in trainer_state[FILES_KEY].items():
        file = path / name
        if not file.is_file():
            missing.append(name)
        elif file.stat().st_size != size:
            short.append(f"{name} has {file.stat().st_size} bytes, {size} were saved")
    if missing:
        raise UnusableCheckpoint(f"incomplete: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                                 f"{'is' if len(missing) == 1 else 'are'} missing")
    if short:
        raise UnusableCheckpoint(f"damaged: {short[0]}")
    rng_name = f"random_states_{process_index}.pkl"
    rng = None
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        if file.suffix not in NEVER_UNPICKLED_SUFFIXES and file.name not in NEVER_UNPICKLED_NAMES:
            loaded = read_pickle_safely(file, file.relative_to(path).as_posix())
            if file.name == rng_name and file.parent == path:
                rng = loaded
    if rng is None:
        raise UnusableCheckpoint(f"incomplete: {rng_name} (this process' random state) is missing")
    return rng


def read_pickle_safely(file: Path, name: str):
    """``torch.load(weights_only=True)`` of ``file`` (memory-mapped when it is torch's zip format, so an
    optimizer state costs no copy); anything it refuses or cannot read is :class:`UnusableCheckpoint`."""
    import torch

    previous = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals(_safe_globals())
    try:
        with warnings.catch_warnings():  # torch's note on a plain pickle's protocol: the file is refused anyway
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(file, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(file))
    except Exception as err:  # noqa: BLE001 - whatever the reason, the file is not used
        if "Weights only load failed" in str(err):  # torch's refusal; its line naming the global says what
            detail = next((line.strip() for line in str(err).splitlines() if "GLOBAL" in line), "refused")
            detail = one_line(detail, limit=160).rstrip(".")
            raise UnusableCheckpoint(f"{name} holds a pickle that would run code or build objects when loaded "
                                     f"({detail}); not loaded") from None
        raise UnusableCheckpoint(f"{name} cannot be read ({type(err).__name__}: "
                                 f"{one_line(err, first_line=True, limit=160)})") from None
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(previous)


def _safe_globals() -> list:
    """:data:`SAFE_GLOBALS`, and :data:`DEEPSPEED_GLOBALS` when this process imported DeepSpeed (only such a
    process can load its files; importing it here would cost seconds)."""
    found = list(SAFE_GLOBALS)
    if "deepspeed" in sys.modules:
        for module, names in DEEPSPEED_GLOBALS:
            loaded = importlib.import_module(module)
            found += [getattr(loaded, name) for name in names if hasattr(loaded, name)]
    return found


def restore_rng(states, name: str, warn) -> None:
    """Put back the Python, NumPy, torch CPU and CUDA generators from a checked RNG file; ``warn`` gets one
    line when CUDA is here but the checkpoint holds no CUDA state (saved without a GPU)."""
    import torch

    try:
        random.setstate(states["random_state"])
        np.random.set_state(states["numpy_random_seed"])
        torch.set_rng_state(states["torch_manual_seed"])
        if torch.cuda.is_available() and "torch_cuda_manual_seed" in states:
            torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])
    except Exception as err:  # noqa: BLE001 - a random state that does not apply is not one to resume with
        what = f"no {err}" if isinstance(err, KeyError) else one_line(err, first_line=True, limit=160)
        raise UnusableCheckpoint(f"{name} is not a usable random state ({type(err).__name__}: {what})") from None
    if torch.cuda.is_available() and "torch_cuda_manual_seed" not in states:
        warn(f"warning: {name} holds no CUDA random state (saved without a GPU): the GPU's random draws "
             "(dropout) will not repeat the run this one continues")
