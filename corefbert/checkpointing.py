"""Crash-safe training checkpoints: ``output_dir/checkpoints/step_N``, written whole or not at all.

A checkpoint is written by :meth:`accelerate.Accelerator.save_state` into a temporary folder
(``step_N.tmp``), completed with ``trainer_state.json`` (written last, fsynced), and only then renamed to
``step_N``. A rename within one directory is atomic, so a kill at any moment leaves either the previous
checkpoints or the new one, never a half-written "latest". Leftover ``.tmp`` folders of a killed save are
ignored and removed on the next save.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from corefbert.errors import CorefBertError

STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoints_root(output_dir: str | os.PathLike) -> Path:
    """The folder holding ``step_N`` checkpoints of a run."""
    return Path(output_dir) / "checkpoints"


def is_complete(path: str | os.PathLike) -> bool:
    """A checkpoint is complete when its trainer state (written last) parses."""
    state = Path(path) / STATE_FILE
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as ``(step, path)``, oldest first."""
    root = checkpoints_root(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and is_complete(child):
            found.append((int(match.group(1)), child))
    return sorted(found)


def resolve_checkpoint(resume_from_checkpoint: str | None, output_dir: str | os.PathLike) -> Path | None:
    """Turn ``--resume_from_checkpoint`` (a path, ``latest`` or None) into a checkpoint folder.

    ``latest`` with no checkpoint yet returns None (a preemptible job script can always pass it);
    an explicit path that is missing or incomplete is the user's error.
    """
    if not resume_from_checkpoint:
        return None
    if resume_from_checkpoint == "latest":
        found = list_checkpoints(output_dir)
        return found[-1][1] if found else None
    path = Path(resume_from_checkpoint)
    if not path.is_dir():
        raise CorefBertError(
            "checkpoint folder not found; pass an existing output_dir/checkpoints/step_N or 'latest'",
            path=path,
        )
    if not is_complete(path):
        raise CorefBertError(
            f"incomplete checkpoint (no readable {STATE_FILE}: the save was interrupted); "
            "resume from an earlier step_N or 'latest'",
            path=path,
        )
    return path


def read_trainer_state(path: str | os.PathLike) -> dict:
    """The loop position (step, epoch, batch in epoch, ...) saved with a checkpoint."""
    return json.loads((Path(path) / STATE_FILE).read_text(encoding="utf-8"))


def _write_json_durably(path: Path, values: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(values, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(accelerator, output_dir: str | os.PathLike, step: int, trainer_state: dict,
                    save_total_limit: int | None = None) -> Path:
    """Save model, optimizer, scheduler, scaler, RNG and registered state as ``checkpoints/step_<step>``.

    Every process must call this (DeepSpeed and FSDP shard the state). Keeps the newest
    ``save_total_limit`` complete checkpoints when given.
    """
    root = checkpoints_root(output_dir)
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob("*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _write_json_durably(tmp / STATE_FILE, {**trainer_state, "step": step})
        if final.exists():
            # The same step saved twice (a signal right after a periodic save): keep the newer copy.
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
        if save_total_limit is not None and save_total_limit > 0:
            for _, old in list_checkpoints(output_dir)[:-save_total_limit]:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator, path: str | os.PathLike) -> dict:
    """Restore everything :func:`save_checkpoint` wrote; returns the saved trainer state."""
    state = read_trainer_state(path)
    accelerator.load_state(str(path))
    return state
