"""What makes a prepared corpus survive a kill and refuse to load when damaged.

- **Integrity manifest** (``prepare_manifest.json``): every file of a saved folder with its byte size and
  SHA-256 (``hashlib``'s runs at ~1.4 GB/s with CPU SHA extensions, BLAKE2b at ~0.5), written just before the
  folder is renamed into place. :func:`verify_folder` checks the sizes always, the checksums when asked or
  (``auto``) when the folder holds at most :data:`AUTO_CHECKSUM_BYTES`.
- **Chunk cache** (:class:`ChunkCache`): each finished range of documents is saved under
  ``<output_dir>.resume/<fingerprint>/`` with its own manifest; a rerun reuses every chunk that verifies.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

from corefbert.errors import CorefBertError
from corefbert.text.durable import replace_file, replace_folder, writing
from corefbert.text.jsonio import read_json

MANIFEST_FILE = "prepare_manifest.json"
SUMMARY_FILE = "prepare_summary.json"
MANIFEST_FORMAT = 1
VERIFY_MODES = ("auto", "sizes", "checksums")
AUTO_CHECKSUM_BYTES = 2 << 30
VERIFY_ENV = "COREFBERT_VERIFY_CORPUS"
_READ = 1 << 20


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_READ):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: str, skip: tuple[str, ...] = ()) -> dict:
    """Record size and SHA-256 of every file under ``folder`` (but ``skip``) in ``folder/prepare_manifest.json``."""
    files = {}
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for path in (os.path.join(root, name) for name in sorted(names)):
            rel = os.path.relpath(path, folder)
            if rel not in (MANIFEST_FILE, *skip):
                files[rel] = {"bytes": os.path.getsize(path), "sha256": file_sha256(path)}
    manifest = {"format": MANIFEST_FORMAT, "algorithm": "sha256", "files": files}
    replace_file(os.path.join(folder, MANIFEST_FILE), json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def verify_mode(mode: str | None) -> str:
    """``mode``, else ``$COREFBERT_VERIFY_CORPUS``, else ``auto``; anything else is one error line."""
    mode = mode or os.environ.get(VERIFY_ENV) or "auto"
    if mode not in VERIFY_MODES:
        raise CorefBertError(f"corpus verification mode {mode!r} is not one of {', '.join(VERIFY_MODES)} "
                             f"(--verify_corpus or ${VERIFY_ENV})")
    return mode


def verify_folder(folder: str, mode: str | None = None, fix: str = "delete the folder and prepare it again") -> bool:
    """Check ``folder`` against its manifest (``mode``: :func:`verify_mode`); False when it has none, a
    :class:`CorefBertError` ending in ``fix`` on damage."""
    mode = verify_mode(mode)
    manifest_path = os.path.join(folder, MANIFEST_FILE)
    if not os.path.isfile(manifest_path):
        return False
    try:
        files = read_json(manifest_path)["files"]
        expected = {rel: (int(v["bytes"]), str(v["sha256"])) for rel, v in files.items()}
    except (CorefBertError, OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorefBertError(f"integrity manifest unreadable ({type(err).__name__}); {fix}",
                             path=manifest_path) from None
    for rel, (size, _) in expected.items():
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            raise CorefBertError(f"missing (listed in {MANIFEST_FILE}); {fix}", path=path)
        actual = os.path.getsize(path)
        if actual != size:
            state = "truncated" if actual < size else "longer than written"
            raise CorefBertError(f"{state}: {actual} of {size} bytes; {fix}", path=path)
    if mode == "checksums" or (mode == "auto" and sum(s for s, _ in expected.values()) <= AUTO_CHECKSUM_BYTES):
        for rel, (_, checksum) in expected.items():
            path = os.path.join(folder, rel)
            if file_sha256(path) != checksum:
                raise CorefBertError(f"checksum mismatch (SHA-256 differs from {MANIFEST_FILE}, same size); {fix}",
                                     path=path)
    return True


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (so its temporary folders must be left alone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def remove_stale(parent: str, prefix: str) -> None:
    """Delete ``parent/<prefix><pid>`` folders whose process is gone (left behind by a SIGKILL)."""
    if not os.path.isdir(parent):
        return
    for name in os.listdir(parent):
        tail = name[len(prefix):]
        if name.startswith(prefix) and tail.isdigit() and not pid_alive(int(tail)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def chunk_ranges(num_documents: int, documents_per_chunk: int) -> list[tuple[int, int]]:
    """``[start, end)`` document ranges of at most ``documents_per_chunk``; one empty range for no documents."""
    if num_documents == 0:
        return [(0, 0)]
    return [(s, min(s + documents_per_chunk, num_documents)) for s in range(0, num_documents, documents_per_chunk)]


class ChunkCache:
    """Finished chunks of one preparation, under ``root/<fingerprint>/<split>-<start>-<end>/``: the packed
    rows, ``stats.json`` and a manifest, put in place whole (:func:`replace_folder`). A chunk that fails
    verification is deleted and redone."""

    STATS = "stats.json"

    def __init__(self, root: str, fingerprint: str, fresh: bool = False):
        self.root = root
        self.folder = os.path.join(root, fingerprint)
        if os.path.isdir(root):
            for name in os.listdir(root):  # other fingerprints: stale settings, never reusable
                if name != fingerprint:
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        if fresh:
            shutil.rmtree(self.folder, ignore_errors=True)
        os.makedirs(self.folder, exist_ok=True)
        for name in os.listdir(self.folder):
            stem, _, pid = name.rpartition(".tmp-")
            if stem and pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(os.path.join(self.folder, name), ignore_errors=True)
        self.reused = self.redone = 0

    def path(self, split: str, start: int, end: int) -> str:
        return os.path.join(self.folder, f"{split}-{start:010d}-{end:010d}")

    def finished(self) -> int:
        """How many chunk folders a previous run left (before verification)."""
        return sum(".tmp-" not in name for name in os.listdir(self.folder))

    def load(self, split: str, start: int, end: int):
        """``(rows, stats)`` of a finished, intact chunk, else None (a damaged one is removed and reported)."""
        import datasets

        path = self.path(split, start, end)
        if not os.path.isdir(path):
            return None
        try:
            if not verify_folder(path, "checksums"):
                raise CorefBertError("no manifest", path=path)
            rows = datasets.load_from_disk(path)
            stats = read_json(os.path.join(path, self.STATS))
        except (CorefBertError, OSError, ValueError) as err:
            print(f"warning: finished chunk damaged, preparing it again ({err})", file=sys.stderr)
            shutil.rmtree(path, ignore_errors=True)
            self.redone += 1
            return None
        self.reused += 1
        return rows, stats

    def save(self, split: str, start: int, end: int, rows, stats: dict):
        """Write one chunk atomically and return it loaded from its final place, as :meth:`load` would."""
        import datasets

        path = self.path(split, start, end)
        tmp = f"{path}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        quiet = datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # one "Saving" bar per chunk would bury the tagging progress
        with writing(tmp, f"chunk {os.path.basename(path)} of the prepared corpus", "the finished chunks are kept",
                     then="rerun the same command (it reuses them)"):
            try:
                rows.save_to_disk(tmp, num_shards=1)
            finally:
                if not quiet:
                    datasets.enable_progress_bars()
            replace_file(os.path.join(tmp, self.STATS), json.dumps(stats))
            write_manifest(tmp)
            replace_folder(tmp, path)
        return datasets.load_from_disk(path), stats

    def clear(self) -> None:
        """Remove the whole chunk cache (after the corpus it built is in place)."""
        shutil.rmtree(self.root, ignore_errors=True)


def load_verified(folder: str, mode: str | None = None, fix: str = "delete the folder and prepare it again"):
    """``datasets.load_from_disk(folder)`` after :func:`verify_folder`; damage, or a folder without a
    manifest, is one error line ending in ``fix``."""
    import datasets
    import pyarrow

    if not os.path.isdir(folder):
        raise CorefBertError("no such folder; pass the folder a corpus was prepared into (--output_dir of "
                             "pretrain/prepare_corpus.py)", path=folder)
    if not verify_folder(folder, mode, fix):
        raise CorefBertError(f"no {MANIFEST_FILE}: not a corpus prepared by this version of corefbert; {fix}",
                             path=folder)
    try:
        return datasets.load_from_disk(folder)
    except (ValueError, OSError, pyarrow.ArrowException) as err:
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        raise CorefBertError(f"cannot load the saved corpus ({reason}); {fix}", path=folder) from None


def why_validation_is_empty(stats: dict, settings: dict) -> str:
    """Why a prepared corpus has no validation sequence, from its summary's ``splits`` and ``settings``."""
    val_docs = stats.get("validation", {}).get("documents", 0)
    if val_docs:
        return f"its {val_docs} document(s) gave no sequence (no words); give validation text with words"
    if settings.get("validation_file"):
        return "--validation_file holds no usable document; check that file"
    percentage = settings.get("validation_split_percentage", 0)
    if not percentage:
        return "--validation_split_percentage is 0 and no --validation_file was given"
    train_docs = stats.get("train", {}).get("documents", 0)
    tokens = stats.get("train", {}).get("tokens", 0)
    return (f"the corpus has only {train_docs} document(s) ({tokens:,} tokens) and validation takes whole "
            f"documents (the first {percentage}%, at least one of two or more); separate the documents (blank "
            "lines, WikiText ' = Title = ' lines, <doc> tags) or pass --validation_file")


def read_summary(folder: str) -> dict | None:
    """The ``prepare_summary.json`` of the prepared corpus ``folder`` (its one reader); None without one."""
    path = os.path.join(folder, SUMMARY_FILE)
    if not os.path.isfile(path):
        return None
    summary = read_json(path)
    if not isinstance(summary, dict):
        raise CorefBertError(f"not a corpus summary (a JSON {type(summary).__name__}); prepare the corpus again",
                             path=path)
    return summary


def summary_of(rows) -> dict | None:
    """The summary (:func:`read_summary`) of the prepared corpus a loaded split's Arrow files come from, if any."""
    for item in getattr(rows, "cache_files", None) or []:
        return read_summary(os.path.dirname(os.path.dirname(item["filename"])))
    return None


