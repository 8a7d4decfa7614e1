"""Several documents per row (``--packing documents``): the second pass of corpus preparation.

The first pass (:class:`corefbert.corpus.packing.SequencePacker`) turns each document into one *document row*
(no special tokens, word ids over the document, every noun mention with a document-wide surface id); this pass
cuts them, in corpus order, into rows in the spirit of RoBERTa's FULL-SENTENCES: whole words, each document's
text contiguous, the ``sep_token`` (word id -1) between two documents, a row closed only when the next word
does not fit (~99% of the slots filled, where one document per row filled 48% on Wikipedia). A mention group
is keyed by (document, surface form); attention crosses documents, as in RoBERTa.

``short_seq_prob`` keeps its meaning (a row's target is a uniform draw in ``[2, budget]`` with that
probability, BERT's ``randint(2, max_num_tokens)``); the draws come from one generator seeded by
``(seed, split)`` over a sequential walk, so the rows do not depend on ``num_proc``, chunking or batching.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from corefbert.corpus.packed_rows import COLUMNS, append_row, new_columns, rows_table

SPLIT_CODES = {"train": 0, "validation": 1}


class DocumentRowPacker:
    """Cut a stream of document rows into training rows: :meth:`add` one document row at a time, then
    :meth:`finish`; :meth:`take` gives the finished rows, ``stats`` the counts. ``prefix``/``suffix``: the ids
    framing a sequence (``[CLS]`` / ``[SEP]``); ``sep_id``: the id between two documents."""

    def __init__(self, prefix: list[int], suffix: list[int], sep_id: int, max_seq_length: int,
                 short_seq_prob: float, seed: int, split: str = "train"):
        self.prefix, self.suffix = (np.asarray(ids, dtype=np.int32) for ids in (prefix, suffix))
        self.sep_id, self.short_seq_prob = int(sep_id), short_seq_prob
        self.budget = max_seq_length - len(prefix) - len(suffix)
        self.rng = np.random.default_rng([seed, SPLIT_CODES.get(split, 2)])
        self.stats = {"sequences": 0, "tokens": 0, "mentions": 0, "groups": 0, "sequences_with_groups": 0,
                      "words_longer_than_sequence": 0, "documents_per_sequence": 0}
        self._out = new_columns()
        self._parts: list[tuple] = []  # the open row: (document number, ids, word_ids, starts, ends, groups)
        self._used = 0  # text tokens of the open row, separators included
        self._documents = 0
        self._target = self._draw_target()

    def _draw_target(self) -> int:
        if self.rng.random() < self.short_seq_prob:
            return int(self.rng.integers(2, self.budget + 1))
        return self.budget

    def add(self, input_ids, word_ids, mention_starts, mention_ends, mention_groups) -> None:
        """One document row: ``input_ids``/``word_ids`` ``[T]`` (word ids 0.. over the document, no special
        token), mentions ``[N]`` (first/last token of a one-word mention, document-wide group id)."""
        ids = np.asarray(input_ids, dtype=np.int32)
        words = np.asarray(word_ids, dtype=np.int64)
        if ids.size == 0:
            return
        number = self._documents
        self._documents += 1
        mentions = (np.asarray(mention_starts, dtype=np.int64), np.asarray(mention_ends, dtype=np.int64),
                    np.asarray(mention_groups, dtype=np.int64))
        starts = np.flatnonzero(np.r_[True, words[1:] != words[:-1]])  # [U] first token of each word
        ends = np.r_[starts[1:], ids.size]  # [U] exclusive
        too_long = (ends - starts) > self.budget
        word, num_words = 0, starts.size
        while word < num_words:
            if too_long[word]:
                # Dropped, and the text around it is not contiguous: no row spans it (as with one document per row).
                self.stats["words_longer_than_sequence"] += 1
                if self._parts and self._parts[-1][0] == number:
                    self._close_row()
                word += 1
                continue
            sep = 1 if self._parts else 0
            room = self._target - self._used - sep
            end = int(np.searchsorted(ends, starts[word] + room, side="right"))
            stop = word + int(np.argmax(too_long[word:])) if too_long[word:].any() else num_words
            end = min(end, stop)
            if end <= word:
                if self._parts:  # the row is as full as whole words allow: close it, retry in a fresh one
                    self._close_row()
                    continue
                end = word + 1  # a first word longer than a short target stays (as with one document per row)
            t0, t1 = starts[word], ends[end - 1]  # the part's tokens [t0, t1) and the mentions inside them
            inside = (mentions[0] >= t0) & (mentions[1] < t1)
            self._parts.append((number, ids[t0:t1], words[t0:t1], *(m[inside] for m in mentions), t0))
            self._used += sep + int(t1 - t0)
            word = end
            if self._used >= self._target:
                self._close_row()

    def finish(self) -> None:
        """Close the last, partly filled row."""
        if self._parts:
            self._close_row()

    def _close_row(self) -> None:
        n_pre = len(self.prefix)
        ids_parts, word_parts, m_starts, m_ends, m_keys = [self.prefix], [np.full(n_pre, -1, np.int64)], [], [], []
        position, next_word = n_pre, 0
        for k, (doc, ids, words, starts, ends, groups, first_token) in enumerate(self._parts):
            if k:  # the separator between two documents: a special token, word id -1
                ids_parts.append(np.asarray([self.sep_id], dtype=np.int32))
                word_parts.append(np.asarray([-1], dtype=np.int64))
                position += 1
            local = words - words[0] + next_word  # a part's words are consecutive: renumber 0.. over the row
            next_word = int(local[-1]) + 1
            ids_parts.append(ids)
            word_parts.append(local)
            m_starts.append(starts - first_token + position)
            m_ends.append(ends - first_token + position)
            m_keys.append(np.stack([np.full(groups.size, doc, np.int64), groups], axis=1))  # (document, surface)
            position += ids.size
        ids_parts.append(self.suffix)
        word_parts.append(np.full(len(self.suffix), -1, np.int64))
        documents = len({part[0] for part in self._parts})
        append_row(self._out, self.stats, ids_parts, np.concatenate(word_parts), np.concatenate(m_starts),
                   np.concatenate(m_ends), np.concatenate(m_keys), documents)
        self._parts, self._used = [], 0
        self._target = self._draw_target()

    def pending_rows(self) -> int:
        return len(self._out["input_ids"])

    def take(self):
        """The finished rows so far as a ``pyarrow.Table`` (``list<int32>`` columns); they leave the packer."""
        table = rows_table(self._out)
        self._out = new_columns()
        return table


def pack_document_rows(batches: Iterable[dict], packer: DocumentRowPacker, rows_per_table: int = 4096
                       ) -> Iterator:
    """Feed ``batches`` of document rows (dicts of column lists or arrays, in corpus order) to ``packer``;
    yield the training rows as ``pyarrow.Table`` parts of about ``rows_per_table`` rows (bounded memory)."""
    for batch in batches:
        for values in zip(*(batch[name] for name in COLUMNS)):
            packer.add(*values)
            if packer.pending_rows() >= rows_per_table:
                yield packer.take()
    packer.finish()
    if packer.pending_rows():
        yield packer.take()
