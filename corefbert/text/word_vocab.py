"""GloVe-format word vectors (``word v1 v2 ... vd`` per line) for the models trained from scratch, and a
vocabulary over them: the data's words the file has, plus Parikh et al.'s "out-of-vocabulary words are hashed
to one of 100 random embeddings each initialized to mean 0 and standard deviation 1".
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch

from corefbert.errors import CorefBertError
from corefbert.text.durable import output_file
from corefbert.text.tokenizers import load_tokenizer
from corefbert.text.vocabulary import Vocabulary

__all__ = ["read_word_vectors", "vocabulary_with_vectors", "write_input_embeddings"]


def read_word_vectors(path: str, wanted: set[str], lowercase: bool) -> tuple[dict[str, list[float]], int]:
    """``({word: vector}, dimension)`` for the words of ``wanted`` in the GloVe-format file ``path``
    (``word v1 ... vd`` per line, separated by spaces; a first line ``count dimension`` (word2vec text) is
    skipped). With ``lowercase`` the file's words are lowercased and the first vector of a word wins."""
    if not os.path.isfile(path):
        raise CorefBertError("embeddings file not found; give a GloVe-format text file", path=path)
    vectors: dict[str, list[float]] = {}
    dimension = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            parts = line.rstrip("\n").rstrip(" ").split(" ")
            if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # word2vec text header
            if len(parts) < 2:
                if line.strip():
                    raise CorefBertError("expected 'word v1 v2 ... vd' (GloVe format)", path=path, position=number)
                continue
            if dimension is None:
                dimension = len(parts) - 1
            elif len(parts) - 1 != dimension:
                raise CorefBertError(f"{len(parts) - 1} values after the word where the first line has {dimension}; "
                                     "a space inside a word, or a cut line?", path=path, position=number)
            word = parts[0].lower() if lowercase else parts[0]
            if word in wanted and word not in vectors:
                try:
                    vectors[word] = [float(v) for v in parts[1:]]
                except ValueError:
                    raise CorefBertError("a vector value is not a number", path=path, position=number) from None
    if dimension is None:
        raise CorefBertError("empty embeddings file", path=path)
    return vectors, dimension


def vocabulary_with_vectors(texts: Iterable[str], path: str, lowercase: bool, oov_buckets: int = 100,
                            seed: int = 0) -> tuple[Vocabulary, torch.Tensor, int]:
    """A vocabulary of the words of ``texts`` the file ``path`` has, plus ``oov_buckets`` hash buckets, its
    embedding matrix ``[vocab, dimension]`` (the pad row zero; file vectors scaled to L2 norm 1, Parikh et al.'s
    "each embedding vector was normalized to have l2 norm of 1"; buckets ~ N(0, 1), seeded) and how many
    distinct words of ``texts`` fell into the buckets."""
    words = {w.lower() if lowercase else w for text in texts for w in text.split()}
    vectors, dimension = read_word_vectors(path, words, lowercase)
    known = sorted(vectors)  # the order Vocabulary.build gives words it did not count
    vocabulary = Vocabulary.build((), lowercase=lowercase, extra_words=known, oov_buckets=oov_buckets)
    generator = torch.Generator().manual_seed(seed)
    matrix = torch.randn(len(vocabulary), dimension, generator=generator)  # [vocab, dimension]
    matrix[0] = 0.0
    if known:
        known_vectors = torch.tensor([vectors[w] for w in known])  # [known, dimension]
        matrix[2:2 + len(known)] = known_vectors / known_vectors.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    return vocabulary, matrix, len(words) - len(known)


def write_input_embeddings(model_name_or_path: str, texts: Iterable[str], path: str, lowercase: bool = True) -> int:
    """Write a GloVe-format file of static word vectors from a Hugging Face model's input embedding table
    (each distinct whitespace word of ``texts``: the mean of its subword rows), for where no GloVe file can be
    had. Returns how many words were written."""
    from transformers import AutoModel

    tokenizer = load_tokenizer(model_name_or_path)
    try:
        table = AutoModel.from_pretrained(model_name_or_path).get_input_embeddings().weight.detach()  # [V, d]
    except (OSError, ValueError) as err:
        raise CorefBertError(f"cannot load a model with a tokenizer ({type(err).__name__})",
                             path=model_name_or_path) from None
    words = sorted({w.lower() if lowercase else w for text in texts for w in text.split()})
    written = 0
    with output_file(path, what="the word vectors") as handle:
        for word in words:
            ids = tokenizer(word, add_special_tokens=False)["input_ids"]
            if not ids or " " in word:
                continue
            vector = table[ids].mean(0)  # [d]
            handle.write(word + " " + " ".join(f"{v:.5f}" for v in vector.tolist()) + "\n")
            written += 1
    return written
