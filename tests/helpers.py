"""What every test and benchmark shares: paths computed once here (so a test's folder depth never matters) and
the builders of test data, e.g. synthetic packed corpora in the docs/contracts.md schema, so trainer tests need
neither spaCy nor text.

Tests import them as ``from helpers import ROOT`` (pytest puts this folder on ``sys.path`` for the rootdir
conftest); benchmarks put ``tests/`` on ``sys.path`` first. pytest fixtures stay in ``conftest.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]  # the repository
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data"  # the real benchmark data, when present


def synthetic_rows(tokenizer, n_rows: int, seed: int, min_words: int = 10, max_words: int = 20) -> dict:
    """Rows of ``[CLS] words [SEP]``: words of 1-2 subwords, some repeated so every row has mention groups."""
    rng = np.random.default_rng(seed)
    special = set(tokenizer.all_special_ids)
    vocab = np.array([i for i in range(len(tokenizer)) if i not in special])
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    columns = {k: [] for k in ("input_ids", "word_ids", "mention_starts", "mention_ends", "mention_groups")}
    for _ in range(n_rows):
        n_words = int(rng.integers(min_words, max_words + 1))
        nouns = [tuple(rng.choice(vocab, size=int(rng.integers(1, 3)))) for _ in range(3)]
        words, noun_of_word = [], []
        for _ in range(n_words):
            if rng.random() < 0.4:
                k = int(rng.integers(len(nouns)))
                words.append(nouns[k])
                noun_of_word.append(k)
            else:
                words.append(tuple(rng.choice(vocab, size=int(rng.integers(1, 3)))))
                noun_of_word.append(-1)
        ids, word_ids, spans = [cls_id], [-1], []
        for w, word in enumerate(words):
            spans.append((len(ids), len(ids) + len(word) - 1))
            ids.extend(int(t) for t in word)
            word_ids.extend([w] * len(word))
        ids.append(sep_id)
        word_ids.append(-1)
        counts = {k: noun_of_word.count(k) for k in set(noun_of_word) if k >= 0}
        usable = sorted(k for k, c in counts.items() if c >= 2)
        group_of = {k: g for g, k in enumerate(usable)}
        starts, ends, groups = [], [], []
        for w, k in enumerate(noun_of_word):
            if k in group_of:
                starts.append(spans[w][0])
                ends.append(spans[w][1])
                groups.append(group_of[k])
        for key, value in zip(columns, (ids, word_ids, starts, ends, groups)):
            columns[key].append(value)
    return columns


def synthetic_corpus(tokenizer, n_train: int = 48, n_eval: int = 16, seed: int = 0):
    """A DatasetDict with train/validation splits of :func:`synthetic_rows`."""
    import datasets

    return datasets.DatasetDict({
        "train": datasets.Dataset.from_dict(synthetic_rows(tokenizer, n_train, seed)),
        "validation": datasets.Dataset.from_dict(synthetic_rows(tokenizer, n_eval, seed + 1)),
    })
