"""DocRED relation-extraction F1 and Ign F1, as the official ``evaluation.py`` (thunlp/DocRED) computes them.

A prediction is a fact ``(title, h_idx, t_idx, r)``. Precision = correct / predicted, recall = correct /
gold facts. **Ign F1** excludes facts already seen in the training annotations: a correct prediction is
"in train" when some mention name of its head and some mention name of its tail, with the same relation,
form a training fact; those are removed from both the correct count and the predicted count of the
precision, while recall stays the plain one (exactly the official formula).

A scoring model's threshold is chosen on dev (:func:`best_threshold`, as the DocRED baseline does) and
reused unchanged on test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def training_facts(documents: Iterable[Mapping]) -> set[tuple[str, str, str]]:
    """``(head mention name, tail mention name, relation id)`` for every mention pair of every training fact.
    ``documents`` are DocRED dicts (``vertexSet``, ``labels`` with ``h``, ``t``, ``r``)."""
    facts: set[tuple[str, str, str]] = set()
    for doc in documents:
        entities = doc["vertexSet"]
        for label in doc.get("labels", []):
            for head in entities[label["h"]]:
                for tail in entities[label["t"]]:
                    facts.add((head["name"], tail["name"], label["r"]))
    return facts


def docred_scores(predictions: Sequence[Mapping], gold_documents: Sequence[Mapping],
                  train_facts: set[tuple[str, str, str]] | None = None) -> dict[str, float]:
    """F1 and Ign F1 (percent) of ``predictions`` (``{title, h_idx, t_idx, r}``) against ``gold_documents``.
    Duplicated predictions count once (the official script de-duplicates the submission). Without
    ``train_facts`` the Ign scores equal the plain ones."""
    return scores_from_counts(docred_counts(predictions, gold_documents, train_facts))


def docred_counts(predictions: Sequence[Mapping], gold_documents: Sequence[Mapping],
                  train_facts: set[tuple[str, str, str]] | None = None) -> dict[str, int]:
    """What :func:`docred_scores` is computed from: ``predicted``, ``gold``, ``correct`` and
    ``correct_in_train``. Counts of disjoint sets of documents (with distinct titles) add up to the counts of
    their union, so a prediction run can score batch by batch and keep no prediction
    (:func:`scores_from_counts` at the end)."""
    train_facts = train_facts or set()
    gold: set[tuple[str, int, int, str]] = set()
    entities_by_title: dict[str, list] = {}
    for doc in gold_documents:
        entities_by_title[doc["title"]] = doc["vertexSet"]
        for label in doc.get("labels", []):
            gold.add((doc["title"], label["h"], label["t"], label["r"]))
    submitted = {(p["title"], int(p["h_idx"]), int(p["t_idx"]), p["r"]) for p in predictions}
    correct = correct_in_train = 0
    for fact in submitted:
        if fact not in gold:
            continue
        correct += 1
        title, h_idx, t_idx, relation = fact
        entities = entities_by_title[title]
        if any((head["name"], tail["name"], relation) in train_facts
               for head in entities[h_idx] for tail in entities[t_idx]):
            correct_in_train += 1
    return {"predicted": len(submitted), "gold": len(gold), "correct": correct, "correct_in_train": correct_in_train}


def scores_from_counts(counts: Mapping[str, int]) -> dict[str, float]:
    """F1 and Ign F1 (percent) from the counts of :func:`docred_counts` (the official formulas)."""
    correct, predicted, gold = counts["correct"], counts["predicted"], counts["gold"]
    correct_in_train = counts["correct_in_train"]
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    ign_predicted = predicted - correct_in_train
    ign_precision = (correct - correct_in_train) / ign_predicted if ign_predicted else 0.0
    ign_f1 = 2 * ign_precision * recall / (ign_precision + recall) if ign_precision + recall else 0.0
    return {"precision": 100 * precision, "recall": 100 * recall, "f1": 100 * f1,
            "ign_precision": 100 * ign_precision, "ign_f1": 100 * ign_f1,
            "num_predicted": float(predicted), "num_gold": float(gold), "num_correct": float(correct),
            "num_correct_in_train": float(correct_in_train)}


def best_threshold(scores: np.ndarray, is_correct: np.ndarray, num_gold: int) -> tuple[float, float]:
    """The score cut maximizing F1 over ranked candidate facts: returns ``(threshold, f1 in percent)``.
    ``scores`` [N] are the model's probabilities of candidate facts, ``is_correct`` [N] whether each is a gold
    fact (every gold fact at most once). Predicting the facts with ``score >= threshold`` gives the F1
    returned. With no candidates or no gold facts the threshold is 0.5."""
    if len(scores) == 0 or num_gold == 0:
        return 0.5, 0.0
    order = np.argsort(-scores, kind="stable")
    ranked_scores = scores[order]
    correct = np.cumsum(is_correct[order].astype(np.float64))  # [N] correct among the top k+1
    predicted = np.arange(1, len(scores) + 1, dtype=np.float64)
    precision = correct / predicted
    recall = correct / num_gold
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    # Ties: a cut inside a run of equal scores is not realizable with ">= threshold", so keep only the
    # last position of each run of equal scores.
    last_of_run = np.append(ranked_scores[1:] != ranked_scores[:-1], True)
    f1 = np.where(last_of_run, f1, -1.0)
    best = int(np.argmax(f1))
    return float(ranked_scores[best]), 100 * float(f1[best])
