"""The packed-row schema (docs/contracts.md) and what builds it: the columns, a ``list<int32>`` column built
row by row, the numbering of a row's usable mention groups and the adding of one row. Shared by both packing
passes."""

from __future__ import annotations

import array

import numpy as np

COLUMNS = ("input_ids", "word_ids", "mention_starts", "mention_ends", "mention_groups")


class ListColumn:
    """One ``list<int32>`` column built row by row: a flat int32 buffer and the row ends (a Python list costs
    ~40 bytes per token: ~20 MB per MB of a long document's text)."""

    def __init__(self):
        self.values = array.array("i")
        self.ends = array.array("q", [0])

    def append(self, *parts: np.ndarray) -> None:
        """Add one row, the concatenation of ``parts``."""
        for part in parts:
            self.values.frombytes(np.ascontiguousarray(part, dtype=np.int32).tobytes())
        self.ends.append(len(self.values))

    def __len__(self) -> int:
        return len(self.ends) - 1

    def arrow(self):
        import pyarrow as pa

        offsets = np.frombuffer(self.ends, dtype=np.int64).astype(np.int32)  # [rows + 1]; far below 2**31 ids
        return pa.ListArray.from_arrays(offsets, np.frombuffer(self.values, dtype=np.int32))


def new_columns() -> dict[str, ListColumn]:
    return {name: ListColumn() for name in COLUMNS}


def rows_table(rows: dict[str, ListColumn]):
    """The packed rows as a ``pyarrow.Table`` of ``list<int32>`` columns (what ``datasets.map`` writes as is)."""
    import pyarrow as pa

    return pa.Table.from_arrays([rows[name].arrow() for name in COLUMNS], names=list(COLUMNS))


def usable_groups(keys: np.ndarray) -> np.ndarray:
    """Per mention, its group id in the row, or -1. ``keys``: ``[N]`` or ``[N, k]`` group keys in row order (a
    surface form, or (document, surface form)). A key with two or more mentions is a usable group (paper: only
    groups with >= 2 mentions in the sequence), numbered 0.. by first appearance."""
    if keys.shape[0] == 0:
        return np.zeros(0, dtype=np.int32)
    _, first_seen, inverse, counts = np.unique(keys, axis=0, return_index=True, return_inverse=True,
                                               return_counts=True)
    inverse = inverse.reshape(-1)
    usable = counts >= 2
    number = np.full(counts.size, -1, dtype=np.int32)
    number[np.flatnonzero(usable)[np.argsort(first_seen[usable])]] = np.arange(int(usable.sum()), dtype=np.int32)
    return number[inverse]


def append_row(rows: dict[str, ListColumn], stats: dict, id_parts, word_ids, starts, ends, keys,
               documents: int = 1) -> None:
    """Add one row to ``rows`` and count it in ``stats``: the ids ``id_parts`` concatenated, ``word_ids``, and
    of the mentions (first/last token ``starts``/``ends`` ``[N]``, group ``keys``) those of a usable group."""
    groups = usable_groups(keys)
    kept = groups >= 0
    rows["input_ids"].append(*id_parts)
    rows["word_ids"].append(word_ids)
    rows["mention_starts"].append(starts[kept])
    rows["mention_ends"].append(ends[kept])
    rows["mention_groups"].append(groups[kept])
    n_groups = int(groups.max()) + 1 if kept.any() else 0
    stats["sequences"] += 1
    stats["tokens"] += sum(len(part) for part in id_parts)
    stats["mentions"] += int(kept.sum())
    stats["groups"] += n_groups
    stats["sequences_with_groups"] += int(n_groups > 0)
    stats["documents_per_sequence"] += documents
