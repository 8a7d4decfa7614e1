"""GLUE metrics: accuracy, F1, Matthews correlation, Pearson/Spearman, and the standard metric per task.

Pure functions over label ids (or scores for STS-B), named as in the GLUE leaderboard and the Hugging Face
``glue`` metric. The single-metric functions return fractions; :func:`glue_metrics`, what the CLI and the
``evaluate`` module report, gives percentages (as every other metric of this toolkit). Correlations of a
constant series are undefined and come out as NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from corefbert.errors import CorefBertError

# The leaderboard's metrics per task (MNLI's mismatched half is scored with the same function).
GLUE_TASK_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("matthews_correlation",), "sst2": ("accuracy",), "mrpc": ("accuracy", "f1"),
    "qqp": ("accuracy", "f1"), "stsb": ("pearson", "spearmanr"), "mnli": ("accuracy",),
    "qnli": ("accuracy",), "rte": ("accuracy",), "wnli": ("accuracy",),
}

# The metric that picks the best checkpoint (BERT's paper reports F1 for MRPC/QQP, Spearman for STS-B).
GLUE_MAIN_METRIC: dict[str, str] = {
    "cola": "matthews_correlation", "sst2": "accuracy", "mrpc": "f1", "qqp": "f1", "stsb": "spearmanr",
    "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy", "wnli": "accuracy",
}


def canonical_task_name(name: str) -> str:
    """``"SST-2"``, ``"sst_2"``, ``"STS-B"``, ``"MNLI"`` -> ``"sst2"``, ``"sst2"``, ``"stsb"``, ``"mnli"``."""
    key = name.lower().replace("-", "").replace("_", "")
    if key not in GLUE_TASK_METRICS:
        raise CorefBertError(f"unknown GLUE task {name!r}; use one of {', '.join(GLUE_TASK_METRICS)}")
    return key


def _arrays(predictions: Sequence, references: Sequence) -> tuple[np.ndarray, np.ndarray]:
    predictions, references = np.asarray(predictions), np.asarray(references)
    if predictions.shape != references.shape or predictions.ndim != 1:
        raise ValueError(f"predictions {predictions.shape} and references {references.shape} must be equal 1-D")
    if len(predictions) == 0:
        raise ValueError("no predictions to score")
    return predictions, references


def accuracy(predictions: Sequence[int], references: Sequence[int]) -> float:
    """Share of predictions equal to the reference."""
    predictions, references = _arrays(predictions, references)
    return float(np.mean(predictions == references))


def f1(predictions: Sequence[int], references: Sequence[int]) -> float:
    """Binary F1 of the positive class 1 (0.0 when there is no true positive)."""
    from sklearn.metrics import f1_score

    predictions, references = _arrays(predictions, references)
    return float(f1_score(references, predictions, pos_label=1, average="binary", zero_division=0.0))


def matthews_correlation(predictions: Sequence[int], references: Sequence[int]) -> float:
    """Matthews correlation coefficient (CoLA); 0.0 when a marginal is constant, as scikit-learn defines it."""
    from sklearn.metrics import matthews_corrcoef

    predictions, references = _arrays(predictions, references)
    return float(matthews_corrcoef(references, predictions))


def _correlation(function, predictions: Sequence[float], references: Sequence[float]) -> float:
    """``function`` (scipy's ``pearsonr`` or ``spearmanr``) of the two series; NaN when either is constant."""
    predictions, references = _arrays(predictions, references)
    if np.all(predictions == predictions[0]) or np.all(references == references[0]):
        return float("nan")
    return float(function(predictions.astype(float), references.astype(float))[0])


def pearson(predictions: Sequence[float], references: Sequence[float]) -> float:
    """Pearson correlation (STS-B)."""
    from scipy.stats import pearsonr

    return _correlation(pearsonr, predictions, references)


def spearmanr(predictions: Sequence[float], references: Sequence[float]) -> float:
    """Spearman rank correlation (STS-B), ties ranked by their mean rank."""
    from scipy.stats import spearmanr as scipy_spearmanr

    return _correlation(scipy_spearmanr, predictions, references)


_FUNCTIONS = {"accuracy": accuracy, "f1": f1, "matthews_correlation": matthews_correlation,
              "pearson": pearson, "spearmanr": spearmanr}


def glue_metrics(task_name: str, predictions: Sequence, references: Sequence) -> dict[str, float]:
    """The standard metrics of GLUE task ``task_name`` (any spelling :func:`canonical_task_name` takes),
    in percent (accuracy 50.0, not 0.5; correlations x 100 likewise)."""
    task = canonical_task_name(task_name)
    return {name: 100 * _FUNCTIONS[name](predictions, references) for name in GLUE_TASK_METRICS[task]}
