"""Crash-safe training checkpoints: ``output_dir/checkpoints/step_N``, written whole or not at all.

``accelerator.save_state`` writes into ``step_N.tmp``, ``trainer_state.json`` last (fsynced), then the folder
is renamed to ``step_N`` (atomic within a directory): a kill at any moment leaves the previous checkpoints or
the new one. Leftover ``.tmp`` folders go at the next save; old checkpoints leave the ``step_N`` namespace
before they are deleted. A failed write removes its partial folder and stops the run with one line naming the
intact checkpoint.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from corefbert.errors import CorefBertError, one_line
from corefbert.text.durable import (
    fsync_dir,
    remove_folder,
    replace_folder,
    write_error,
    write_failure,
    write_json_durably,
)
from corefbert.text.jsonio import read_json
from corefbert.training.checkpoints.files import (
    FILES_KEY,
    SCHEDULER_KEY,
    STATE_FILE,
    UnusableCheckpoint,
    check_files,
    record_files,
    restore_rng,
)
from corefbert.training.checkpoints.signals import any_process

_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoints_root(output_dir: str | os.PathLike) -> Path:
    """The folder holding ``step_N`` checkpoints of a run."""
    return Path(output_dir) / "checkpoints"


def is_complete(path: str | os.PathLike) -> bool:
    """A checkpoint is complete when its trainer state (written last) parses."""
    try:
        read_json(str(Path(path) / STATE_FILE))
    except CorefBertError:  # missing, unreadable or not JSON
        return False
    return True


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as ``(step, path)``, oldest first. A complete ``step_N.tmp`` without
    ``step_N`` counts as step N: a kill between the two renames of a same-step re-save leaves the new copy
    there and the old one as ``.deleting``, maybe the run's only complete checkpoint."""
    root = checkpoints_root(output_dir)
    if not root.is_dir():
        return []
    found = {}
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name.removesuffix(".tmp"))
        if match and child.is_dir() and is_complete(child):
            step = int(match.group(1))
            if step not in found or not child.name.endswith(".tmp"):
                found[step] = child
    return sorted(found.items())


def leftovers(output_dir: str | os.PathLike) -> list[str]:
    """Names under ``checkpoints/`` that show a checkpoint once existed though none is complete now (a
    damaged ``step_N``, a ``step_N.deleting``); a partial ``.tmp`` alone is a first save that never ended."""
    root = checkpoints_root(output_dir)
    if not root.is_dir():
        return []
    return sorted(child.name for child in root.iterdir()
                  if _STEP_DIR.match(child.name.removesuffix(".deleting")) and ".tmp" not in child.name)


def passed_over(output_dir: str | os.PathLike, step: int) -> list[Path]:
    """``step_N`` folders newer than ``step`` that are not complete (their trainer state, written last before
    the folder got its name, was deleted or damaged since): what ``latest`` passed over to resume at ``step``."""
    root = checkpoints_root(output_dir)
    found = [(int(match.group(1)), child) for child in (root.iterdir() if root.is_dir() else ())
             if (match := _STEP_DIR.match(child.name)) and child.is_dir()]
    return [path for at, path in sorted(found) if at > step and not is_complete(path)]


def resolve_checkpoint(resume_from_checkpoint: str | None, output_dir: str | os.PathLike,
                       start_over: bool = False) -> Path | None:
    """``--resume_from_checkpoint`` (a path, ``latest`` or None) as a checkpoint folder. ``latest`` with no
    checkpoint yet is None (a preemptible job script can always pass it), but an error when checkpoints were
    there and none is complete, unless ``start_over`` (``--overwrite_output_dir``)."""
    if not resume_from_checkpoint:
        return None
    if resume_from_checkpoint == "latest":
        found = list_checkpoints(output_dir)
        if found:
            return found[-1][1]
        lost = leftovers(output_dir)
        if lost and not start_over:
            raise CorefBertError(
                f"--resume_from_checkpoint latest: no complete checkpoint, though earlier ones were here "
                f"({', '.join(lost)}); nothing to resume from. Pass --overwrite_output_dir to start over (deletes "
                "them) or another --output_dir", path=checkpoints_root(output_dir))
        return None
    path = Path(resume_from_checkpoint)
    if not path.is_dir():
        raise CorefBertError("checkpoint folder not found; pass an existing output_dir/checkpoints/step_N or "
                             "'latest'", path=path)
    if not is_complete(path) and (path / "config.json").is_file():
        raise CorefBertError(
            "a final model folder, not a checkpoint (no trainer state to resume from); to start a new run from "
            f"its weights pass --model_name_or_path {path}, or resume from output_dir/checkpoints/step_N or "
            "'latest'", path=path)
    if not is_complete(path):
        raise CorefBertError(f"incomplete checkpoint (no readable {STATE_FILE}: the save was interrupted); "
                             "resume from an earlier step_N or 'latest'", path=path)
    return path


def read_trainer_state(path: str | os.PathLike) -> dict:
    """The loop position (step, epoch, batch in epoch, ...) saved with a checkpoint."""
    return read_json(str(Path(path) / STATE_FILE))


