"""Data side of the pretraining loop: the prepared corpus, and masking that is a pure function of the batch.

Dynamic masking draws random numbers. If those came from a stream shared across batches, a resumed run
(or a run on a different number of processes) would mask differently from an uninterrupted one. Here each
batch is masked by a generator seeded from ``(seed, epoch, the batch's row indices)``, and data loading
never draws from the global RNG, so dropout draws do not depend on it either.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, Dataset

from corefbert.corpus.packed_rows import COLUMNS as CORPUS_COLUMNS
from corefbert.corpus.prepare import prepare_corpus
from corefbert.errors import CorefBertError

ROW_KEY = "__row__"
#: Batches each loader worker keeps collated ahead of the step (torch's default is 2).
PREFETCH_BATCHES = 4


def load_prepared_corpus(dataset_dir: str, verify: str | None = None):
    """An already prepared corpus (``DatasetDict`` with train and validation) from ``save_to_disk``, its
    files checked against its manifest (:func:`corefbert.corpus.cache.load_verified`): a truncated or altered
    file is one error line. ``dataset_dir`` may also name a shard set (a folder of shard folders, or a glob
    over them): each shard is checked so, then the set (:mod:`corefbert.corpus.shards`), then concatenated."""
    from corefbert.corpus.cache import load_verified
    from corefbert.corpus.shards import load_shard_set, shard_folders

    shards = shard_folders(dataset_dir)  # a glob or a folder of shard folders: one corpus from N machines
    if shards is not None:
        return load_shard_set(shards, lambda folder: load_prepared_corpus(folder, verify))
    if not os.path.isdir(dataset_dir):
        raise CorefBertError("prepared corpus folder not found; check --dataset_dir", path=dataset_dir)
    if not any(os.path.isfile(os.path.join(dataset_dir, name)) for name in ("dataset_dict.json", "state.json")):
        raise CorefBertError("not a saved datasets corpus (no dataset_dict.json or state.json); prepare one "
                             "with the corpus flags", path=dataset_dir)
    fix = f"prepare it again (prepare_corpus.py with the same flags and --overwrite_cache, or delete {dataset_dir})"
    return load_verified(dataset_dir, verify, fix)


def check_corpus(splits, where: str):
    """Both splits present, non-empty, with the packed-sequence columns of docs/contracts.md."""
    for split in ("train", "validation"):
        if split not in splits:
            raise CorefBertError(f"the corpus has no {split!r} split; re-prepare it", path=where)
        missing = [c for c in CORPUS_COLUMNS if c not in splits[split].column_names]
        if missing:
            raise CorefBertError(f"the {split} split lacks column(s) {', '.join(missing)}; re-prepare it "
                                 "with this version", path=where)
        if len(splits[split]) == 0:
            raise CorefBertError(f"the {split} split is empty{_why_empty(splits, split) or '; give more text'}",
                                 path=where)
    return {split: splits[split].select_columns(list(CORPUS_COLUMNS)) for split in ("train", "validation")}


def load_or_prepare_corpus(dataset_dir: str | None, prepare_args, tokenizer, model_config=None):
    """The checked ``{"train", "validation"}`` rows a pretraining run (or an ablation study) trains on, and
    where they came from (for messages): ``dataset_dir`` (checked with ``prepare_args.verify_corpus``), else
    the corpus ``prepare_args`` name, prepared once and cached by fingerprint. With ``model_config`` the rows
    are also checked against the model (:func:`check_corpus_tokenizer`)."""
    where = dataset_dir or "corpus"
    if dataset_dir:
        splits = load_prepared_corpus(dataset_dir, verify=getattr(prepare_args, "verify_corpus", None))
    else:
        splits = prepare_corpus(prepare_args, tokenizer=tokenizer)
    splits = check_corpus(splits, where)
    if model_config is not None:
        check_corpus_tokenizer(splits, tokenizer, model_config, where)
    return splits, where


def check_corpus_tokenizer(splits_or_dir, tokenizer, model_config, where: object = None) -> None:
    """Refuse, in one line, a corpus (``DatasetDict``, ``{split: Dataset}`` or its folder) whose token ids do
    not belong to the model of ``model_config`` (a ``PretrainedConfig`` or its dict). Checks, in order: the
    tokenizer recorded in the corpus' ``prepare_summary.json`` (when there is one) against ``tokenizer``;
    every token id below ``vocab_size`` (else an ``IndexError`` deep in the embedding); every sequence within
    the model's positions."""
    from corefbert.corpus.cache import read_summary, summary_of
    from corefbert.corpus.packing import tokenizer_identity
    from corefbert.text.positions import max_positions

    config = model_config if isinstance(model_config, dict) else model_config.to_dict()
    if isinstance(splits_or_dir, (str, os.PathLike)):
        where = where or splits_or_dir
        splits = load_prepared_corpus(str(splits_or_dir))
        summary = read_summary(str(splits_or_dir))
    else:
        splits = splits_or_dir
        summary = next((summary_of(rows) for rows in splits.values() if summary_of(rows)), None)
    where = where or "corpus"
    recorded = (summary or {}).get("tokenizer")
    if recorded:
        mine = tokenizer_identity(tokenizer)
        differs = [key for key in ("vocab_size", "vocab_sha256", "special_token_ids", "frame")
                   if json.dumps(recorded.get(key)) != json.dumps(mine[key])]
        if differs:
            raise CorefBertError(
                f"the corpus was prepared with another tokenizer than the model's ({', '.join(differs)} differ): "
                f"corpus {_describe(recorded)}, model {_describe(mine)}; prepare the corpus again with the model's "
                "tokenizer (--model_name_or_path of this run)", path=where)
    vocab_size, positions = config.get("vocab_size"), max_positions(config)
    for name, rows in splits.items():
        top_id, longest = _max_id_and_length(rows)
        if isinstance(vocab_size, int) and top_id >= vocab_size:
            raise CorefBertError(
                f"the {name} split holds token id {top_id}, outside the model's vocabulary of {vocab_size} "
                f"({config.get('model_type')}): the corpus was prepared with another tokenizer; prepare it again "
                "with the model's tokenizer", path=where)
        if positions is not None and longest > positions:
            raise CorefBertError(
                f"the {name} split holds sequences of {longest} tokens, more than the {positions} positions of the "
                f"model ({config.get('model_type')}); prepare it again with --max_seq_length {positions}", path=where)


