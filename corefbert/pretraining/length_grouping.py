"""Batches of rows of similar length, so that a batch padded to its longest row wastes little.

Packed rows are almost all full; the ~10% that ``short_seq_prob`` shortens would each cost a full row of
compute in a batch of full rows. :class:`LengthGroupedSampler` cuts a seeded permutation per epoch into
mega-batches of 50 batches, sorts each by length and shuffles its batches (Hugging Face's ``group_by_length``,
fairseq's length bucketing). The order depends only on (seed, epoch), so a resumed epoch replays it and seeded
masks (:class:`corefbert.pretraining.data.SeededCollate`) stay the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import Sampler

from corefbert.argparser import parse_args
from corefbert.corpus.cache import load_verified
from corefbert.errors import cli_entry

MEGABATCH_BATCHES = 50


class LengthGroupedSampler(Sampler[int]):
    """Row indices in length-grouped order for batches of ``batch_size`` (``lengths``: ``[N]`` tokens per
    row); ``set_epoch`` reshuffles. A DataLoader of that ``batch_size`` (``drop_last``) cuts those batches."""

    def __init__(self, lengths, batch_size: int, seed: int = 0):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        return iter(grouped_order(self.lengths, self.batch_size, self.seed, self.epoch).tolist())


def grouped_order(lengths: np.ndarray, batch_size: int, seed: int, epoch: int) -> np.ndarray:
    """``[N]`` indices: a permutation seeded by ``(seed, epoch)``, length-sorted within mega-batches of
    ``MEGABATCH_BATCHES`` batches, whole batches shuffled within each mega-batch."""
    generator = torch.Generator().manual_seed(int(seed) * 100_003 + int(epoch))
    order = torch.randperm(len(lengths), generator=generator).numpy()
    size = MEGABATCH_BATCHES * batch_size
    out = []
    for start in range(0, len(order), size):
        mega = order[start:start + size]
        mega = mega[np.argsort(-lengths[mega], kind="stable")]  # longest first
        batches = [mega[i:i + batch_size] for i in range(0, len(mega), batch_size)]
        full = [b for b in batches if len(b) == batch_size]
        shuffled = torch.randperm(len(full), generator=generator).tolist()
        # A partial batch (the corpus' last rows) stays last, where drop_last discards it.
        out.extend([full[i] for i in shuffled] + [b for b in batches if len(b) < batch_size])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def row_lengths(rows) -> np.ndarray:
    """``[N]`` tokens per row of a ``datasets.Dataset`` of packed rows, read by Arrow (no row is decoded)."""
    import pyarrow.compute as pc

    column = rows.data.column("input_ids")
    return np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def computed_slot_fill(lengths: np.ndarray, batch_size: int, order: np.ndarray, multiple: int = 8) -> float:
    """Share of the slots a run computes that hold text, for batches cut from ``order`` (whole batches only),
    each padded to its longest row rounded up to ``multiple``."""
    batches = order[:len(order) // batch_size * batch_size].reshape(-1, batch_size)  # [batches, batch_size]
    padded = np.ceil(lengths[batches].max(axis=1) / multiple) * multiple * batch_size
    return float(lengths[batches].sum() / padded.sum())


@dataclass
class SlotFillArguments:
    """The computed-slot fill of a prepared corpus' train rows with length-grouped batches and with uniformly
    random ones."""

    dataset_dir: str = field(metadata={"help": "a corpus folder written by prepare (also the first word)"})
    batch_size: int = field(default=32, metadata={"help": "rows per batch"})
    seed: int = field(default=0, metadata={"help": "seed of both orders"})


@cli_entry
def main(argv: list[str] | None = None) -> None:
    """``corefbert slot-fill DATASET_DIR [--batch_size 32]``: see :class:`SlotFillArguments`."""
    (args,) = parse_args([SlotFillArguments], argv, prog=None, positionals=("dataset_dir",),
                         usage="%(prog)s [-h] DATASET_DIR [--batch_size 32] [--seed 0] [--config FILE]",
                         description=SlotFillArguments.__doc__)
    lengths = row_lengths(load_verified(args.dataset_dir, fix="pass a folder written by corefbert prepare")["train"])
    grouped = computed_slot_fill(lengths, args.batch_size, grouped_order(lengths, args.batch_size, args.seed, 0))
    uniform = computed_slot_fill(lengths, args.batch_size, np.random.default_rng(args.seed).permutation(len(lengths)))
    print(f"{len(lengths)} rows, batch {args.batch_size}: text in {100 * grouped:.1f}% of the computed slots with "
          f"length-grouped batches, {100 * uniform:.1f}% with random ones")


if __name__ == "__main__":
    main()
