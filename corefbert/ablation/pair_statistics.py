"""Document-bootstrap statistics of a mention-pair classifier (the frozen-feature probe,
:mod:`corefbert.ablation.frozen_probe`): AUC and F1 with percentile intervals, and the paired difference of two
checkpoints (or two layers) on the same test documents.

Pairs of one document share mentions and context, so the bootstrap draws *documents* with replacement and keeps
all their pairs (a cluster bootstrap). Both figures are functions of a few numbers per document, so a resample is
a weight vector ``w`` (how often each document was drawn) and costs a few dot products, not a rescoring:

- **AUC** (the Mann-Whitney statistic, ties counted half, as ``sklearn.metrics.roc_auc_score``): with ``P_d``
  positives and ``N_d`` negatives in document ``d`` and ``C[d, e] = Σ_{i ∈ pos(d)} Σ_{j ∈ neg(e)}
  (1[s_i > s_j] + ½ 1[s_i = s_j])``, the resample's AUC is ``wᵀ C w / ((w · P) (w · N))``: every copy of
  document ``d`` meets every copy of document ``e``.
- **F1** of the positive class: per document ``(tp, fp, fn)``, pooled ``2tp / (2tp + fp + fn)`` over the resample
  (:func:`corefbert.ablation.probes.statistic`'s GAP F1, here as a fraction).

``tests/references.py::pair_bootstrap_reference`` rebuilds every resample's pairs and scores them with
scikit-learn; the tests hold these formulas to it.
"""

from __future__ import annotations

import numpy as np

from corefbert.ablation.probes import GAP_F1, statistic
from corefbert.errors import CorefBertError
from corefbert.metrics.bootstrap import percentile_interval, resample_weights

METRICS = ("auc", "f1")


def document_statistics(scores: list[np.ndarray], labels: list[np.ndarray]) -> dict[str, dict]:
    """Per-document statistics of a classifier's ``scores`` (per document ``[P_d]``, > 0 decides positive) against
    ``labels`` (``[P_d]`` bool): ``{"auc": {"pairs_above": C [D, D], "positives": [D], "negatives": [D]},
    "f1": {"counts": [D, 3] (tp, fp, fn)}}``, as lists (JSON-ready)."""
    positives = [np.asarray(s, dtype=np.float64)[np.asarray(y, dtype=bool)] for s, y in zip(scores, labels)]
    negatives = [np.sort(np.asarray(s, dtype=np.float64)[~np.asarray(y, dtype=bool)]) for s, y in zip(scores, labels)]
    above = np.zeros((len(scores), len(scores)))  # [D, D]
    for e, negative in enumerate(negatives):
        for d, positive in enumerate(positives):
            below = np.searchsorted(negative, positive, side="left")  # [P_d] negatives scored lower
            tied = np.searchsorted(negative, positive, side="right") - below
            above[d, e] = below.sum() + 0.5 * tied.sum()
    f1_counts = []
    for s, y in zip(scores, labels):
        decided, gold = np.asarray(s) > 0, np.asarray(y, dtype=bool)
        f1_counts.append([int((decided & gold).sum()), int((decided & ~gold).sum()), int((~decided & gold).sum())])
    return {"auc": {"pairs_above": above.tolist(), "positives": [len(p) for p in positives],
                    "negatives": [len(n) for n in negatives]},
            "f1": {"counts": f1_counts}}


def figure_values(metric: str, stats: dict, weights: np.ndarray) -> np.ndarray:
    """``[R]``: the ``metric`` (``auc`` or ``f1``) of each resample of documents weighted by ``weights`` ``[R, D]``;
    NaN for an AUC whose resample has no positive or no negative pair."""
    weights = np.asarray(weights, dtype=np.float64)
    if metric == "auc":
        above = np.asarray(stats["pairs_above"], dtype=np.float64).reshape(weights.shape[1], weights.shape[1])
        pairs = np.einsum("rd,de,re->r", weights, above, weights)
        total = (weights @ np.asarray(stats["positives"], dtype=np.float64)) * (
            weights @ np.asarray(stats["negatives"], dtype=np.float64))
        return np.divide(pairs, total, out=np.full(len(weights), np.nan), where=total > 0)
    if metric == "f1":
        counts = np.asarray(stats["counts"], dtype=np.float64).reshape(weights.shape[1], 3)
        return statistic(GAP_F1, weights @ counts) / 100.0
    raise ValueError(metric)


def interval(values: np.ndarray, level: float = 0.95) -> list[float] | None:
    """The ``level`` percentile interval ``[low, high]`` of the finite ``values`` (None when there are none)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    low, high = percentile_interval(values, level)
    return [float(low), float(high)]


def frozen_paired_difference(result_a, result_b, figure: str, figure_b: str | None = None, samples: int | None = None,
                            seed: int | None = None, level: float = 0.95) -> dict:
    """The paired document-bootstrap interval of ``figure`` of ``result_a`` minus ``figure_b`` (default: the same
    figure) of ``result_b``: results of :func:`corefbert.ablation.frozen_probe.frozen_coref_probe` on the same
    test documents (two checkpoints, say an arm and WWM; or one result twice, two layers).

    ``result_a``/``result_b`` may also be lists of results, seed ``k`` of A paired with seed ``k`` of B: each
    resample draws documents once for every seed and its value is the mean over seeds of the differences (the
    cluster bootstrap of :func:`corefbert.ablation.probes.paired_bootstrap`). ``samples``/``seed`` default to the
    first result's own. Returns ``{"difference", "ci_low", "ci_high", "documents", "seeds", "samples"}``;
    ``difference`` is None (and the interval too) when a figure is undefined on the full test set.
    """
    runs_a = result_a if isinstance(result_a, list) else [result_a]
    runs_b = result_b if isinstance(result_b, list) else [result_b]
    if len(runs_a) != len(runs_b) or not runs_a:
        raise ValueError(f"unpaired results: {len(runs_a)} vs {len(runs_b)}")
    documents = runs_a[0]["frozen_test_documents"]
    if any(r["frozen_test_documents"] != documents for r in runs_a + runs_b):
        raise CorefBertError(f"{figure}: the results were scored on different test documents; a paired interval needs "
                             "the same ones (probe both checkpoints with the same --test_file)")
    samples = runs_a[0]["frozen_bootstrap_samples"] if samples is None else samples
    seed = runs_a[0]["frozen_seed"] if seed is None else seed
    figure_b = figure if figure_b is None else figure_b
    metric = figure.removeprefix("frozen_").split("_", 1)[0]
    if metric not in METRICS or figure_b.removeprefix("frozen_").split("_", 1)[0] != metric:
        raise ValueError(f"{figure} vs {figure_b}: not two figures of one metric of {METRICS}")
    weights = resample_weights(len(documents), samples, seed)  # [R, D]
    everything = np.ones((1, len(documents)))

    def difference(w: np.ndarray) -> np.ndarray:  # [R]: mean over seeds of A - B
        return np.mean([figure_values(metric, a["frozen_per_document"][figure.removeprefix("frozen_")], w)
                        - figure_values(metric, b["frozen_per_document"][figure_b.removeprefix("frozen_")], w)
                        for a, b in zip(runs_a, runs_b)], axis=0)

    observed = float(difference(everything)[0])
    bounds = interval(difference(weights), level) if np.isfinite(observed) else None
    return {"difference": observed if np.isfinite(observed) else None,
            "ci_low": bounds and bounds[0], "ci_high": bounds and bounds[1], "documents": len(documents),
            "seeds": len(runs_a), "samples": samples}
