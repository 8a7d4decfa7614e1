"""The one Vocabulary of the three from-scratch families: its order, its out-of-vocabulary rule, its file."""

import json
import zlib

import pytest

from corefbert.errors import CorefBertError
from corefbert.text.vocabulary import PAD, UNK, Vocabulary


def test_order_is_frequency_then_code_point_whatever_order_the_data_came_in():
    sentences = [["the", "cat", "saw", "a", "dog"], ["the", "dog", "ran"]]
    forward = Vocabulary.build(sentences)
    backward = Vocabulary.build([list(reversed(s)) for s in reversed(sentences)])
    assert forward.words == [PAD, UNK, "dog", "the", "a", "cat", "ran", "saw"]
    assert backward == forward


def test_extra_words_follow_the_counted_ones_and_buckets_come_last():
    vocab = Vocabulary.build([["b", "b", "a"]], extra_words=["z", "b", "c"], oov_buckets=3)
    assert vocab.words == [PAD, UNK, "b", "a", "c", "z", "<oov_0>", "<oov_1>", "<oov_2>"]
    assert vocab.get("z") == 5 and vocab.get("never") is None


def test_unknown_words_go_to_unk_or_to_a_stable_hash_bucket():
    plain = Vocabulary.build([["Anna", "met", "Tom"]])
    assert plain.encode(["met", "Zed"]) == [plain.get("met"), 1]
    hashed = Vocabulary.build([["anna"]], oov_buckets=4)
    first_bucket = len(hashed) - 4
    assert hashed.encode(["zed"]) == [first_bucket + zlib.crc32(b"zed") % 4]
    assert 1 not in hashed.encode(["zed", "x", "y", "qq"])  # with buckets <unk> is never used


def test_min_count_and_lowercasing():
    vocab = Vocabulary.build([["The", "the", "Cat"]], lowercase=True, min_count=2)
    assert vocab.words == [PAD, UNK, "the"] and vocab.encode(["THE", "cat"]) == [2, 1]
    cased = Vocabulary.build([["The", "the"]])
    assert cased.get("The") != cased.get("the")


def test_characters_are_counted_over_word_occurrences():
    vocab = Vocabulary.build([["ab", "ab", "c"]], characters=True)
    assert vocab.chars == [PAD, UNK, "a", "b", "c"] and vocab.encode_chars("cz") == [4, 1]
    with pytest.raises(CorefBertError, match="no characters"):
        Vocabulary.build([["ab"]]).encode_chars("a")


def test_save_and_load_round_trip(tmp_path):
    vocab = Vocabulary.build([["Ünïcode", "x"]], characters=True, lowercase=True, oov_buckets=2)
    vocab.save(str(tmp_path), "mine.json")
    assert Vocabulary.load(str(tmp_path), "mine.json") == vocab
    assert set(json.loads((tmp_path / "mine.json").read_text())) == {"words", "chars", "lowercase", "oov_buckets"}


def test_a_vocabulary_file_loads_and_another_versions_is_one_line(tmp_path):
    # end-to-end coreference uses words and characters; the pair classifiers lowercase words and OOV buckets
    e2e = Vocabulary.from_dict({"words": [PAD, UNK, "Tom"], "chars": [PAD, UNK, "T"]})
    assert e2e.encode(["Tom", "tom"]) == [2, 1] and e2e.encode_chars("To") == [2, 1]
    pairs = Vocabulary.from_dict({"words": [PAD, UNK, "a", "<oov_0>"], "lowercase": True, "oov_buckets": 1})
    assert pairs.encode(["A", "b"]) == [2, 3]
    with pytest.raises(CorefBertError, match="not a vocabulary of this version"):
        Vocabulary.from_dict([PAD, UNK, "mary"])  # a bare word list: no version of this toolkit writes one
    (tmp_path / "vocab.json").write_text('{"tokens": []}')
    with pytest.raises(CorefBertError, match="not a vocabulary"):
        Vocabulary.load(str(tmp_path))
    with pytest.raises(CorefBertError, match="no other.json"):
        Vocabulary.load(str(tmp_path), "other.json")
