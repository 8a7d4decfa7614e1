"""FEVER metrics (corefbert/metrics/fever.py) by hand: the FEVER score, label accuracy and macro F1, and the
offline `evaluate` module."""

from __future__ import annotations

import pytest

from corefbert.metrics.fever import fever_score, label_scores


def _gold(*pairs):
    return [[0, 0, page, sentence] for page, sentence in pairs]


def test_fever_score_needs_a_complete_evidence_set_in_the_first_five():
    instances = [
        # right label, only half of the one gold set: does not count
        {"label": "SUPPORTS", "predicted_label": "SUPPORTS", "evidence": [_gold(("A", 1), ("A", 2))],
         "predicted_evidence": [["A", 1]]},
        # right label, the set complete (order and extra sentences do not matter): counts
        {"label": "SUPPORTS", "predicted_label": "SUPPORTS", "evidence": [_gold(("A", 1), ("A", 2))],
         "predicted_evidence": [["A", 2], ["B", 0], ["A", 1]]},
        # NOT ENOUGH INFO needs only the label
        {"label": "NOT ENOUGH INFO", "predicted_label": "NOT ENOUGH INFO", "evidence": [[[9, None, None, None]]],
         "predicted_evidence": []},
        # complete evidence, wrong label: does not count
        {"label": "REFUTES", "predicted_label": "SUPPORTS", "evidence": [_gold(("C", 0))],
         "predicted_evidence": [["C", 0]]},
        # the gold sentence is sixth: beyond the first five
        {"label": "REFUTES", "predicted_label": "REFUTES", "evidence": [_gold(("C", 0))],
         "predicted_evidence": [["X", i] for i in range(5)] + [["C", 0]]},
        # any one of the alternative gold sets is enough
        {"label": "SUPPORTS", "predicted_label": "SUPPORTS", "evidence": [_gold(("C", 0)), _gold(("D", 1), ("D", 2))],
         "predicted_evidence": [["D", 1], ["D", 2]]},
    ]
    assert fever_score(instances) == pytest.approx(100 * 3 / 6)
    labels = label_scores([i["predicted_label"] for i in instances], [i["label"] for i in instances])
    assert labels["accuracy"] == pytest.approx(100 * 5 / 6)


def test_label_scores_by_hand():
    scores = label_scores(["SUPPORTS", "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"],
                          ["SUPPORTS", "REFUTES", "REFUTES", "NOT ENOUGH INFO"])
    assert scores["accuracy"] == pytest.approx(75.0)
    assert scores["macro_f1"] == pytest.approx(100 * (2 / 3 + 2 / 3 + 1) / 3)
    # Two-label sets average two classes only.
    assert label_scores(["SUPPORTS", "REFUTES"], ["SUPPORTS", "SUPPORTS"])["macro_f1"] == pytest.approx(100 * (2 / 3) / 2)


def test_fever_evaluate_module_loads_offline_and_matches():
    from corefbert.metrics import load_metric

    metric = load_metric("fever")
    result = metric.compute(
        predictions=[{"predicted_label": "SUPPORTS", "predicted_evidence": [{"page": "A", "sentence": 1}]},
                     {"predicted_label": "SUPPORTS", "predicted_evidence": [{"page": "A", "sentence": 1},
                                                                            {"page": "A", "sentence": 2}]}],
        references=[{"label": "SUPPORTS", "evidence": [[{"page": "A", "sentence": 1}, {"page": "A", "sentence": 2}]]},
                    {"label": "SUPPORTS", "evidence": [[{"page": "A", "sentence": 1}, {"page": "A", "sentence": 2}]]}],
    )
    assert result == pytest.approx({"accuracy": 100.0, "macro_f1": 100.0, "fever_score": 50.0})