def _describe(identity: dict) -> str:
    special = {k: v for k, v in (identity.get("special_token_ids") or {}).items() if v is not None}
    name = " ".join(str(part) for part in (identity.get("class"), identity.get("name_or_path")) if part)
    return (f"{name} ({identity.get('vocab_size')} entries, vocabulary hash {str(identity.get('vocab_sha256'))[:12]}, "
            f"special ids {special})")


def _max_id_and_length(rows) -> tuple[int, int]:
    """Largest token id and longest ``input_ids`` row, computed by Arrow over the (memory-mapped) table."""
    import pyarrow.compute as pc

    column = rows.data.column("input_ids")  # pyarrow ChunkedArray of list<int32>
    if len(column) == 0:
        return -1, 0
    top = pc.max(pc.list_flatten(column)).as_py()
    longest = pc.max(pc.list_value_length(column)).as_py()
    return (-1 if top is None else int(top)), int(longest or 0)


def _why_empty(splits, split: str) -> str:
    """``: <reason>`` for an empty validation split when the corpus' prepare summary tells it, else ``""``."""
    from corefbert.corpus.cache import summary_of, why_validation_is_empty

    summary = summary_of(splits["train"]) if split == "validation" else None
    if not summary or "splits" not in summary:
        return ""
    return ": " + why_validation_is_empty(summary["splits"], summary.get("settings", {}))


