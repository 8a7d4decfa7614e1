"""The one word (and character) vocabulary of the systems trained from scratch: the bAbI readers, the
end-to-end coreference model's recurrent encoders and the pronoun-pair classifiers.

Ids, the same in every family: ``0`` is ``<pad>``, ``1`` is ``<unk>``; then the words counted by
:meth:`Vocabulary.build`, **most frequent first, ties in code-point order** (the ids depend only on the
counts); then ``extra_words`` not counted (words an embeddings file knows), in code-point order; then, with
``oov_buckets`` > 0, that many hash buckets ``<oov_0>``, ...: an unknown word goes to bucket
``crc32(word) % oov_buckets`` (Parikh et al. 2016's "out-of-vocabulary words are hashed to one of 100 random
embeddings"), else to ``<unk>``. Characters (for a character CNN) follow the same rule. With ``lowercase``
every word is lower-cased before it is counted or looked up.

One file format, JSON: ``{"words": [...], "chars": [...] or null, "lowercase": bool, "oov_buckets": int}``.
"""

from __future__ import annotations

import json
import os
import zlib
from collections import Counter
from collections.abc import Iterable

from corefbert.errors import CorefBertError
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import read_json

__all__ = ["PAD", "UNK", "VOCAB_FILE", "Vocabulary"]

PAD, UNK = "<pad>", "<unk>"
VOCAB_FILE = "vocab.json"


def _by_frequency(counts: Counter, min_count: int = 1) -> list[str]:
    """The keys of ``counts`` seen at least ``min_count`` times, most frequent first, ties in code-point order."""
    return sorted((key for key, n in counts.items() if n >= min_count), key=lambda key: (-counts[key], key))


class Vocabulary:
    """``words[i]`` is the word of id ``i``, ``chars[i]`` the character of character id ``i`` (None: no
    characters); the order and the out-of-vocabulary rule are the module docstring's."""

    def __init__(self, words: Iterable[str] = (PAD, UNK), chars: Iterable[str] | None = None,
                 lowercase: bool = False, oov_buckets: int = 0):
        self.words, self.lowercase, self.oov_buckets = list(words), lowercase, oov_buckets
        self.chars = list(chars) if chars is not None else None
        if self.words[:2] != [PAD, UNK]:
            raise CorefBertError(f"a vocabulary starts with {PAD} and {UNK} (got {self.words[:2]})")
        self.word_index = {w: i for i, w in enumerate(self.words)}
        self.char_index = {c: i for i, c in enumerate(self.chars or ())}

    @classmethod
    def build(cls, sentences: Iterable[Iterable[str]], *, lowercase: bool = False, min_count: int = 1,
              extra_words: Iterable[str] = (), characters: bool = False, oov_buckets: int = 0) -> Vocabulary:
        """The vocabulary of the tokens of ``sentences`` seen at least ``min_count`` times, plus ``extra_words``
        (kept whatever their count), with the characters of the counted tokens when ``characters``."""
        normal = str.lower if lowercase else str
        counts = Counter(normal(token) for sentence in sentences for token in sentence)
        counted = _by_frequency(counts, min_count)
        extra = sorted({normal(w) for w in extra_words} - set(counted))
        buckets = [f"<oov_{i}>" for i in range(oov_buckets)]
        char_counts = Counter()
        for word, n in counts.items() if characters else ():
            for char in word:
                char_counts[char] += n
        chars = [PAD, UNK, *_by_frequency(char_counts)] if characters else None
        return cls([PAD, UNK, *counted, *extra, *buckets], chars, lowercase, oov_buckets)

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self.to_dict() == other.to_dict()

    def normalize(self, word: str) -> str:
        return word.lower() if self.lowercase else word

    def get(self, word: str) -> int | None:
        """The id of ``word`` when the vocabulary has it (no ``<unk>``, no bucket), else None."""
        return self.word_index.get(self.normalize(word))

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """The id of each token: its own, else its hash bucket, else ``<unk>`` (1)."""
        first_bucket = len(self.words) - self.oov_buckets
        ids = []
        for word in map(self.normalize, tokens):
            known = self.word_index.get(word)
            if known is None:
                known = first_bucket + zlib.crc32(word.encode()) % self.oov_buckets if self.oov_buckets else 1
            ids.append(known)
        return ids

    def encode_chars(self, word: str) -> list[int]:
        """The character ids of ``word`` as written (the character CNN sees case), unknown characters 1."""
        if self.chars is None:
            raise CorefBertError("this vocabulary has no characters")
        return [self.char_index.get(c, 1) for c in word]

    def to_dict(self) -> dict:
        return {"words": self.words, "chars": self.chars, "lowercase": self.lowercase,
                "oov_buckets": self.oov_buckets}

    @classmethod
    def from_dict(cls, values, path: str | None = None) -> Vocabulary:
        """The vocabulary of :meth:`to_dict`'s object; anything else (another version's file) is one line."""
        if not isinstance(values, dict) or not isinstance(values.get("words"), list):
            raise CorefBertError('not a vocabulary of this version (expected {"words": [...], ...}); train the model '
                                 "again", path=path)
        return cls(values["words"], values.get("chars"), bool(values.get("lowercase", False)),
                   int(values.get("oov_buckets", 0)))

    def save(self, directory: str, filename: str = VOCAB_FILE) -> None:
        replace_file(os.path.join(directory, filename), json.dumps(self.to_dict(), ensure_ascii=False),
                     "the vocabulary")

    @classmethod
    def load(cls, directory: str, filename: str = VOCAB_FILE, missing: str | None = None) -> Vocabulary:
        """The vocabulary :meth:`save` wrote into ``directory``; ``missing`` is the message when there is none."""
        path = os.path.join(directory, filename)
        values = read_json(path, missing=missing or f"no {filename} in the model folder; was it saved by this task?")
        return cls.from_dict(values, path)
