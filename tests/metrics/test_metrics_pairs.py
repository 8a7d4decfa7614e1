"""Metrics of the pronoun-pair classifiers (corefbert/metrics/pair_metrics.py), on confusion matrices computed by
hand: accuracy, P/R/F1 of "entailed", Cohen's kappa, per pair type."""

from __future__ import annotations

import math

import pytest

from corefbert.metrics.pair_metrics import confusion, kappa_from_confusion, pair_metrics, pair_metrics_by_type


def test_metrics_of_a_hand_computed_confusion_matrix():
    # tp 20, tn 50, fp 10, fn 20 (n = 100)
    predictions = [1] * 20 + [0] * 50 + [1] * 10 + [0] * 20
    references = [1] * 20 + [0] * 50 + [0] * 10 + [1] * 20
    assert confusion(predictions, references) == {"tp": 20, "tn": 50, "fp": 10, "fn": 20}
    metrics = pair_metrics(predictions, references)
    assert metrics["accuracy"] == pytest.approx(70.0)
    assert metrics["precision"] == pytest.approx(100 * 20 / 30)
    assert metrics["recall"] == pytest.approx(50.0)
    assert metrics["f1"] == pytest.approx(100 * 40 / 70)  # 2PR/(P+R) = 2 * (2/3) * (1/2) / (7/6) = 4/7
    # p_o = 0.70; p_e = P(gold 1) P(pred 1) + P(gold 0) P(pred 0) = 0.40 * 0.30 + 0.60 * 0.70 = 0.54
    assert metrics["kappa"] == pytest.approx((0.70 - 0.54) / (1 - 0.54))


def test_kappa_cases_by_hand():
    # Cohen's own style of example: 50 items, agreement 35 / 50, marginals 25/25 and 20/30
    # tp 15, tn 20, fp 5, fn 10: p_o = 0.7, p_e = 0.5 * 0.4 + 0.5 * 0.6 = 0.5, κ = 0.4
    assert kappa_from_confusion(15, 20, 5, 10) == pytest.approx(0.4)
    assert kappa_from_confusion(10, 10, 0, 0) == pytest.approx(1.0)
    assert kappa_from_confusion(0, 0, 10, 10) == pytest.approx(-1.0)
    # always "not entailed" on a mixed set: p_o = p_e, κ = 0, F1 of "correct" 0
    always_no = pair_metrics([0, 0, 0, 0], [1, 0, 0, 1])
    assert always_no["kappa"] == 0.0 and always_no["f1"] == 0.0 and math.isnan(always_no["precision"])
    # one label on both sides: κ = 0/0 and F1 0/0, left undefined rather than made up
    constant = pair_metrics([0, 0], [0, 0])
    assert math.isnan(constant["kappa"]) and math.isnan(constant["f1"]) and constant["accuracy"] == 100.0


def test_metrics_per_pair_type():
    metrics = pair_metrics_by_type([1, 1, 0, 1, 0], [1, 1, 0, 0, 0],
                                   ["correct", "correct", "in_scope", "in_scope", "out_of_scope"])
    assert metrics["correct_accuracy"] == 100.0 and metrics["correct_count"] == 2
    assert metrics["in_scope_accuracy"] == 50.0 and metrics["in_scope_count"] == 2
    assert metrics["out_of_scope_accuracy"] == 100.0
    assert (metrics["tp"], metrics["tn"], metrics["fp"], metrics["fn"]) == (2, 2, 1, 0)
