"""One batch of documents -> packed pretraining rows with mention spans (the schema in docs/contracts.md).

Per document: spaCy words and noun mentions (:mod:`corefbert.mentions`), one fast-tokenizer call with
character offsets, words mapped onto subwords through those offsets (never ``##``/``Ġ``), then greedy
packing of whole words into sequences of contiguous text. :func:`corefbert.corpus.prepare_corpus`
runs :class:`SequencePacker` over files through ``datasets.map``; :func:`pack_texts` over a list.
"""

from __future__ import annotations

import json
import os

import numpy as np

from corefbert.errors import CorefBertError
from corefbert.mentions import MentionExtractor, load_spacy_pipeline, split_long_text

COLUMNS = ("input_ids", "word_ids", "mention_starts", "mention_ends", "mention_groups")
# A document is tokenized, tagged and packed in segments of at most this many characters, cut at a
# paragraph or line end where there is one: its token lists, offsets and word arrays (~120 MB per million
# characters) are bounded too, not only spaCy's share. No sequence spans a cut (one shorter sequence per
# million characters); shorter documents are packed exactly as before.
SEGMENT_CHARS = 1_000_000


def special_token_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a single sequence (``[CLS]``/``[SEP]``, ``<s>``/``</s>``)."""
    plain = tokenizer("corpus", add_special_tokens=False)["input_ids"]
    full = tokenizer("corpus", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(plain) + 1):
        if full[i : i + len(plain)] == plain:
            return full[:i], full[i + len(plain) :]
    raise CorefBertError(f"cannot locate the special tokens of {type(tokenizer).__name__}; use a BERT/RoBERTa one")


def check_tokenizer(tokenizer, max_seq_length: int, name: object = None) -> None:
    """One clear line for a tokenizer or length this pipeline cannot use."""
    label = name or type(tokenizer).__name__
    if not getattr(tokenizer, "is_fast", False):
        raise CorefBertError(f"tokenizer {label} is not a fast tokenizer; word boundaries need its character "
                             "offsets (install `tokenizers` and load it with AutoTokenizer)")
    if tokenizer.mask_token_id is None:
        raise CorefBertError(f"tokenizer {label} has no mask token; MLM/MRP pretraining needs one")
    prefix, suffix = special_token_frame(tokenizer)
    if max_seq_length < len(prefix) + len(suffix) + 2:
        raise CorefBertError(f"max_seq_length {max_seq_length} leaves no room for text; use at least 8")
    if max_seq_length > getattr(tokenizer, "model_max_length", max_seq_length):
        raise CorefBertError(f"max_seq_length {max_seq_length} exceeds the model_max_length "
                             f"{tokenizer.model_max_length} of tokenizer {label}; lower --max_seq_length")


def word_spans(offsets: np.ndarray, mentions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Map subword tokens onto words through character offsets.

    ``offsets``: ``[T, 2]`` token character spans. ``mentions``: the document's ``DocMentions``.
    A word is one spaCy word, or several when one subword straddles them; a token that touches no
    spaCy word (e.g. byte-level whitespace) is a word of its own. Returns ``word_of_token [T]``,
    ``word_token_starts [U]``, ``word_token_ends [U]`` (exclusive), and ``word_spacy [U]``: the
    single spaCy word index of each word, -1 where it merged several or touches none.
    """
    num_tokens = offsets.shape[0]
    starts, ends = offsets[:, 0], offsets[:, 1]
    first = np.searchsorted(mentions.word_ends, starts, side="right")  # first spaCy word ending after start
    last = np.searchsorted(mentions.word_starts, ends, side="left") - 1  # last spaCy word starting before end
    # A zero-width token belongs to the token before it.
    carrier = np.maximum.accumulate(np.where(ends > starts, np.arange(num_tokens), 0))
    first, last = first[carrier], last[carrier]
    touches = first <= last
    same_word = np.zeros(num_tokens, dtype=bool)
    same_word[1:] = touches[1:] & touches[:-1] & (first[1:] <= last[:-1])
    same_word[1:] |= carrier[1:] != np.arange(1, num_tokens)
    word_of_token = np.cumsum(~same_word) - 1
    word_token_starts = np.flatnonzero(~same_word)
    word_token_ends = np.append(word_token_starts[1:], num_tokens)
    word_first = first[word_token_starts]
    word_last = np.maximum.reduceat(last, word_token_starts) if num_tokens else last
    single = touches[word_token_starts] & (word_first == word_last)
    return word_of_token, word_token_starts, word_token_ends, np.where(single, word_first, -1)


