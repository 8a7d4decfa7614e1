"""QUOREF's metric: the DROP-style EM/F1 over answers that are bags of spans.

This follows the official DROP evaluator (``drop_eval.py``, which the official Quoref evaluator reuses)
line by line:

- each span is normalized per ``" "``/``"-"``-separated token: lower case, punctuation removed unless the
  token is a number, numbers rewritten as ``str(float(x))`` (``"2"`` and ``"2.0"`` agree), articles removed;
- EM is 1 when the predicted and gold *sets* of normalized spans are equal and have the same length;
- F1 aligns predicted and gold spans one-to-one with an optimal assignment (Hungarian algorithm),
  scores each pair by bag-of-token F1 (0 when the gold span has numbers and the prediction shares
  none), and averages over ``max(#gold, #predicted)`` slots, so missing and extra spans both cost;
  the per-question F1 is rounded to 2 decimals, as officially.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _normalize_token(token: str) -> str:
    token = token.lower()
    if not _is_number(token):
        token = "".join(ch for ch in token if ch not in _PUNCTUATION)
    if _is_number(token):
        token = str(float(token))
    return " ".join(_ARTICLES.sub(" ", token).split())


def normalize_span(text: str) -> str:
    """DROP's normalization of one span (tokens split on spaces and hyphens)."""
    parts = [_normalize_token(token) for token in re.split(" |-", text)]
    return " ".join(part for part in parts if part.strip()).strip()


def answer_to_bags(answer: str | Sequence[str]) -> tuple[list[str], list[set[str]]]:
    """The normalized spans of an answer and, per span, its set of tokens."""
    spans = [answer] if isinstance(answer, str) else list(answer)
    normalized = [normalize_span(span) for span in spans]
    return normalized, [set(span.split()) for span in normalized]


def _bag_f1(predicted: set[str], gold: set[str]) -> float:
    intersection = len(gold & predicted)
    precision = intersection / len(predicted) if predicted else 1.0
    recall = intersection / len(gold) if gold else 1.0
    if precision == 0.0 and recall == 0.0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def _numbers_match(gold: set[str], predicted: set[str]) -> bool:
    gold_numbers = {word for word in gold if _is_number(word)}
    predicted_numbers = {word for word in predicted if _is_number(word)}
    return not gold_numbers or bool(gold_numbers & predicted_numbers)


def align_bags(predicted: list[set[str]], gold: list[set[str]]) -> np.ndarray:
    """Per-slot F1 of the optimal one-to-one alignment; ``max(#gold, #predicted)`` slots."""
    scores = np.zeros([len(gold), len(predicted)])  # [gold, predicted]
    for gold_index, gold_bag in enumerate(gold):
        for pred_index, pred_bag in enumerate(predicted):
            if _numbers_match(gold_bag, pred_bag):
                scores[gold_index, pred_index] = _bag_f1(pred_bag, gold_bag)
    rows, columns = linear_sum_assignment(-scores)
    slot_scores = np.zeros([max(len(gold), len(predicted))])
    for row, column in zip(rows, columns):
        slot_scores[row] = max(slot_scores[row], scores[row, column])
    return slot_scores


def drop_em_f1(predicted: str | Sequence[str], gold: str | Sequence[str]) -> tuple[float, float]:
    """EM and F1 (both 0-1) of one predicted answer against one gold answer, each a span or spans."""
    predicted_spans, predicted_bags = answer_to_bags(predicted)
    gold_spans, gold_bags = answer_to_bags(gold)
    exact = float(set(predicted_spans) == set(gold_spans) and len(predicted_spans) == len(gold_spans))
    f1 = round(float(np.mean(align_bags(predicted_bags, gold_bags))), 2)
    return exact, f1


def quoref_question_scores(predictions: Mapping[str, Sequence[str]],
                           references: Mapping[str, Sequence[str]]) -> dict[str, tuple[float, float]]:
    """``{qid: (EM, F1)}`` (both 0-1) for every gold question: a missing prediction, or a question whose gold
    answer is empty (never matched, as in the official evaluator), scores ``(0, 0)``."""
    scores = {}
    for qid, gold in references.items():
        if qid not in predictions or not list(gold) or not str(list(gold)[0]).strip():
            scores[qid] = (0.0, 0.0)
        else:
            scores[qid] = drop_em_f1(predictions[qid], gold)
    return scores


def quoref_metrics(predictions: Mapping[str, Sequence[str]],
                   references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Corpus EM/F1 (0-100) of ``{qid: [span, ...]}`` predictions against ``{qid: [gold span, ...]}``. Each
    question's gold spans together form one answer (Quoref's multi-span answers). Every gold question counts;
    a missing prediction scores 0 and is counted in ``missing``."""
    if not references:
        return {"exact_match": 0.0, "f1": 0.0, "total": 0, "missing": 0}
    scores = quoref_question_scores(predictions, references)
    total = len(references)
    return {"exact_match": 100.0 * sum(em for em, _ in scores.values()) / total,
            "f1": 100.0 * sum(f1 for _, f1 in scores.values()) / total, "total": total,
            "missing": sum(qid not in predictions for qid in references)}
