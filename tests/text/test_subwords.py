"""The tiny tokenizer of each kind (tests/fixtures/tokenizers/) and the helpers that map words and character spans
onto subwords for every family (corefbert/text/tokenizers.py: word_pieces, span_tokens, joins_next)."""

from __future__ import annotations

import pytest
from helpers import TOKENIZER_FIXTURES, TOKENIZER_KINDS, fixture_tokenizer

from corefbert.text.tokenizers import (
    joins_next,
    load_tokenizer,
    span_tokens,
    special_token_frame,
    word_pieces,
)

WORDS = "Marta met Zygmunt Ösz at the harbour , and ( Zygmunt ) waved .".split()
FRAMES = {"wordpiece": ("[CLS]", "[SEP]"), "bpe": ("<s>", "</s>"), "bpe_cls": ("[CLS]", "[SEP]"),
          "sentencepiece_unigram": ("[CLS]", "[SEP]")}


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_each_fixture_loads_offline_as_its_familys_class_and_through_the_one_loader(kind):
    import transformers

    folder = TOKENIZER_FIXTURES / kind
    assert sum(f.stat().st_size for f in folder.iterdir()) < 100_000
    tokenizer = fixture_tokenizer(kind)
    assert isinstance(tokenizer, getattr(transformers, TOKENIZER_KINDS[kind])) and tokenizer.is_fast
    loaded = load_tokenizer(str(folder))  # AutoTokenizer, and the vocabulary check every command runs
    assert type(loaded) is type(tokenizer) and loaded.get_vocab() == tokenizer.get_vocab()
    assert 500 <= len(tokenizer) <= 1000 and tokenizer.mask_token_id is not None and tokenizer.pad_token_id is not None
    prefix, suffix = special_token_frame(tokenizer)
    assert tokenizer.convert_ids_to_tokens(prefix + suffix) == list(FRAMES[kind])


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_word_pieces_are_the_running_texts_subwords(kind):
    """Each word gets the subwords it has in the running text, whatever the family: their concatenation is the
    text's tokenization, and each word's pieces spell the word."""
    tokenizer = fixture_tokenizer(kind)
    pieces = word_pieces(tokenizer, WORDS)
    assert [t for p in pieces for t in p] == tokenizer(" ".join(WORDS), add_special_tokens=False)["input_ids"]
    normalizer = tokenizer.backend_tokenizer.normalizer  # WordPiece's lower-casing and accent stripping
    for word, ids in zip(WORDS, pieces):
        spelled = tokenizer.decode(ids).strip()
        assert spelled == (normalizer.normalize_str(word) if normalizer else word) or tokenizer.unk_token in spelled
    assert word_pieces(tokenizer, []) == []


@pytest.mark.parametrize("kind", ["bpe", "bpe_cls"])
def test_byte_level_bpe_read_one_word_at_a_time_is_another_text(kind):
    """What the e2e `bert` encoder, the frozen probe and DocRED did before (DocRED with a probe of its own): one
    call per word. Byte-level BPE then reads every word as if it began the text, without its space, and the model
    sees subwords it never met in running text."""
    tokenizer = fixture_tokenizer(kind)
    one_at_a_time = tokenizer(WORDS, add_special_tokens=False)["input_ids"]
    assert one_at_a_time[2] != word_pieces(tokenizer, WORDS)[2]  # "Zygmunt" after a space


def test_a_word_the_tokenizer_drops_gets_no_pieces(wordpiece_tokenizer):
    pieces = word_pieces(wordpiece_tokenizer, ["Marta", "\u200b", "met"])  # a zero-width space: no token at all
    assert pieces[1] == [] and pieces[0] and pieces[2]


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_span_tokens_hold_a_words_lone_space_piece_and_nothing_else(kind):
    """A character span's tokens are those overlapping it plus a whitespace token the tokenizer joins to them
    (SentencePiece's lone space piece, BPE's lone space byte), never a line break of its own or a neighbour."""
    tokenizer = fixture_tokenizer(kind)
    text = "Marta met Zygmunt Ösz.\nZygmunt waved."
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets, joined = encoding["offset_mapping"], joins_next(encoding.word_ids())
    for start in (text.index("Zygmunt"), text.rindex("Zygmunt"), text.index("Ösz")):
        end = text.index(" ", start) if text[start] == "Z" else start + 3
        tokens = span_tokens(text, offsets, joined, start, end)
        assert tokens == list(range(tokens[0], tokens[-1] + 1))
        covered = text[min(offsets[t][0] for t in tokens):max(offsets[t][1] for t in tokens)]
        assert covered.strip() == text[start:end]  # no neighbour's characters, no line break
        before = tokens[0] - 1
        # The token before is another word's: it overlaps the text before, or the tokenizer does not join it.
        assert text[offsets[before][0]:offsets[before][1]].strip() or not joined[before]
    assert span_tokens(text, offsets, joined, 5, 5) == []


def test_joins_next_reads_the_tokenizers_word_ids():
    assert joins_next([None, 0, 0, 1, None]).tolist() == [False, True, False, False, False]
    assert joins_next([]).tolist() == []