class SequencePacker:
    """Turn documents into packed rows; the one code path behind ``prepare_corpus`` and ``pack_texts``.

    Called by ``datasets.map`` on batches ``{"doc_id": [...], text_column: [...]}``; each document's
    length draws use ``numpy.random.default_rng([seed, doc_id])``, so the output does not depend on
    batching or ``num_proc``. Per-batch counts go to ``stats_dir`` (one JSON file per batch) when set.
    """

    def __init__(self, tokenizer, extractor=None, *, spacy_model=None, group_by="surface", max_seq_length=512,
                 short_seq_prob=0.1, seed=42, text_column="text", stats_dir=None):
        self.tokenizer = tokenizer
        self.extractor = extractor
        self.spacy_model, self.group_by = spacy_model, group_by
        self.short_seq_prob, self.seed, self.text_column = short_seq_prob, seed, text_column
        self.stats_dir = stats_dir
        self._doc = None  # the document being packed: id, length-draw generator, word and noun counts
        self.prefix, self.suffix = special_token_frame(tokenizer)
        self.budget = max_seq_length - len(self.prefix) - len(self.suffix)

    def _extractor(self) -> MentionExtractor:
        # Loaded lazily so that map workers each load spaCy instead of unpickling it.
        if self.extractor is None:
            nlp = load_spacy_pipeline(self.spacy_model, lemmas=self.group_by == "lemma")
            self.extractor = MentionExtractor(nlp, group_by=self.group_by)
        return self.extractor

    def __call__(self, batch: dict) -> dict:
        texts = batch[self.text_column]
        rows = {name: [] for name in COLUMNS}
        self.stats = stats = dict.fromkeys(STAT_KEYS, 0)
        for group in _segment_groups(batch["doc_id"], texts):
            segment_texts = [text for _, _, text in group]
            encodings = self.tokenizer(segment_texts, add_special_tokens=False, return_offsets_mapping=True,
                                       return_attention_mask=False, return_token_type_ids=False, verbose=False)
            docs = self._extractor().pipe(segment_texts)
            for (doc_id, last, _), ids, offsets, mentions in zip(group, encodings["input_ids"],
                                                                 encodings["offset_mapping"], docs):
                self._pack_segment(int(doc_id), last, ids, offsets, mentions, rows, stats)
        if self.stats_dir is not None and texts:
            with open(os.path.join(self.stats_dir, f"{int(batch['doc_id'][0])}.json"), "w") as handle:
                json.dump(stats, handle)
        return rows

    def _pack_segment(self, doc_id, last, ids, offsets, mentions, rows, stats) -> None:
        # A document's segments arrive in order; its length draws continue from one segment to the next.
        if self._doc is None or self._doc["id"] != doc_id:
            self._doc = {"id": doc_id, "rng": np.random.default_rng([self.seed, doc_id]), "words": 0, "nouns": 0}
        doc = self._doc
        doc["words"] += mentions.num_words if ids else 0
        doc["nouns"] += mentions.num_mentions if ids else 0
        if ids and mentions.num_words:
            self._pack_words(ids, offsets, mentions, doc["rng"], rows, stats)
        if last:
            stats["documents"] += 1
            stats["documents_without_words"] += int(doc["words"] == 0)
            stats["documents_without_nouns"] += int(doc["words"] > 0 and doc["nouns"] == 0)
            self._doc = None

    def _pack_words(self, ids, offsets, mentions, rng, rows, stats) -> None:
        ids = np.asarray(ids, dtype=np.int32)  # [T]
        word_of_token, tok_starts, tok_ends, spacy_word = word_spans(np.asarray(offsets, dtype=np.int64), mentions)
        is_mention = spacy_word >= 0
        is_mention[is_mention] = mentions.is_mention[spacy_word[is_mention]]
        keys = np.where(is_mention, mentions.group_keys[np.maximum(spacy_word, 0)], 0)  # [U]
        too_long = (tok_ends - tok_starts) > self.budget
        next_too_long = np.minimum.accumulate(np.where(too_long, np.arange(len(too_long)), len(too_long))[::-1])[::-1]
        num_words, word = len(tok_starts), 0
        while word < num_words:
            if too_long[word]:
                stats["words_longer_than_sequence"] += 1
                word += 1
                continue
            target = self.budget
            if rng.random() < self.short_seq_prob:
                target = int(rng.integers(2, self.budget + 1))  # BERT's randint(2, max_num_tokens)
            end = int(np.searchsorted(tok_ends, tok_starts[word] + target, side="right"))
            end = min(max(end, word + 1), int(next_too_long[word]))  # a first word longer than target stays
            self._emit(ids, word_of_token, tok_starts, tok_ends, is_mention, keys, word, end, rows, stats)
            word = end

    def _emit(self, ids, word_of_token, tok_starts, tok_ends, is_mention, keys, first, end, rows, stats):
        t0, t1 = tok_starts[first], tok_ends[end - 1]
        n_pre, n_suf = len(self.prefix), len(self.suffix)
        mention_words = np.flatnonzero(is_mention[first:end]) + first
        uniq, first_seen, inverse, counts = np.unique(keys[mention_words], return_index=True,
                                                      return_inverse=True, return_counts=True)
        usable = counts >= 2  # paper: only groups with >= 2 mentions in this sequence
        group_of_uniq = np.full(len(uniq), -1, dtype=np.int32)
        # Number groups by first appearance so ids read left to right.
        group_of_uniq[np.flatnonzero(usable)[np.argsort(first_seen[usable])]] = np.arange(int(usable.sum()))
        groups = group_of_uniq[inverse.reshape(-1)]
        kept = mention_words[groups >= 0]
        word_ids = np.full(n_pre + (t1 - t0) + n_suf, -1, dtype=np.int32)
        word_ids[n_pre : n_pre + t1 - t0] = word_of_token[t0:t1] - first
        rows["input_ids"].append(self.prefix + ids[t0:t1].tolist() + self.suffix)
        rows["word_ids"].append(word_ids.tolist())
        rows["mention_starts"].append((tok_starts[kept] - t0 + n_pre).tolist())
        rows["mention_ends"].append((tok_ends[kept] - 1 - t0 + n_pre).tolist())
        rows["mention_groups"].append(groups[groups >= 0].tolist())
        stats["sequences"] += 1
        stats["tokens"] += len(word_ids)
        stats["mentions"] += len(kept)
        stats["groups"] += int(usable.sum())
        stats["sequences_with_groups"] += int(usable.any())


