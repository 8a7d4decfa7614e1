"""FEVER label accuracy, macro F1 and the FEVER score (Thorne et al., 2018).

The official ``fever-scorer`` package does not build here (its setup.py fails under current setuptools),
so the FEVER score is implemented from its published definition (``fever/scorer.py``, ``is_strictly_correct``
with ``max_evidence=5``): a claim counts when its predicted label is right **and** either the gold label is
NOT ENOUGH INFO, or every sentence of at least one complete gold evidence set is among the first five
predicted evidence sentences. A right label with incomplete evidence does not count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
MAX_EVIDENCE = 5


def evidence_complete(gold_sets: Sequence[Sequence], predicted_evidence: Sequence, max_evidence: int = MAX_EVIDENCE) -> bool:
    """Whether some gold set's ``(page, sentence)`` pairs all lie in the first ``max_evidence`` predictions.
    ``gold_sets`` are official FEVER evidence sets (``[annotation_id, evidence_id, page, sentence]`` items) or
    plain ``[page, sentence]`` pairs; ``predicted_evidence`` is ``[[page, sentence], ...]``."""
    predicted = {(str(page), int(sentence)) for page, sentence in list(predicted_evidence)[:max_evidence]}
    for gold_set in gold_sets:
        wanted = {(str(item[-2]), int(item[-1])) for item in gold_set if item[-2] is not None}
        if wanted and wanted <= predicted:
            return True
    return False


def fever_score(instances: Sequence[Mapping], max_evidence: int = MAX_EVIDENCE) -> float:
    """FEVER score in percent over ``instances`` with ``label``, ``predicted_label``, ``evidence`` (gold sets)
    and ``predicted_evidence``."""
    if not instances:
        return 0.0
    strict = 0
    for item in instances:
        if item["predicted_label"].upper() != item["label"].upper():
            continue
        if item["label"].upper() == "NOT ENOUGH INFO" or evidence_complete(
                item["evidence"], item.get("predicted_evidence", []), max_evidence):
            strict += 1
    return 100 * strict / len(instances)


def label_scores(predicted: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Label accuracy and macro F1 (percent). Macro F1 averages the classes that occur in gold or
    predictions, so a two-label set (FEVER-Symmetric) is not pulled down by a third absent class."""
    if not gold:
        return {"accuracy": 0.0, "macro_f1": 0.0}
    accuracy = sum(p == g for p, g in zip(predicted, gold)) / len(gold)
    f1s = []
    for label in sorted(set(gold) | set(predicted)):
        true_pos = sum(p == g == label for p, g in zip(predicted, gold))
        pred_count, gold_count = sum(p == label for p in predicted), sum(g == label for g in gold)
        precision = true_pos / pred_count if pred_count else 0.0
        recall = true_pos / gold_count if gold_count else 0.0
        f1s.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return {"accuracy": 100 * accuracy, "macro_f1": 100 * sum(f1s) / len(f1s)}
