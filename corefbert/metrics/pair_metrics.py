"""Pronoun-pair entailment metrics: the confusion matrix of the "correct" class (label 1, the replacement is
entailed), accuracy, precision/recall/F1 of that class, and Cohen's κ, as the pronoun-entailment paper's
tables 2 and 3 report them.

Accuracy, precision, recall and F1 are percentages (x 100, as every metric of this toolkit); κ is a fraction
in [-1, 1] (the paper's 0.16 / 0.22). Undefined values (F1 with no positive gold and no positive prediction,
κ when chance agreement is 1) are NaN, never a made-up 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def confusion(predictions: Sequence[int], references: Sequence[int]) -> dict[str, int]:
    """``{"tp", "tn", "fp", "fn"}`` with label 1 ("correct", entailed) as the positive class."""
    pred = np.asarray(predictions, dtype=int)
    gold = np.asarray(references, dtype=int)
    if pred.shape != gold.shape:
        raise ValueError(f"{pred.shape[0] if pred.ndim else 0} predictions for {gold.shape[0]} references")
    return {"tp": int(((pred == 1) & (gold == 1)).sum()), "tn": int(((pred == 0) & (gold == 0)).sum()),
            "fp": int(((pred == 1) & (gold == 0)).sum()), "fn": int(((pred == 0) & (gold == 1)).sum())}


def kappa_from_confusion(tp: int, tn: int, fp: int, fn: int) -> float:
    """Cohen's κ = (p_o - p_e) / (1 - p_e): p_o the observed agreement (tp + tn) / n, p_e the agreement
    expected by chance from the two marginals, p(gold 1) p(pred 1) + p(gold 0) p(pred 0)."""
    n = tp + tn + fp + fn
    if n == 0:
        return float("nan")
    observed = (tp + tn) / n
    expected = ((tp + fn) / n) * ((tp + fp) / n) + ((tn + fp) / n) * ((tn + fn) / n)
    if expected == 1.0:
        return float("nan")  # both sides constant and equal: κ is 0/0
    return (observed - expected) / (1.0 - expected)


def _ratio(numerator: int, denominator: int) -> float:
    return 100.0 * numerator / denominator if denominator else float("nan")


def pair_metrics(predictions: Sequence[int], references: Sequence[int]) -> dict[str, float]:
    """``accuracy``, ``precision``, ``recall``, ``f1`` (of the "correct" class), ``kappa``, ``tp/tn/fp/fn``."""
    counts = confusion(predictions, references)
    tp, tn, fp, fn = counts["tp"], counts["tn"], counts["fp"], counts["fn"]
    f1 = _ratio(2 * tp, 2 * tp + fp + fn)  # = 2PR / (P + R), defined whenever P or R is
    return {"accuracy": _ratio(tp + tn, tp + tn + fp + fn), "precision": _ratio(tp, tp + fp),
            "recall": _ratio(tp, tp + fn), "f1": f1, "kappa": kappa_from_confusion(tp, tn, fp, fn),
            **{k: float(v) for k, v in counts.items()}}


def pair_metrics_by_type(predictions: Sequence[int], references: Sequence[int],
                         types: Sequence[str]) -> dict[str, float]:
    """:func:`pair_metrics` over all pairs, plus ``<type>_accuracy`` and ``<type>_count`` for each pair type
    (``correct``, ``in_scope``, ``out_of_scope``): a type holds one label only, so accuracy is what it has."""
    pred = np.asarray(predictions, dtype=int)
    gold = np.asarray(references, dtype=int)
    kinds = np.asarray(types, dtype=object)
    metrics = pair_metrics(pred, gold)
    for kind in sorted(set(kinds.tolist())):
        chosen = kinds == kind
        metrics[f"{kind}_accuracy"] = _ratio(int((pred[chosen] == gold[chosen]).sum()), int(chosen.sum()))
        metrics[f"{kind}_count"] = float(chosen.sum())
    return metrics
