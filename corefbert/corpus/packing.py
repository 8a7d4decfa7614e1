"""One batch of documents -> packed pretraining rows with mention spans (the schema in docs/contracts.md).

Per document: spaCy words and noun mentions (:mod:`corefbert.corpus.mentions`), one fast-tokenizer call with
character offsets, words mapped onto subwords through those offsets and the tokenizer's word ids, then greedy
packing of whole words into sequences of contiguous text (:class:`SequencePacker`, :func:`pack_texts`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys

import numpy as np

from corefbert.corpus.document_packing import DocumentRowPacker, pack_document_rows
from corefbert.corpus.mentions import MentionExtractor, iter_pieces, load_spacy_pipeline
from corefbert.corpus.packed_rows import append_row, new_columns, rows_table
from corefbert.errors import CorefBertError
from corefbert.text.durable import replace_file
from corefbert.text.positions import max_positions, positions_reason
from corefbert.text.tokenizers import check_tokenizer_vocabulary, joins_next, special_token_frame

PACKING_MODES = ("documents", "single")
# A document is tokenized, tagged and packed in segments of at most this many characters, cut at a paragraph
# or line end where there is one, so its token lists, offsets and word arrays (~120 MB per million characters)
# are bounded too. No sequence spans a cut.
SEGMENT_CHARS = 1_000_000
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
TOKENIZE_CHARS = 100_000  # longest piece of text one tokenizer call gets (see _tokenizer_pieces)


def check_tokenizer(tokenizer, max_seq_length: int, name: object = None, model_config=None) -> None:
    """One clear line for a tokenizer or length this pipeline cannot use; with ``model_config`` (the
    ``config.json`` of the tokenizer's folder) ``max_seq_length`` must fit its positions too."""
    label = name or type(tokenizer).__name__
    if not getattr(tokenizer, "is_fast", False):
        raise CorefBertError(f"tokenizer {label} is not a fast tokenizer; word boundaries need its character "
                             "offsets (install `tokenizers` and load it with AutoTokenizer)")
    if tokenizer.mask_token_id is None:
        raise CorefBertError(f"tokenizer {label} has no mask token; MLM/MRP pretraining needs one")
    check_tokenizer_vocabulary(tokenizer, label)
    prefix, suffix = special_token_frame(tokenizer)
    if max_seq_length < len(prefix) + len(suffix) + 2:
        raise CorefBertError(f"max_seq_length {max_seq_length} leaves no room for text; use at least 8")
    if max_seq_length > getattr(tokenizer, "model_max_length", max_seq_length):
        raise CorefBertError(f"max_seq_length {max_seq_length} exceeds the model_max_length "
                             f"{tokenizer.model_max_length} of tokenizer {label}; lower --max_seq_length")
    positions = max_positions(model_config) if model_config is not None else None
    if positions is not None and max_seq_length > positions:
        raise CorefBertError(f"max_seq_length {max_seq_length} exceeds the {positions} positions of the model in "
                             f"{label} ({positions_reason(model_config)}); lower --max_seq_length to {positions}")


def tokenizer_identity(tokenizer) -> dict:
    """What a corpus records of its tokenizer (``prepare_summary.json``) so training can match its model's:
    the vocabulary's size and SHA-256 (of its sorted ``token -> id`` pairs, the same whatever folder or
    transformers version saved it), the special-token ids and the ids framing a sequence."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()
    special = {name: getattr(tokenizer, f"{name}_token_id", None) for name in ("cls", "sep", "pad", "mask", "unk",
                                                                              "bos", "eos")}
    prefix, suffix = special_token_frame(tokenizer)
    return {"class": type(tokenizer).__name__, "name_or_path": str(getattr(tokenizer, "name_or_path", "")),
            "vocab_size": len(tokenizer), "vocab_sha256": digest, "special_token_ids": special,
            "frame": [prefix, suffix]}


_armed_pid: int | None = None


def die_with_parent(parent_pid: int) -> None:
    """Make this worker process die when ``parent_pid`` (the process that forked it) dies.

    ``datasets.map(num_proc=N)``'s pool workers block on their task queue forever once the main process is
    SIGKILLed (~1 GB each with spaCy loaded). Linux's ``PR_SET_PDEATHSIG`` has the kernel kill them then; it
    is armed once per worker (``datasets`` offers no pool initializer). Elsewhere this does nothing.
    """
    global _armed_pid
    if _armed_pid == os.getpid() or not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return
    if not armed:
        return
    _armed_pid = os.getpid()
    # The parent died before the signal was armed: this process was handed to init (or a subreaper).
    if os.getppid() != parent or (parent == 1 and parent_pid != 1):
        os._exit(1)


_guarded_parent: int | None = None  # set while forked children must not outlive this process


def _arm_forked_child() -> None:
    if _guarded_parent is not None and os.getppid() == _guarded_parent:
        die_with_parent(_guarded_parent)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_arm_forked_child)


@contextlib.contextmanager
def children_die_with_this_process():
    """While open, every process this one forks dies with it (Linux): ``datasets.map``'s pool workers and the
    ``multiprocess`` manager beside them, which run none of our code before blocking."""
    global _guarded_parent
    previous, _guarded_parent = _guarded_parent, os.getpid()
    try:
        yield
    finally:
        _guarded_parent = previous


def word_spans(offsets: np.ndarray, mentions, joins_next: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Map subword tokens onto words through character offsets and the tokenizer's own word ids.

    ``offsets``: ``[T, 2]``; ``mentions``: the document's ``DocMentions``; ``joins_next``: ``[T]`` bool
    (:func:`corefbert.text.tokenizers.joins_next`), None for all False. A word is one spaCy word, or several
    when one subword straddles them. A token touching no spaCy word goes with the token after it when the
    tokenizer joins the two (a lone ``▁`` or ``Ġ``); else a zero-width one goes with the token before it and a
    whitespace one is a word (``Ċ``). Returns ``word_of_token [T]``, ``word_token_starts [U]``,
    ``word_token_ends [U]`` (exclusive) and ``word_spacy [U]`` (the spaCy word, -1 for several or none).
    """
    num_tokens = offsets.shape[0]
    index = np.arange(num_tokens)
    starts, ends = offsets[:, 0], offsets[:, 1]
    first = np.searchsorted(mentions.word_ends, starts, side="right")  # first spaCy word ending after start
    last = np.searchsorted(mentions.word_starts, ends, side="left") - 1  # last spaCy word starting before end
    touching = (ends > starts) & (first <= last)
    # A token that touches no word takes the span of the first token after it that does (or that leaves the
    # tokenizer's word): ``donor``, found by a reversed running minimum.
    joins = np.zeros(num_tokens, dtype=bool) if joins_next is None else np.asarray(joins_next, dtype=bool)
    stop = touching | ~joins
    stop[-1:] = True
    donor = np.minimum.accumulate(np.where(stop, index, num_tokens)[::-1])[::-1]
    borrows = ~stop & touching[donor]
    source = np.where(borrows, donor, index)
    first, last = first[source], last[source]
    # Any other zero-width token belongs to the token before it.
    carrier = np.maximum.accumulate(np.where((ends > starts) | borrows, index, 0))
    first, last = first[carrier], last[carrier]
    touches = first <= last
    same_word = np.zeros(num_tokens, dtype=bool)
    same_word[1:] = touches[1:] & touches[:-1] & (first[1:] <= last[:-1])
    same_word[1:] |= carrier[1:] != index[1:]
    word_of_token = np.cumsum(~same_word) - 1
    word_token_starts = np.flatnonzero(~same_word)
    word_token_ends = np.append(word_token_starts[1:], num_tokens)
    word_first = first[word_token_starts]
    word_last = np.maximum.reduceat(last, word_token_starts) if num_tokens else last
    single = touches[word_token_starts] & (word_first == word_last)
    return word_of_token, word_token_starts, word_token_ends, np.where(single, word_first, -1)


class SequencePacker:
    """Turn documents into packed rows; the one code path behind ``prepare_corpus`` and ``pack_texts``.

    Called by ``datasets.map`` on batches ``{"doc_id": [...], text_column: [...]}``, it returns their rows as
    a ``pyarrow.Table``; a document's length draws use ``default_rng([seed, doc_id])``, so the rows do not
    depend on batching or ``num_proc``. Per-batch counts go to ``stats_dir`` when set. ``packing="single"``:
    one document per row (the official code's layout); ``"documents"``: one *document row* per document for
    the second pass (:class:`corefbert.corpus.document_packing.DocumentRowPacker`).
    """

    def __init__(self, tokenizer, extractor=None, *, spacy_model=None, group_by="surface", max_seq_length=512,
                 short_seq_prob=0.1, seed=42, text_column="text", stats_dir=None, packing="single"):
        if packing not in PACKING_MODES:
            raise CorefBertError(f"--packing must be one of {', '.join(PACKING_MODES)}, not {packing!r}")
        self.packing, self.tokenizer, self.extractor = packing, tokenizer, extractor
        self.spacy_model, self.group_by, self.stats_dir = spacy_model, group_by, stats_dir
        self.short_seq_prob, self.seed, self.text_column = short_seq_prob, seed, text_column
        self._doc = None  # the document being packed: id, length-draw generator, word and noun counts
        self.prefix, self.suffix = (np.asarray(ids, dtype=np.int32) for ids in special_token_frame(tokenizer))
        self.budget = max_seq_length - len(self.prefix) - len(self.suffix)
        self.owner_pid = os.getpid()  # a call in another process is a map worker of this one

    def _extractor(self) -> MentionExtractor:
        if self.extractor is None:  # loaded lazily: each map worker loads spaCy instead of unpickling it
            nlp = load_spacy_pipeline(self.spacy_model, lemmas=self.group_by == "lemma")
            self.extractor = MentionExtractor(nlp, group_by=self.group_by)
        return self.extractor

    def __call__(self, batch: dict) -> dict:
        if os.getpid() != self.owner_pid:
            die_with_parent(self.owner_pid)
        texts = batch[self.text_column]
        rows = new_columns()
        self.stats = stats = dict.fromkeys(STAT_KEYS, 0)
        for group in _segment_groups(batch["doc_id"], texts):
            segment_texts = [text for _, _, text in group]
            encodings = self._encode(segment_texts)
            docs = self._extractor().pipe(segment_texts)
            for (doc_id, last, _), tokens, mentions in zip(group, encodings, docs):
                self._pack_segment(int(doc_id), last, tokens, mentions, rows, stats)
        if self.stats_dir is not None and texts:
            replace_file(os.path.join(self.stats_dir, f"{int(batch['doc_id'][0])}.json"), json.dumps(stats))
        return rows_table(rows)

    def _encode(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per text: token ids ``[T]``, character offsets ``[T, 2]`` and ``joins_next [T]`` (the tokenizer's word
        ids put the token and the next in one word, :func:`word_spans`), from one tokenizer call over the texts'
        pieces (:func:`_tokenizer_pieces`)."""
        pieces = [list(_tokenizer_pieces(text)) for text in texts]
        encodings = self.tokenizer([piece for text in pieces for _, piece in text], add_special_tokens=False,
                                   return_offsets_mapping=True, return_attention_mask=False,
                                   return_token_type_ids=False, verbose=False)
        all_ids, all_offsets = iter(encodings["input_ids"]), iter(encodings["offset_mapping"])
        out, k = [], 0
        for text in pieces:
            ids, offsets, joins = [], [], []
            for start, _ in text:
                ids.append(np.asarray(next(all_ids), dtype=np.int32))
                offsets.append(np.asarray(next(all_offsets), dtype=np.int64).reshape(-1, 2) + start)
                joins.append(joins_next(encodings.word_ids(k)))
                k += 1
            out.append((np.concatenate(ids), np.concatenate(offsets), np.concatenate(joins)))
        return out

    def _pack_segment(self, doc_id, last, tokens, mentions, rows, stats) -> None:
        ids = tokens[0]
        # A document's segments arrive in order; its length draws continue from one segment to the next.
        if self._doc is None or self._doc["id"] != doc_id:
            self._doc = {"id": doc_id, "rng": np.random.default_rng([self.seed, doc_id]), "words": 0, "nouns": 0}
        doc = self._doc
        doc["words"] += mentions.num_words if len(ids) else 0
        doc["nouns"] += mentions.num_mentions if len(ids) else 0
        if len(ids) and mentions.num_words:
            if self.packing == "documents":
                self._emit_document(tokens, mentions, rows)
            else:
                self._pack_words(tokens, mentions, doc["rng"], rows, stats)
        if last:
            stats["documents"] += 1
            stats["documents_without_words"] += int(doc["words"] == 0)
            stats["documents_without_nouns"] += int(doc["words"] > 0 and doc["nouns"] == 0)
            self._doc = None

    @staticmethod
    def _words(tokens, mentions):
        """Words and mentions of one document segment (``tokens``: ids, offsets and joins of :meth:`_encode`):
        ``word_of_token [T]``, word token starts/ends ``[U]``, ``is_mention [U]`` and the mention group keys
        ``[U]`` (0 where no mention)."""
        _, offsets, joins = tokens
        word_of_token, tok_starts, tok_ends, spacy_word = word_spans(np.asarray(offsets), mentions, joins)
        is_mention = spacy_word >= 0
        is_mention[is_mention] = mentions.is_mention[spacy_word[is_mention]]
        keys = np.where(is_mention, mentions.group_keys[np.maximum(spacy_word, 0)], 0)  # [U]
        return word_of_token, tok_starts, tok_ends, is_mention, keys

    def _emit_document(self, tokens, mentions, rows) -> None:
        """The whole segment as one document row: tokens without special tokens, word ids over the segment,
        every mention with a segment-wide id per group key (singletons too: a row decides what is usable)."""
        ids = tokens[0]
        word_of_token, tok_starts, tok_ends, is_mention, keys = self._words(tokens, mentions)
        mention_words = np.flatnonzero(is_mention)
        surface = np.unique(keys[mention_words], return_inverse=True)[1].reshape(-1)
        rows["input_ids"].append(np.asarray(ids, dtype=np.int32))
        rows["word_ids"].append(word_of_token)
        rows["mention_starts"].append(tok_starts[mention_words])
        rows["mention_ends"].append(tok_ends[mention_words] - 1)
        rows["mention_groups"].append(surface)

    def _pack_words(self, tokens, mentions, rng, rows, stats) -> None:
        ids = np.asarray(tokens[0], dtype=np.int32)  # [T]
        word_of_token, tok_starts, tok_ends, is_mention, keys = self._words(tokens, mentions)
        too_long = (tok_ends - tok_starts) > self.budget
        next_too_long = np.minimum.accumulate(np.where(too_long, np.arange(len(too_long)), len(too_long))[::-1])[::-1]
        num_words, word, n_pre = len(tok_starts), 0, len(self.prefix)
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
            t0, t1 = tok_starts[word], tok_ends[end - 1]  # the row's text tokens
            mention_words = np.flatnonzero(is_mention[word:end]) + word
            word_ids = np.full(n_pre + (t1 - t0) + len(self.suffix), -1, dtype=np.int32)
            word_ids[n_pre : n_pre + t1 - t0] = word_of_token[t0:t1] - word
            starts, ends = tok_starts[mention_words] - t0 + n_pre, tok_ends[mention_words] - 1 - t0 + n_pre
            append_row(rows, stats, (self.prefix, ids[t0:t1], self.suffix), word_ids, starts, ends,
                       keys[mention_words])
            word = end


def _tokenizer_pieces(text: str):
    """``(offset, piece)`` parts of ``text`` of at most ``TOKENIZE_CHARS`` characters, for the tokenizer
    (which holds ~160 bytes per character of its input while it works). A piece ends before a single space
    between two non-space characters, so the next starts with `` word`` as inside the text; a text with no
    such space stays whole."""
    start = 0
    while len(text) - start > TOKENIZE_CHARS:
        cut = text.rfind(" ", start + 1, start + TOKENIZE_CHARS)
        while cut > start and (text[cut - 1].isspace() or cut + 1 >= len(text) or text[cut + 1].isspace()):
            cut = text.rfind(" ", start + 1, cut)
        if cut <= start:
            break
        yield start, text[start:cut]
        start = cut
    yield start, text[start:]


def _segment_groups(doc_ids, texts):
    """Lists of ``(doc_id, is_last_segment, text)`` holding at most ``SEGMENT_CHARS`` characters each: a
    longer text is cut at line ends (``iter_pieces``), short texts share a group (one tokenizer call)."""
    group, chars = [], 0
    for doc_id, text in zip(doc_ids, texts):
        for _, segment, last in iter_pieces(text, SEGMENT_CHARS):
            if group and chars + len(segment) > SEGMENT_CHARS:
                yield group
                group, chars = [], 0
            group.append((doc_id, last, segment))
            chars += len(segment)
    if group:
        yield group


STAT_KEYS = ("documents", "documents_without_nouns", "documents_without_words", "words_longer_than_sequence",
             "sequences", "tokens", "mentions", "groups", "sequences_with_groups", "documents_per_sequence")


def pack_texts(texts, tokenizer, extractor, max_seq_length=512, short_seq_prob=0.1, seed=42,
               stats: dict | None = None, packing: str = "documents") -> list[dict]:
    """Pack in-memory ``texts`` into rows of the packed-sequence schema (docs/contracts.md) with the
    :class:`MentionExtractor` ``extractor``; ``stats``, when given, is filled with the summary's counts."""
    check_tokenizer(tokenizer, max_seq_length)
    packer = SequencePacker(tokenizer, extractor, max_seq_length=max_seq_length, short_seq_prob=short_seq_prob,
                            seed=seed, packing=packing)
    texts = list(texts)
    rows = packer({"doc_id": list(range(len(texts))), "text": texts})
    if packing == "documents":
        second = row_packer(tokenizer, max_seq_length, short_seq_prob, seed, "train")
        tables = list(pack_document_rows([rows.to_pydict()], second))
        packer.stats.update(second.stats)
        import pyarrow as pa

        rows = pa.concat_tables(tables) if tables else rows.slice(0, 0)
    if stats is not None:
        stats.update(packer.stats)
    return rows.to_pylist()


def row_packer(tokenizer, max_seq_length: int, short_seq_prob: float, seed: int, split: str) -> DocumentRowPacker:
    """The second pass of ``--packing documents`` for ``tokenizer``'s frame and separator."""
    prefix, suffix = special_token_frame(tokenizer)
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else suffix[-1]
    return DocumentRowPacker(prefix, suffix, sep, max_seq_length, short_seq_prob, seed, split)
