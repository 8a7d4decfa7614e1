"""Test figures of pronoun-pair classifiers with 95% intervals (docs/guides/pronoun_pairs.md, Results):

    python docs/guides/pronoun_pairs_intervals.py PAIRS/test.jsonl RUNS_FOLDER da bilstm lstmn minilm

RUNS_FOLDER holds ``<run>/predict_predictions.jsonl``; a run without one is said to be missing. Pairs from
one document are not independent draws, so the intervals resample the test *documents* (1,000 draws, the
same for every run) and recompute each figure on the pairs of the drawn documents. Each row also gives the
accuracy per pair type, the paired difference in accuracy from answering "not entailed" everywhere (the
majority answer, F1 0, kappa 0), and a threshold-free figure: for how many pronouns the correct replacement
gets a higher P(entailed) than each wrong one of the same pronoun (a tie at the top shares the credit), against
what guessing gets. A model whose argmax never leaves the majority can still rank; one that outputs a
constant cannot.
"""

import os
import sys

import numpy as np

from corefbert.metrics.bootstrap import drawn_members, percentile_interval, resample_indices
from corefbert.metrics.pair_metrics import pair_metrics
from corefbert.text.jsonio import read_jsonl

test_file, runs, names = sys.argv[1], sys.argv[2], sys.argv[3:]
pairs = [pair for _, pair in read_jsonl(test_file)]
documents = [pair["doc_key"] for pair in pairs]
pronoun_of = [(pair["doc_key"], pair["pronoun_index"]) for pair in pairs]
keys = sorted(set(documents))
document_of = np.array([keys.index(d) for d in documents])  # [pairs]
draws = resample_indices(len(keys), n_samples=1000, seed=0)  # [draws, documents]
resamples = drawn_members(document_of, draws)  # every pair of a drawn document, as often as it was drawn


def figures(prediction, label):
    """Accuracy, F1, kappa and accuracy minus the majority answer's, of one set of pairs."""
    metrics = pair_metrics(prediction.tolist(), label.tolist())
    return metrics["accuracy"], metrics["f1"], metrics["kappa"], 100 * ((prediction == label).mean() - (label == 0).mean())


print(f"{len(documents)} test pairs from {len(keys)} documents; 95% intervals from 1,000 document resamples")
print("| run | accuracy | F1 | kappa | correct / in-scope / out-of-scope right | accuracy − majority "
      "| correct replacement ranked first (guessing) |")
print("|---|---|---|---|---|---|---|")
for name in names:
    path = os.path.join(runs, name, "predict_predictions.jsonl")
    if not os.path.exists(path):
        print(f"| {name} | missing ({path}) | | | | | |")
        continue
    rows = sorted((row for _, row in read_jsonl(path)), key=lambda row: row["line"])
    if len(rows) != len(documents):
        sys.exit(f"{path}: {len(rows)} predictions for {len(documents)} test pairs; predict on {test_file}")
    label = np.array([row["label"] for row in rows])
    prediction = np.array([row["prediction"] for row in rows])
    kinds = np.array([row["type"] for row in rows])
    groups = {}
    for index, pronoun in enumerate(pronoun_of):
        groups.setdefault(pronoun, []).append(index)
    credit = guess = ranked = 0
    for members_of_pronoun in groups.values():
        labels = label[members_of_pronoun]
        if labels.sum() != 1 or len(labels) < 2:  # a pronoun with no wrong replacement ranks nothing
            continue
        scores = np.array([rows[i]["p_entailed"] for i in members_of_pronoun])
        top = np.flatnonzero(scores == scores.max())
        credit += labels[top].sum() / len(top)
        guess += 1 / len(labels)
        ranked += 1

    point = figures(prediction, label)
    low, high = percentile_interval([figures(prediction[index], label[index]) for index in resamples])
    cell = [f"{p:.1f} [{lo:.1f}, {hi:.1f}]" for p, lo, hi in zip(point, low, high)]
    cell[2] = f"{point[2]:.2f} [{low[2]:.2f}, {high[2]:.2f}]"
    by_type = " / ".join(f"{int((prediction[kinds == k] == label[kinds == k]).sum())} of {int((kinds == k).sum())}"
                         for k in ("correct", "in_scope", "out_of_scope"))
    print(f"| {name} | {cell[0]} | {cell[1]} | {cell[2]} | {by_type} | {cell[3]} "
          f"| {credit:.0f} of {ranked} ({guess:.0f}) |")
