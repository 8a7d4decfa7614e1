"""Coreference metrics MUC, B³, CEAF-φ4 and their average (the CoNLL-2012 score), reference-scorer semantics.

The semantics are those of the reference scorer v8.01 (Pradhan et al., 2014, "Scoring Coreference
Partitions of Predicted Mentions: A Reference Implementation"):

- every metric is computed from per-document numerators and denominators that are summed over the corpus
  (micro-averaged), then P = Σ num_P / Σ den_P, R = Σ num_R / Σ den_R, F1 = 2PR / (P + R);
- mentions are compared exactly (a predicted span that is not a gold span is a twinless mention and
  simply counts against the score; no alignment of near-miss spans);
- singleton clusters count as given (B³ and CEAF-φ4 see them, MUC gives them no link);
  ``keep_singletons=False`` drops single-mention clusters from key and response first, as coval's flag does.

The fast path builds one contingency matrix per document (``overlap[k, r] = |K_k ∩ R_r|``) and reads all
three metrics from it; ``*_literal`` functions compute the same counts straight from the definitions and
the tests check that they agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from corefbert.errors import CorefBertError

Clusters = Sequence[Sequence[Hashable]]
METRICS = ("muc", "b3", "ceafe")


def as_sets(clusters: Clusters, *, keep_singletons: bool = True, where: str = "") -> list[frozenset]:
    """Clusters as frozensets of hashable mentions (lists such as JSON's ``[3, 5]`` become tuples). A mention
    in two clusters of one document is a contradiction the reference scorer does not define: it is a one-line
    error."""
    seen, out = {}, []
    for index, cluster in enumerate(clusters):
        members = frozenset(tuple(m) if isinstance(m, list) else m for m in cluster)
        for mention in members:
            if mention in seen:
                raise CorefBertError(f"{where}mention {mention!r} is in clusters {seen[mention]} and {index}; "
                                     "each mention belongs to one cluster")
            seen[mention] = index
        if members and (keep_singletons or len(members) > 1):
            out.append(members)
    return out


# ------------------------------------------------------------------------------------------- fast path


def contingency(key: list[frozenset], response: list[frozenset]) -> np.ndarray:
    """``[num_key, num_response]``: ``overlap[k, r] = |K_k ∩ R_r|``."""
    overlap = np.zeros((len(key), len(response)), dtype=np.int64)
    owner = {mention: r for r, cluster in enumerate(response) for mention in cluster}
    for k, cluster in enumerate(key):
        for mention in cluster:
            if mention in owner:
                overlap[k, owner[mention]] += 1
    return overlap


def document_counts(key: list[frozenset], response: list[frozenset]) -> dict[str, np.ndarray]:
    """Per metric ``[recall_num, recall_den, precision_num, precision_den]`` for one document."""
    overlap = contingency(key, response).astype(np.float64)  # [K, R]
    key_sizes = np.array([len(c) for c in key], dtype=np.float64)  # [K]
    response_sizes = np.array([len(c) for c in response], dtype=np.float64)  # [R]
    # MUC (Vilain et al. 1995): R = Σ_k (|k| − |p(k)|) / Σ_k (|k| − 1), where p(k) is k's partition by the
    # response, each mention outside every response cluster a part of its own: |k| − |p(k)| equals
    # (mentions of k in some response cluster) − (response clusters k meets).
    muc = [np.sum(overlap.sum(1) - (overlap > 0).sum(1)), np.sum(key_sizes - 1),
           np.sum(overlap.sum(0) - (overlap > 0).sum(0)), np.sum(response_sizes - 1)]
    # B³ (Bagga & Baldwin 1998), the scorer's cluster form: R = Σ_k Σ_r |k ∩ r|² / |k| / Σ_k |k|.
    squares = overlap ** 2  # [K, R]
    b3 = [np.sum(squares.sum(1) / np.maximum(key_sizes, 1)), key_sizes.sum(),
          np.sum(squares.sum(0) / np.maximum(response_sizes, 1)), response_sizes.sum()]
    # CEAF-φ4 (Luo 2005): φ4(k, r) = 2|k ∩ r| / (|k| + |r|); the best one-to-one alignment g* maximises
    # Φ(g*) = Σ φ4(k, g*(k)); R = Φ(g*) / |K|, P = Φ(g*) / |R|.
    similarity = 2 * overlap / np.maximum(key_sizes[:, None] + response_sizes[None, :], 1)  # [K, R]
    best = aligned_total(similarity)
    ceafe = [best, float(len(key)), best, float(len(response))]
    return {"muc": np.array(muc), "b3": np.array(b3), "ceafe": np.array(ceafe)}


def aligned_total(similarity: np.ndarray) -> float:
    """Max over one-to-one alignments of rows to columns of the summed similarity (Kuhn-Munkres)."""
    if similarity.size == 0:
        return 0.0
    rows, cols = linear_sum_assignment(-similarity)
    return float(similarity[rows, cols].sum())


# ------------------------------------------------------------------------------------------ the corpus


def f1(precision: float, recall: float) -> float:
    """Harmonic mean, 0 when both are 0."""
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def coref_scores(predicted: list[Clusters], gold: list[Clusters], *, keep_singletons: bool = True,
                 literal: bool = False) -> dict[str, float]:
    """MUC, B³, CEAF-φ4 P/R/F1 and their average F1, in percent, summed over documents as the scorer does.
    ``predicted`` and ``gold``: one cluster list per document (the same order), each cluster a sequence of
    hashable mentions such as ``(start, end)``. ``literal=True`` uses the definition-by-definition reference
    implementation (slow; for tests)."""
    if len(predicted) != len(gold):
        raise CorefBertError(f"{len(predicted)} predicted documents for {len(gold)} gold documents; "
                             "pass one cluster list per document, in the same order")
    totals = {name: np.zeros(4) for name in METRICS}
    for index, (response, key) in enumerate(zip(predicted, gold)):
        key_sets = as_sets(key, keep_singletons=keep_singletons, where=f"gold document {index}: ")
        response_sets = as_sets(response, keep_singletons=keep_singletons, where=f"predicted document {index}: ")
        counts = (document_counts_literal if literal else document_counts)(key_sets, response_sets)
        for name in METRICS:
            totals[name] += counts[name]
    scores = {}
    for name in METRICS:
        recall_num, recall_den, precision_num, precision_den = totals[name]
        recall = recall_num / recall_den if recall_den else 0.0
        precision = precision_num / precision_den if precision_den else 0.0
        scores.update({f"{name}_p": 100 * precision, f"{name}_r": 100 * recall,
                       f"{name}_f1": 100 * f1(precision, recall)})
    scores["avg_f1"] = sum(scores[f"{name}_f1"] for name in METRICS) / len(METRICS)
    return {name: float(value) for name, value in scores.items()}


# ------------------------------------------------------------------------- literal reference (for tests)


def muc_literal(key: list[frozenset], response: list[frozenset]) -> list[float]:
    """Vilain et al. (1995) as written: partition each cluster by the other side, count missing links."""
    def side(clusters, other):
        numerator = denominator = 0
        for cluster in clusters:
            parts = [cluster & o for o in other if cluster & o]
            parts += [{m} for m in cluster if not any(m in o for o in other)]
            numerator += len(cluster) - len(parts)
            denominator += len(cluster) - 1
        return numerator, denominator
    return [*side(key, response), *side(response, key)]


def b_cubed_literal(key: list[frozenset], response: list[frozenset]) -> list[float]:
    """Bagga & Baldwin (1998) per mention: recall of m = |K(m) ∩ R(m)| / |K(m)|, R(m) = {} when m is twinless."""
    def side(clusters, other):
        numerator = 0.0
        for cluster in clusters:
            for mention in cluster:
                partner = next((o for o in other if mention in o), frozenset())
                numerator += len(cluster & partner) / len(cluster)
        return numerator, sum(len(c) for c in clusters)
    return [*side(key, response), *side(response, key)]


def ceafe_literal(key: list[frozenset], response: list[frozenset]) -> list[float]:
    """Luo (2005) with φ4, the best alignment by trying every one (small inputs only)."""
    def phi4(k, r):
        return 2 * len(k & r) / (len(k) + len(r))
    small, large, flipped = (key, response, False) if len(key) <= len(response) else (response, key, True)
    best = 0.0
    for chosen in itertools.permutations(range(len(large)), len(small)):
        pairs = [(small[i], large[j]) for i, j in enumerate(chosen)]
        best = max(best, sum(phi4(*((b, a) if flipped else (a, b))) for a, b in pairs))
    return [best, len(key), best, len(response)]


def document_counts_literal(key: list[frozenset], response: list[frozenset]) -> dict[str, np.ndarray]:
    """:func:`document_counts` computed from the definitions, one metric at a time."""
    return {"muc": np.array(muc_literal(key, response), dtype=np.float64),
            "b3": np.array(b_cubed_literal(key, response), dtype=np.float64),
            "ceafe": np.array(ceafe_literal(key, response), dtype=np.float64)}
