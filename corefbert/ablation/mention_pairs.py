"""Gold mentions in encoder windows, and their pairs: the examples of the frozen-feature probe
(:mod:`corefbert.ablation.frozen_probe`).

A document is cut into windows of ``window`` tokens (``[CLS]``, ``window - 2`` subwords, ``[SEP]``) every
``window - 2`` subwords, whatever the sentences, so each subword is in exactly one window and each pair is counted
once. A gold mention is kept when all its subwords lie in one window (a mention cut by a window edge is counted and
skipped); every pair of kept mentions in one window is an example, labelled by whether the two share a gold
cluster, and marked with the subsets the probe reports apart: ``diffstring`` (the two differ as lower-cased
strings, so token identity cannot decide) and ``pronoun_name`` (:func:`mention_kind`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from corefbert.errors import CorefBertError
from corefbert.pronouns import PRONOUNS
from corefbert.text.conll import ConllDocument
from corefbert.text.tokenizers import word_pieces

# A capitalised span that starts with one of these is a common noun phrase at a sentence start, not a name.
DETERMINERS = frozenset("the a an this that these those some any no every each".split()) | PRONOUNS
NAME_PARTICLES = frozenset("of de la le du da van von der".split())  # lower-case inside names
OTHER, PRONOUN, NAME = 0, 1, 2
SUBSETS = ("all", "diffstring", "pronoun_name")
MIN_WINDOW = 8  # [CLS], [SEP] and a few subwords: below this hardly a mention pair fits
DEFAULT_WINDOW = 128


def mention_kind(words: list[str]) -> int:
    """``PRONOUN`` for a one-word personal, possessive or reflexive pronoun; ``NAME`` for a span whose words
    are capitalised (lower-case particles such as "of", "de" allowed inside) and that does not start with a
    determiner or pronoun ("Mr. Darcy", "Elizabeth", "Duke of York"); ``OTHER`` otherwise. A surface rule: the
    CoNLL files of LitBank carry no part of speech or entity type. A capitalised common noun ("Mother") counts as
    a name."""
    lowered = [w.lower() for w in words]
    if len(words) == 1 and lowered[0] in PRONOUNS:
        return PRONOUN
    lettered = [w for w in words if w[:1].isalpha()]
    if not lettered or lowered[0] in DETERMINERS or not lettered[0][0].isupper():
        return OTHER
    return NAME if all(w[0].isupper() or w.lower() in NAME_PARTICLES for w in lettered) else OTHER


@dataclass
class ProbeDocument:
    """One document cut into encoder windows, its probed mentions and their pairs.

    The mentions are the gold mentions that lie inside one window, ordered by (window, first, last subword).
    """

    doc_key: str
    input_ids: np.ndarray  # [windows, window] int64, padded with the tokenizer's pad id
    lengths: np.ndarray  # [windows] tokens of each window, [CLS] and [SEP] included
    mention_window: np.ndarray  # [M] window of each mention (non-decreasing)
    mention_first: np.ndarray  # [M] position of its first subword inside the window
    mention_last: np.ndarray  # [M] position of its last subword inside the window (inclusive)
    mention_cluster: np.ndarray  # [M] index of its gold cluster in the document
    mention_kind: np.ndarray  # [M] OTHER / PRONOUN / NAME (:func:`mention_kind`)
    mention_text: list[str]  # [M] its words, lower-cased, joined by spaces
    pairs: np.ndarray  # [P, 2] mention indices i < j of every pair within one window
    labels: np.ndarray  # [P] bool: the two mentions are in the same gold cluster
    subsets: dict[str, np.ndarray]  # subset name -> [P] bool
    skipped_edge: int  # gold mentions cut by a window edge (in no window whole)
    skipped_duplicate: int  # spans listed again in another cluster (the first listing is kept)


def window_pairs(mention_window: np.ndarray) -> np.ndarray:
    """``[P, 2]``: every pair ``i < j`` of mentions in the same window, window by window, ``i`` then ``j``
    ascending; ``mention_window`` ``[M]`` is non-decreasing (tests/references.py holds the plain double loop)."""
    mention_window = np.asarray(mention_window)
    cuts = np.flatnonzero(np.diff(mention_window)) + 1
    blocks = []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(mention_window)]):
        i, j = np.triu_indices(hi - lo, 1)
        blocks.append(np.stack([i + lo, j + lo], axis=1))
    return np.concatenate(blocks).astype(np.int64) if blocks else np.zeros((0, 2), dtype=np.int64)


def prepare_document(document: ConllDocument, tokenizer, window: int = DEFAULT_WINDOW) -> ProbeDocument:
    """``document``'s windows, mentions and pairs for ``tokenizer``.

    Cut as the module says: the overlapping windows of
    :func:`corefbert.tasks.coref_e2e.documents.subword_windows` read one subword per word, and a pair seen in two
    windows would count twice. Words get the subwords of the running text, as in that function
    (:func:`corefbert.text.tokenizers.word_pieces`); a word the tokenizer drops entirely reads as the unknown token.
    """
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None or tokenizer.pad_token_id is None:
        raise CorefBertError("the tokenizer has no [CLS]/[SEP]/[PAD] tokens (or <s>/</s>/<pad>); the probe frames "
                             "every window with them: use an encoder's tokenizer")
    words = document.words
    pieces = [p if p else [tokenizer.unk_token_id] for p in word_pieces(tokenizer, words)]
    sizes = np.array([len(p) for p in pieces], dtype=np.int64)
    first_piece = np.cumsum(sizes) - sizes  # [words] offset of each word's first subword
    flat = [t for p in pieces for t in p]
    content = window - 2
    input_ids = np.full((max(1, math.ceil(len(flat) / content)), window), tokenizer.pad_token_id, dtype=np.int64)
    lengths = np.zeros(len(input_ids), dtype=np.int64)
    for w in range(len(input_ids)):
        tokens = [tokenizer.cls_token_id, *flat[w * content:(w + 1) * content], tokenizer.sep_token_id]
        input_ids[w, :len(tokens)] = tokens
        lengths[w] = len(tokens)
    mentions, seen, edge, duplicate = [], set(), 0, 0
    for cluster_index, cluster in enumerate(document.clusters):
        for start, end in cluster:
            if (start, end) in seen:
                duplicate += 1
                continue
            seen.add((start, end))
            first, last = first_piece[start], first_piece[end] + sizes[end] - 1  # flat subword offsets
            if first // content != last // content:
                edge += 1
                continue
            span = words[start:end + 1]
            mentions.append((first // content, 1 + first % content, 1 + last % content, cluster_index,
                             mention_kind(span), " ".join(span).lower()))
    mentions.sort(key=lambda m: m[:3])
    table = np.array([m[:5] for m in mentions], dtype=np.int64).reshape(-1, 5)
    texts = [m[5] for m in mentions]
    pairs = window_pairs(table[:, 0])
    i, j = pairs[:, 0], pairs[:, 1]
    kind = table[:, 4]
    subsets = {"all": np.ones(len(pairs), dtype=bool),
               "diffstring": np.array([texts[a] != texts[b] for a, b in pairs], dtype=bool).reshape(-1),
               "pronoun_name": ((kind[i] == PRONOUN) & (kind[j] == NAME)) | ((kind[i] == NAME) & (kind[j] == PRONOUN))}
    return ProbeDocument(document.doc_key, input_ids, lengths, table[:, 0], table[:, 1], table[:, 2], table[:, 3],
                         kind, texts, pairs, table[i, 3] == table[j, 3], subsets, edge, duplicate)