class IndexedRows(Dataset):
    """A ``datasets.Dataset`` whose rows carry their index, so masking can be seeded by it; rows come out as
    numpy arrays sliced straight from the Arrow columns (no per-token Python objects)."""

    def __init__(self, rows):
        self.rows = rows
        self._arrow = rows.with_format("arrow")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[dict]:
        table = self._arrow[[int(i) for i in indices]]  # pyarrow Table of these rows, in this order
        out = [{ROW_KEY: int(i)} for i in indices]
        for name in table.column_names:
            column = table.column(name).combine_chunks()
            if not pa.types.is_list(column.type):  # not a token column of the schema: as Python values
                for row, value in zip(out, column.to_pylist()):
                    row[name] = value
                continue
            # list<int>: one values array and an offset per row (offsets index the unsliced values)
            values, offsets = column.values.to_numpy(zero_copy_only=False), column.offsets.to_numpy()
            for n, row in enumerate(out):
                row[name] = values[offsets[n]:offsets[n + 1]]
        return out


def batch_seed(*parts) -> int:
    """A 63-bit seed that is a stable function of ``parts`` (``hash()`` is salted per process)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


#: How ``epoch="eval"`` is stored in :class:`SeededCollate`'s shared epoch.
_EVAL_EPOCH = -1


class SeededCollate:
    """Wrap the MRP collator so each batch's masks depend only on (seed, epoch, row indices), not on
    resumption, process count or worker. ``epoch="eval"``: every evaluation scores the same masked positions.
    The epoch lives in shared memory: persistent workers read the one the training process set."""

    def __init__(self, collator, seed: int):
        self.collator = collator
        self.seed = seed
        self._shared_epoch = torch.zeros(1, dtype=torch.int64).share_memory_()  # [1]
        self._epoch_view = self._shared_epoch.numpy()
        self.epoch = 0

    @property
    def epoch(self) -> int | str:
        value = int(self._epoch_view[0])
        return "eval" if value == _EVAL_EPOCH else value

    @epoch.setter
    def epoch(self, value: int | str) -> None:
        self._epoch_view[0] = _EVAL_EPOCH if value == "eval" else int(value)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_epoch_view"]  # a worker started by spawn gets the shared tensor and views it again
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._epoch_view = self._shared_epoch.numpy()

    def __call__(self, features: list[dict]) -> dict:
        rows = tuple(sorted(f[ROW_KEY] for f in features))
        features = [{k: v for k, v in f.items() if k != ROW_KEY} for f in features]
        seed = batch_seed(self.seed, self.epoch, rows)
        # The collator's own stream is keyed by a call counter and the DataLoader worker; a generator keyed
        # by the batch alone makes the masks independent of both.
        return self.collator(features, generator=np.random.default_rng(seed))


def pretraining_dataloader(rows, collate: SeededCollate, batch_size: int, *, train: bool,
                           num_workers: int = 0, group_by_length: bool = False, seed: int = 0,
                           pin_memory: bool | None = None) -> DataLoader:
    """The trainer's DataLoader over ``rows`` (a ``datasets.Dataset`` of packed sequences).

    ``train``: shuffled (accelerate swaps in its seedable sampler on ``prepare``), whole batches only, or
    with ``group_by_length`` rows of similar length (:mod:`corefbert.pretraining.length_grouping`); otherwise
    in order. A training loader's workers are persistent (they read ``collate.epoch`` from shared memory) and
    keep :data:`PREFETCH_BATCHES` batches each in flight. ``pin_memory`` (default: when CUDA is available):
    pinned batches, whose copies to the GPU do not block the training thread.
    """
    from corefbert.pretraining.length_grouping import LengthGroupedSampler, row_lengths

    sampler = LengthGroupedSampler(row_lengths(rows), batch_size, seed) if train and group_by_length else None
    return DataLoader(
        IndexedRows(rows), batch_size=batch_size, shuffle=train and sampler is None, sampler=sampler,
        drop_last=train, collate_fn=collate, num_workers=num_workers,
        persistent_workers=train and num_workers > 0, prefetch_factor=PREFETCH_BATCHES if num_workers else None,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
    )
