"""Coreference scoring: one contingency matrix per document vs cluster-by-cluster set intersections.

    python benchmarks/coref_metrics.py                 # the shared LitBank files, 5 repeats
    python benchmarks/coref_metrics.py --copies 4      # the corpus 4 times over (a bigger test set)

:func:`corefbert.metrics.coref_metrics.coref_scores` counts ``|K_k ∩ R_r|`` once per document and reads MUC,
B³ and CEAF-φ4 from that matrix. The obvious way (the formulas as written, as the ``scorch`` package does)
intersects every key cluster with every response cluster separately for each metric. Both score the same
system output (gold clusters with every third mention dropped, the two largest clusters merged and three
clusters given wrong spans); the script checks the scores agree and prints the time ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from corefbert.metrics.coref_metrics import as_sets, b_cubed_literal, coref_scores, f1, muc_literal
from corefbert.text.conll import read_conll

LITBANK = Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2012" / "litbank"


def system_output(gold: list) -> list:
    predicted = []
    for clusters in gold:
        kept = sorted((c for c in ([m for i, m in enumerate(c) if i % 3 != 2] for c in clusters) if c),
                      key=len, reverse=True)
        predicted.append([kept[0] + kept[1]] + [[("wrong", s, e) for s, e in c] for c in kept[2:5]] + kept[5:])
    return predicted


def pairwise_scores(predicted: list, gold: list) -> dict[str, float]:
    """The obvious alternative: per metric, every key cluster against every response cluster as sets."""
    totals = {name: np.zeros(4) for name in ("muc", "b3", "ceafe")}
    for response, key in zip(predicted, gold):
        key, response = as_sets(key), as_sets(response)
        totals["muc"] += muc_literal(key, response)
        totals["b3"] += b_cubed_literal(key, response)
        similarity = np.array([[2 * len(k & r) / (len(k) + len(r)) for r in response] for k in key])
        rows, cols = linear_sum_assignment(-similarity)
        best = similarity[rows, cols].sum()
        totals["ceafe"] += [best, len(key), best, len(response)]
    out = {}
    for name, (rn, rd, pn, pd) in totals.items():
        out[f"{name}_f1"] = 100 * f1(pn / pd, rn / rd)
    return out


def timed(fn, repeats: int) -> tuple[float, dict]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conll", default=str(LITBANK / "*.conll"), help="CoNLL files or a glob (gold).")
    parser.add_argument("--copies", type=int, default=1, help="Score the documents this many times over.")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    gold = [d.clusters for d in read_conll(args.conll)] * args.copies
    predicted = system_output(gold)
    mentions = sum(len(m) for c in gold for m in c)
    fast_time, fast = timed(lambda: coref_scores(predicted, gold), args.repeats)
    slow_time, slow = timed(lambda: pairwise_scores(predicted, gold), args.repeats)
    for name, value in slow.items():
        assert abs(fast[name] - value) < 1e-9, (name, fast[name], value)
    print(f"{len(gold)} documents, {mentions} gold mentions; avg F1 {fast['avg_f1']:.2f} (both ways)")
    print(f"contingency matrix: {fast_time * 1000:.1f} ms   pairwise sets: {slow_time * 1000:.1f} ms   "
          f"ratio {slow_time / fast_time:.1f}x")


if __name__ == "__main__":
    main()