def save_checkpoint(accelerator, output_dir: str | os.PathLike, step: int, trainer_state: dict,
                    save_total_limit: int | None, scheduler) -> Path:
    """Save ``accelerator.save_state`` and the LR ``scheduler``'s state (JSON, in the trainer state) as
    ``checkpoints/step_<step>`` via ``step_<step>.tmp``; keep the newest ``save_total_limit`` complete
    checkpoints (0 or None: all). Every process must call this (DeepSpeed and FSDP shard the state)."""
    previous = list_checkpoints(output_dir)
    fallback = f"the last complete checkpoint is {previous[-1][1]}" if previous else "no earlier checkpoint exists"
    schedule = scheduler.state_dict()
    root = checkpoints_root(output_dir)
    final, tmp = root / f"step_{step}", root / f"step_{step}.tmp"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        # A complete step_N.tmp that list_checkpoints counts goes into its place before leftovers are deleted:
        # never delete the only complete checkpoint.
        for _, path in previous:
            if path.name.endswith(".tmp"):
                os.replace(path, path.with_name(path.name.removesuffix(".tmp")))
                fsync_dir(root)
        for stale in [*root.glob("*.tmp"), *root.glob("*.deleting")]:
            remove_folder(stale)
    accelerator.wait_for_everyone()
    what = f"checkpoint {final.name}"
    error = None
    try:
        accelerator.save_state(str(tmp))
    except Exception as err:  # noqa: BLE001 - decided below, once every process has finished writing
        error = err
    # Every process learns whether any failed, and only then is the partial folder removed: a process that
    # raised alone would pull the folder from under the others still writing their part, and leave them
    # waiting in the next collective. A process that failed and already exited counts as a failure.
    if any_process(accelerator, error is not None, if_peer_gone=True):
        _fail_everywhere(accelerator, error, tmp, what, fallback)
    if accelerator.is_main_process:
        try:
            # The record of what save_state wrote, checked before a resume loads any of it (check_files).
            write_json_durably(tmp / STATE_FILE, {**trainer_state, "step": step, SCHEDULER_KEY: schedule,
                                                  FILES_KEY: record_files(tmp)})
            # The same step saved twice (a signal right after a periodic save): keep the newer copy.
            replace_folder(tmp, final)
            fsync_dir(root)
        except Exception as err:  # noqa: BLE001 - decided below, with the other processes
            error = err
    if any_process(accelerator, error is not None, if_peer_gone=True):
        _fail_everywhere(accelerator, error, tmp, what, fallback)
    if accelerator.is_main_process and save_total_limit:
        for _, old in list_checkpoints(output_dir)[:-save_total_limit]:
            remove_folder(old)
    accelerator.wait_for_everyone()
    return final


def _fail_everywhere(accelerator, error: Exception | None, tmp: Path, what: str, fallback: str):
    """After a failed save: one line on every process (the reason where the write failed), the partial
    folder removed; an exception that is no failure to write is a bug and keeps its traceback."""
    reason = write_failure(error, tmp.parent) if error is not None else None  # probe before freeing space
    if accelerator.is_main_process:
        remove_folder(tmp)
    if error is None:
        raise CorefBertError(f"another process could not write {what}; its error line says why", path=tmp)
    if reason is None:
        raise error
    raise write_error(tmp, what, reason, fallback) from None


_MISMATCH = re.compile(r"Error\(s\) in loading state_dict|size mismatch for|Missing key\(s\)|Unexpected key\(s\)")


def _mismatch_detail(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("size mismatch", "Missing key", "Unexpected key")):
            return line[:160]
    return one_line(text, first_line=True, limit=160)


def load_checkpoint(accelerator, path: str | os.PathLike, fallbacks, scheduler) -> tuple[Path, dict]:
    """Restore everything a checkpoint holds (the LR ``scheduler`` too); returns the folder used and its
    trainer state. Its files are checked first (:func:`corefbert.training.checkpoints.files.check_files`); a
    checkpoint that fails that or will not load (cut short by a power loss, damaged on disk) is skipped for
    the next of ``fallbacks`` (for ``latest``: the earlier checkpoints, newest first) with a warning, and when
    none can be used, one error line. Every process takes part, so all of them agree on the folder."""
    candidates = [Path(path), *map(Path, fallbacks)]
    reasons = []
    for index, candidate in enumerate(candidates):
        error, state = None, None
        try:
            state = read_trainer_state(candidate)
            if not isinstance(state, dict) or FILES_KEY not in state or SCHEDULER_KEY not in state:
                raise UnusableCheckpoint(f"{STATE_FILE} is not this version's trainer state (no record of the "
                                         "checkpoint's files or LR schedule): written by another version")
            rng = check_files(candidate, state, accelerator.process_index)
            accelerator.load_state(str(candidate))
            restore_rng(rng, f"random_states_{accelerator.process_index}.pkl",
                        accelerator.print if accelerator.is_main_process else lambda line: None)
            scheduler.load_state_dict(dict(state[SCHEDULER_KEY]))  # a copy: LambdaLR pops from it
        except CorefBertError:
            raise
        except Exception as err:  # noqa: BLE001 - any file that will not load makes the checkpoint unusable
            error = err
        if not any_process(accelerator, error is not None):
            return candidate, state
        if _MISMATCH.search(str(error)):  # a healthy checkpoint of another model: every earlier one is too
            raise CorefBertError(
                f"the checkpoint does not match the model ({_mismatch_detail(str(error))}); resume with the model "
                "it was trained from, or start a new run in another --output_dir", path=candidate)
        reasons.append(str(error) if isinstance(error, UnusableCheckpoint) else
                       f"{type(error).__name__}: {one_line(error, first_line=True, limit=200)}" if error is not None
                       else "unusable on another process")
        if index + 1 < len(candidates) and accelerator.is_main_process:
            print(f"warning: {candidate}: checkpoint cannot be loaded ({reasons[-1]}); trying "
                  f"{candidates[index + 1]}", file=sys.stderr)
    if len(candidates) == 1:
        raise CorefBertError(f"checkpoint cannot be loaded ({reasons[0]}); resume from an earlier checkpoint or "
                             "delete this one", path=candidates[0])
    raise CorefBertError(f"checkpoint cannot be loaded ({reasons[0]}), nor can the {len(candidates) - 1} earlier "
                         "one(s); delete them, or train from the start without --resume_from_checkpoint",
                         path=candidates[0])
