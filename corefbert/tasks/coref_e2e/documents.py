"""CoNLL documents -> the tensors of the end-to-end coreference model (one document per batch).

A recurrent model reads word and character ids from its own vocabulary (:func:`build_vocabulary`, saved as
``coref_e2e_vocab.json``); a transformer reads subword windows (:func:`subword_windows`).

What one forward pass holds grows with its words (span enumeration: words × max span width; antecedent
scores: kept spans × K × span size; ASL: sentences × longest sentence²), so every path bounds its words by
flags, never by the input: sentences longer than ``max_sentence_words`` are read as pieces
(:func:`split_long_sentences`), training documents are cut to ``max_training_sentences``
(:func:`crop_document`, as the paper does) and ``max_training_words`` (:func:`crop_words`), and evaluation,
prediction and ``resolve`` run a long document as segments of whole sentences of at most
``max_segment_words`` words (:func:`segment_sentences`), linking mentions within a segment only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import accumulate

import torch

from corefbert.tasks.coref_e2e.config import CorefE2EConfig
from corefbert.text.conll import ConllDocument
from corefbert.text.tokenizers import word_pieces
from corefbert.text.vocabulary import Vocabulary

VOCAB_FILE = "coref_e2e_vocab.json"
MIN_CHARS = 5  # the widest character window (5) needs words at least that long after padding


def build_vocabulary(documents: list[ConllDocument], extra_words: Iterable[str] = ()) -> Vocabulary:
    """Every word (as written: the paper's GloVe is cased) and character of ``documents``, plus
    ``extra_words``, in :class:`Vocabulary`'s order."""
    return Vocabulary.build((doc.words for doc in documents), extra_words=extra_words, characters=True)


def embedding_matrix(vocab: Vocabulary, vectors: dict[str, list[float]], dim: int) -> torch.Tensor:
    """[vocab, dim]: each word's GloVe vector (the lower-cased one as a fallback), zeros where absent."""
    matrix = torch.zeros(len(vocab.words), dim)
    for i, word in enumerate(vocab.words):
        vector = vectors.get(word, vectors.get(word.lower()))
        if vector is not None:
            matrix[i] = torch.tensor(vector)
    return matrix


def crop_document(document: ConllDocument, first: int, last: int) -> ConllDocument:
    """Sentences ``first``..``last - 1`` of ``document`` with the gold mentions inside them, re-indexed."""
    lengths = [len(s) for s in document.sentences]
    return crop_words(document, sum(lengths[:first]), sum(lengths[:last]))


def crop_words(document: ConllDocument, first: int, last: int) -> ConllDocument:
    """Words ``first``..``last - 1`` of ``document`` (sentences cut at the edges), mentions re-indexed."""
    sentences, speakers, position = [], [], 0
    for words, talkers in zip(document.sentences, document.speakers):
        lo, hi = max(first - position, 0), min(last - position, len(words))
        if lo < hi:
            sentences.append(words[lo:hi])
            speakers.append(talkers[lo:hi])
        position += len(words)
    clusters = [[(s - first, e - first) for s, e in cluster if first <= s and e < last]
                for cluster in document.clusters]
    return ConllDocument(document.doc_key, document.name, document.part, sentences, speakers, document.genre,
                         [c for c in clusters if c])


def sentence_pieces(sentences: Iterable[list], max_words: int) -> Iterator[list]:
    """Each sentence, or pieces of at most ``max_words`` of it where it is longer (lazily)."""
    for sentence in sentences:
        for start in range(0, len(sentence), max_words):
            yield sentence[start:start + max_words]


def split_long_sentences(document: ConllDocument, max_words: int) -> ConllDocument:
    """``document`` with every sentence longer than ``max_words`` split into pieces (the same object when none
    is). The flat word indices, and so the clusters, do not change."""
    if all(len(s) <= max_words for s in document.sentences):
        return document
    return ConllDocument(document.doc_key, document.name, document.part,
                         list(sentence_pieces(document.sentences, max_words)),
                         list(sentence_pieces(document.speakers, max_words)), document.genre, document.clusters)


def segment_sentences(sentences: Iterable[list], max_words: int) -> Iterator[list[list]]:
    """Consecutive sentences grouped greedily into segments of at most ``max_words`` words (a sentence longer
    than that is a segment of its own: split it first with :func:`sentence_pieces`)."""
    segment, size = [], 0
    for sentence in sentences:
        if segment and size + len(sentence) > max_words:
            yield segment
            segment, size = [], 0
        segment.append(sentence)
        size += len(sentence)
    if segment:
        yield segment


def common_tensors(document: ConllDocument, genres: list[str]) -> dict[str, torch.Tensor]:
    """Sentence of each word, speaker ids (per document, by first appearance), genre id, and the gold
    ``gold_starts``/``gold_ends``/``gold_cluster_ids`` (1-based) [mentions]."""
    speaker_index: dict[str, int] = {}
    speakers = [s for sentence in document.speakers for s in sentence]
    speaker_ids = [speaker_index.setdefault(s, len(speaker_index)) for s in speakers]
    genre = genres.index(document.genre) if document.genre in genres else 0
    mentions = [(s, e, i + 1) for i, cluster in enumerate(document.clusters) for s, e in cluster]
    gold = torch.tensor(mentions, dtype=torch.long).view(-1, 3)
    return {"sentence_of_word": torch.tensor(document.sentence_of_word(), dtype=torch.long),
            "speaker_ids": torch.tensor(speaker_ids, dtype=torch.long), "genre": torch.tensor(genre),
            "gold_starts": gold[:, 0], "gold_ends": gold[:, 1], "gold_cluster_ids": gold[:, 2]}


def word_tensors(document: ConllDocument, vocab: Vocabulary, max_word_chars: int = 30) -> dict[str, torch.Tensor]:
    """``word_ids`` [sentences, len], ``char_ids`` [sentences, len, chars], ``sentence_lengths`` [sentences]."""
    sentences = document.sentences
    longest = max(len(s) for s in sentences)
    chars = min(max_word_chars, max(MIN_CHARS, max(len(w) for s in sentences for w in s)))
    word_ids = torch.zeros(len(sentences), longest, dtype=torch.long)
    char_ids = torch.zeros(len(sentences), longest, chars, dtype=torch.long)
    for i, sentence in enumerate(sentences):
        word_ids[i, :len(sentence)] = torch.tensor(vocab.encode(sentence))
        for j, word in enumerate(sentence):
            ids = vocab.encode_chars(word[:chars])
            char_ids[i, j, :len(ids)] = torch.tensor(ids)
    return {"word_ids": word_ids, "char_ids": char_ids,
            "sentence_lengths": torch.tensor([len(s) for s in sentences], dtype=torch.long)}


def subword_windows(words: list[str], tokenizer, max_seq_length: int, stride: int) -> dict[str, torch.Tensor]:
    """Overlapping windows of ``max_seq_length`` tokens ([CLS] + content + [SEP]) starting every ``stride``
    content tokens (the subwords of the running text: :func:`~corefbert.text.tokenizers.word_pieces`); each
    word is read where its first subword is farthest from an edge -> ``input_ids``/``attention_mask``
    [windows, L], ``word_positions`` [words]."""
    pieces = [p if p else [tokenizer.unk_token_id] for p in word_pieces(tokenizer, words)]  # a word dropped entirely
    flat = [t for p in pieces for t in p]
    first_piece = [0, *accumulate(len(p) for p in pieces)][:-1]  # each word's first subword in flat
    content = max_seq_length - 2
    starts = [0]
    while starts[-1] + content < len(flat):  # the last window ends at the last token
        starts.append(min(starts[-1] + stride, len(flat) - content))
    input_ids = torch.full((len(starts), max_seq_length), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(len(starts), max_seq_length, dtype=torch.long)
    for w, start in enumerate(starts):
        window = [tokenizer.cls_token_id] + flat[start:start + content] + [tokenizer.sep_token_id]
        input_ids[w, :len(window)] = torch.tensor(window)
        attention_mask[w, :len(window)] = 1
    positions, last = [], 0
    for token in first_piece:  # increasing: the windows that hold it start at or after the previous one's
        while starts[last] + content <= token:
            last += 1
        inside, w = [], last
        while w < len(starts) and starts[w] <= token:  # a few windows (content / stride), not all of them
            inside.append((min(token - starts[w], starts[w] + content - 1 - token), w))
            w += 1
        _, w = max(inside)
        positions.append(w * max_seq_length + 1 + token - starts[w])
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "word_positions": torch.tensor(positions, dtype=torch.long)}


def featurize(document: ConllDocument, config: CorefE2EConfig, vocab: Vocabulary | None = None,
              tokenizer=None) -> dict[str, torch.Tensor]:
    """What the model of ``config`` reads about ``document``, from ``vocab`` (recurrent) or ``tokenizer``."""
    features = common_tensors(document, config.genres)
    if config.reads_subwords:
        return {**features, **subword_windows(document.words, tokenizer, config.max_seq_length,
                                              config.window_stride)}
    return {**features, **word_tensors(document, vocab)}
