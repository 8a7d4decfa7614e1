"""SQuAD v1.1 exact match and F1, exactly as the official ``evaluate-v1.1.py`` computes them.

An answer is normalized (lower-cased, punctuation and the articles a/an/the removed, whitespace
collapsed); a prediction scores the maximum over a question's gold answers; the corpus scores are the
means over all gold questions, times 100. A gold question with no prediction scores 0 (as officially).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """The official SQuAD normalization: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, ground_truth: str) -> float:
    """1.0 when the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str) -> float:
    """Token-level F1 between the normalized strings (bags of tokens, counted with multiplicity)."""
    prediction_tokens = normalize_answer(prediction).split()
    truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def metric_max_over_ground_truths(metric, prediction: str, ground_truths: Iterable[str]) -> float:
    """The best score of ``prediction`` against any of the gold answers (0.0 when there are none)."""
    return max((metric(prediction, truth) for truth in ground_truths), default=0.0)


def squad_metrics(predictions: Mapping[str, str], references: Mapping[str, list[str]]) -> dict[str, float]:
    """Corpus EM/F1 (0-100) of ``predictions`` ``{qid: answer}`` against ``references`` ``{qid: [gold]}``.
    Every gold question counts; a missing prediction scores 0 and is reported in ``missing``. Predictions for
    questions not in ``references`` are ignored, as officially."""
    if not references:
        return {"exact_match": 0.0, "f1": 0.0, "total": 0, "missing": 0}
    exact, f1, missing = 0.0, 0.0, 0
    for qid, golds in references.items():
        if qid not in predictions:
            missing += 1
            continue
        exact += metric_max_over_ground_truths(exact_match_score, predictions[qid], golds)
        f1 += metric_max_over_ground_truths(f1_score, predictions[qid], golds)
    total = len(references)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total, "total": total, "missing": missing}
