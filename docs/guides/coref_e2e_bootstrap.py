"""Test scores of the 90-document LitBank runs, with a 95% document-bootstrap interval of avg F1 and of its
paired difference from the first encoder named (docs/guides/coref_e2e.md, Results):

    python docs/guides/coref_e2e_bootstrap.py RUNS_FOLDER bilstm lsl asl bert
    python docs/guides/coref_e2e_bootstrap.py RUNS_FOLDER rule bert    # MiniLM minus the string-match rule

RUNS_FOLDER holds ``litbank90_<encoder>/predict_predictions.conll``; an encoder without one is said to be missing.
``rule`` is no run: the string-match baseline (``corefbert.tasks.coref_e2e.string_match``) on the same documents.
The interval resamples the 10 test documents (1,000 draws, the same draws for every encoder) and recomputes the
corpus-level metrics on each draw, as the CoNLL scorer sums over documents.
"""

import os
import sys

import numpy as np
import yaml

from corefbert.metrics.bootstrap import percentile_interval, resample_indices
from corefbert.metrics.coref_metrics import coref_scores
from corefbert.tasks.coref_e2e.string_match import string_match_clusters
from corefbert.text.conll import read_conll

runs, encoders = sys.argv[1], sys.argv[2:]
with open("docs/guides/coref_e2e_litbank90.yaml", encoding="utf-8") as config:
    files = yaml.safe_load(config)["test_file"]
documents = read_conll(files)
gold = [[c for c in d.clusters if len(c) > 1] for d in documents]  # --drop_singletons
draws = resample_indices(len(gold), n_samples=1000, seed=0)  # [draws, documents]
first = None
for encoder in encoders:
    path = os.path.join(runs, f"litbank90_{encoder}", "predict_predictions.conll")
    if encoder == "rule":
        predicted = [string_match_clusters(d) for d in documents]
    elif not os.path.exists(path):
        print(f"{encoder}: missing ({path})")
        continue
    else:
        predicted = [d.clusters for d in read_conll(path)]
    scores = coref_scores(predicted, gold)
    boot = np.array([coref_scores([predicted[i] for i in draw], [gold[i] for i in draw])["avg_f1"]
                     for draw in draws])
    first = boot if first is None else first
    low, high = percentile_interval(boot)
    diff_low, diff_high = percentile_interval(boot - first)
    print(f"{encoder}: MUC {scores['muc_f1']:.1f}  B3 {scores['b3_f1']:.1f}  CEAF-phi4 {scores['ceafe_f1']:.1f}  "
          f"avg {scores['avg_f1']:.1f} [95% {low:.1f}, {high:.1f}]; minus the first: [{diff_low:+.1f}, {diff_high:+.1f}]")
