"""SQuAD and QUOREF (DROP-style) metrics on cases computed by hand, and their offline evaluate modules."""

from __future__ import annotations

import pytest

from corefbert.metrics import available_metrics, load_metric
from corefbert.metrics.drop import drop_em_f1, normalize_span, quoref_metrics
from corefbert.metrics.squad import exact_match_score, f1_score, normalize_answer, squad_metrics


def test_squad_normalization_is_the_official_one():
    assert normalize_answer("The  Cat, sat!") == "cat sat"
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words


def test_squad_em_and_f1_by_hand():
    assert exact_match_score("The cat.", "cat") == 1.0
    assert exact_match_score("cat sat", "cat") == 0.0
    # pred {cat, sat}, gold {cat, sat, on, mat}: P = 1, R = 1/2, F1 = 2/3
    assert f1_score("the cat sat", "cat sat on mat") == pytest.approx(2 / 3)
    # tokens count with multiplicity: common {dog: 1, bird: 1}, P = R = 2/3
    assert f1_score("dog dog bird", "dog bird bird") == pytest.approx(2 / 3)
    assert f1_score("", "cat") == 0.0


def test_squad_corpus_takes_max_over_golds_and_counts_missing():
    predictions = {"q1": "Desmond Pike", "q2": "the cat sat", "extra": "ignored"}
    references = {"q1": ["a man", "Desmond Pike"], "q2": ["cat sat on mat"], "q3": ["never predicted"]}
    scores = squad_metrics(predictions, references)
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert scores["missing"] == 1 and scores["total"] == 3


def test_drop_normalization_numbers_and_hyphens():
    assert normalize_span("Jean-Paul Sartre") == "jean paul sartre"
    assert normalize_span("2") == normalize_span("2.0") == "2.0"
    assert normalize_span("1,000 ships") == "1000.0 ships"
    assert normalize_span("The Beatles") == "beatles"


def test_drop_multi_span_partial_overlap_by_hand():
    # gold x pred F1: {mary}-{mary} = 1, {john}-{john, smith} = 2/3; mean over 2 slots = 0.8333 -> 0.83
    assert drop_em_f1(["John Smith", "Mary"], ["Mary", "John"]) == (0.0, 0.83)
    # order does not matter
    assert drop_em_f1(["John", "Mary"], ["Mary", "John"]) == (1.0, 1.0)
    # an extra span costs a slot: (1 + 1 + 0) / 3
    assert drop_em_f1(["Mary", "John", "Bob"], ["Mary", "John"]) == (0.0, 0.67)
    # a missing span costs a slot: (1 + 0) / 2
    assert drop_em_f1(["Mary"], ["Mary", "John"]) == (0.0, 0.5)
    # a repeated span is not the same bag: EM needs equal lengths
    assert drop_em_f1(["Mary", "Mary"], ["Mary"]) == (0.0, 0.5)


def test_drop_alignment_is_optimal_not_greedy():
    assert drop_em_f1(["p q", "p q r"], ["p q r", "p q"])[1] == 1.0
    predicted = ["x y", "x"]
    gold = ["x y z", "x y"]
    # pairs: (x y z, x y) = 0.8, (x y z, x) = 0.5, (x y, x y) = 1, (x y, x) = 2/3. Taking each gold span's
    # best in turn gives 0.8 + 2/3 (0.73); the optimal assignment gives 0.5 + 1 = 1.5 -> 0.75.
    assert drop_em_f1(predicted, gold)[1] == pytest.approx(0.75)


def test_drop_numbers_must_match():
    assert drop_em_f1("4 cats", "3 cats") == (0.0, 0.0)  # 0.5 by tokens, but the number differs
    assert drop_em_f1("3.0 cats", "3 cats") == (1.0, 1.0)


def test_quoref_corpus_scores():
    predictions = {"a": ["Desmond", "Marta"], "b": ["Ilse Varga"], "c": []}
    references = {"a": ["Marta", "Desmond"], "b": ["Ilse"], "c": ["Kellan"], "d": ["Lisbon"]}
    scores = quoref_metrics(predictions, references)
    # a: EM 1, F1 1; b: EM 0, F1 2/3 -> 0.67; c: EM 0, F1 0; d: missing
    assert scores["exact_match"] == pytest.approx(25.0)
    assert scores["f1"] == pytest.approx(100 * (1 + 0.67) / 4)
    assert scores["missing"] == 1


def test_evaluate_modules_load_offline_and_match_the_functions():
    assert {"squad", "quoref"} <= set(available_metrics())
    squad = load_metric("squad")
    result = squad.compute(
        predictions=[{"id": "1", "prediction_text": "the cat sat"}, {"id": "2", "prediction_text": "Pike"}],
        references=[{"id": "1", "answers": {"text": ["cat sat on mat"], "answer_start": [0]}},
                    {"id": "2", "answers": {"text": ["Pike", "Desmond Pike"], "answer_start": [5, 0]}}],
    )
    assert result == pytest.approx({"exact_match": 50.0, "f1": 100 * (2 / 3 + 1) / 2})
    quoref = load_metric("quoref")
    result = quoref.compute(
        predictions=[{"id": "1", "prediction_text": ["John Smith", "Mary"]}],
        references=[{"id": "1", "answers": {"text": ["Mary", "John"]}}],
    )
    assert result == pytest.approx({"exact_match": 0.0, "f1": 83.0})