def _segment_groups(doc_ids, texts):
    """Lists of ``(doc_id, is_last_segment, text)`` holding at most ``SEGMENT_CHARS`` characters each.

    A text longer than ``SEGMENT_CHARS`` is cut into segments at line ends (``split_long_text``); short
    texts share a group, so a batch of ordinary documents is still one tokenizer call.
    """
    group, chars = [], 0
    for doc_id, text in zip(doc_ids, texts):
        segments = split_long_text(text, SEGMENT_CHARS) if len(text) > SEGMENT_CHARS else [(0, text)]
        for number, (_, segment) in enumerate(segments, start=1):
            if group and chars + len(segment) > SEGMENT_CHARS:
                yield group
                group, chars = [], 0
            group.append((doc_id, number == len(segments), segment))
            chars += len(segment)
    if group:
        yield group


STAT_KEYS = ("documents", "documents_without_nouns", "documents_without_words", "words_longer_than_sequence",
             "sequences", "tokens", "mentions", "groups", "sequences_with_groups")


def pack_texts(texts, tokenizer, extractor, max_seq_length=512, short_seq_prob=0.1, seed=42,
               stats: dict | None = None) -> list[dict]:
    """Pack in-memory ``texts`` into rows of the packed-sequence schema (docs/contracts.md).

    ``extractor``: a :class:`MentionExtractor`. Document ``i`` gets the length draws of doc id ``i``,
    as in ``prepare_corpus``. ``stats``, when given, is filled with the counts of the summary.
    """
    check_tokenizer(tokenizer, max_seq_length)
    packer = SequencePacker(tokenizer, extractor, max_seq_length=max_seq_length, short_seq_prob=short_seq_prob,
                            seed=seed)
    texts = list(texts)
    rows = packer({"doc_id": list(range(len(texts))), "text": texts})
    if stats is not None:
        stats.update(packer.stats)
    return [dict(zip(COLUMNS, values)) for values in zip(*(rows[name] for name in COLUMNS))]
