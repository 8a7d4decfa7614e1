"""``log.jsonl``, the event log of a training run (one JSON object a line): its one writer (:class:`RunLog`)
and its one reader (:func:`read_log`). A run killed in the middle of an append leaves its last line cut short:
the reader leaves that line out, and the resume rewrites the log without it (:func:`truncate_log`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from corefbert.errors import CorefBertError
from corefbert.text.durable import append_file, os_error_reason, replace_file
from corefbert.text.jsonio import json_safe, parse_json
from corefbert.training.checkpoints.folders import list_checkpoints
from corefbert.training.checkpoints.signals import any_process

LOG_FILE = "log.jsonl"


def log_path(output_dir: str | os.PathLike) -> Path:
    """The log of the run in ``output_dir``."""
    return Path(output_dir) / LOG_FILE


class RunLog:
    """``log.jsonl`` of a run (main process; each record with a wall-clock ``time``). A failed append stops
    every process with one line naming the intact checkpoint: every process calls :meth:`log` alike."""

    def __init__(self, output_dir: str | os.PathLike, accelerator):
        self.output_dir, self.accelerator = Path(output_dir), accelerator
        self.path = str(log_path(self.output_dir))

    def log(self, record: dict) -> None:
        error = None
        if self.accelerator.is_main_process:
            try:
                with append_file(self.path) as handle:
                    handle.write(json.dumps({"time": round(time.time(), 3), **json_safe(record)}) + "\n")
            except OSError as err:
                error = err
        if any_process(self.accelerator, error is not None, if_peer_gone=True):
            found = list_checkpoints(self.output_dir)
            intact = f"the last complete checkpoint is {found[-1][1]}" if found else "no checkpoint was written yet"
            reason = os_error_reason(error) if error is not None else "failed on the main process"
            raise CorefBertError(f"could not append to the log ({reason}); {intact}. Free space or choose another "
                                 "--output_dir, then rerun with --resume_from_checkpoint latest", path=self.path)


def read_log(path: str | os.PathLike) -> list[dict]:
    """The records of the run log ``path``, in order. Its last line, when cut short (a run killed while it
    appended), is left out; any other line that is not a JSON object is one ``CorefBertError`` line."""
    path = Path(path)
    if not path.is_file():
        raise CorefBertError("log file not found; pass the log.jsonl of a run's --output_dir", path=path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise CorefBertError(f"cannot read the log ({os_error_reason(err)})", path=path) from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_json(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif number < len(lines):  # the last line may be the torn end of a killed run's append
            raise CorefBertError("not a record of a run's log (one JSON object per line); is this a log.jsonl?",
                                 path=path, position=number)
    return records


def truncate_log(path: str | os.PathLike, step: int, evaluated: bool = True) -> None:
    """After a resume from ``step``, drop the records the killed run wrote past it (every step is logged once)
    and a torn last line; ``evaluated=False``: also those of ``step``'s evaluation (the resume repeats it)."""
    if not Path(path).is_file():
        return
    kept = [record for record in read_log(path)
            if record.get("step", 0) < step or (record.get("step", 0) == step and (
                evaluated or record.get("split") in ("train", "resume", "signal")))]
    # Rewritten beside and renamed: a kill right after a resume must not cost the log of the whole run.
    replace_file(path, "".join(json.dumps(record) + "\n" for record in kept))
