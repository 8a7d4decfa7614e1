"""DocRED metrics (corefbert/metrics/docred.py) on hand-computed cases: precision, recall, F1 and Ign F1 against
the training facts, the threshold cut, and the offline `evaluate` module."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import FIXTURES

from corefbert.metrics.docred import best_threshold, docred_scores, training_facts

DOCRED = FIXTURES / "docred"


def _load(name):
    return json.loads((DOCRED / name).read_text(encoding="utf-8"))


def test_ign_f1_ignores_a_fact_shared_with_train():
    train, dev = _load("train.json"), _load("dev.json")
    facts = training_facts(train)
    assert ("Oslo", "Norway", "P17") in facts and ("She", "Norway", "P27") in facts
    predictions = [
        {"title": "Karl Dahl", "h_idx": 0, "t_idx": 1, "r": "P17"},  # correct, (Oslo, Norway, P17) in train
        {"title": "Karl Dahl", "h_idx": 2, "t_idx": 1, "r": "P27"},  # correct, not in train
        {"title": "Bergen", "h_idx": 1, "t_idx": 0, "r": "P17"},  # wrong direction
        {"title": "Bergen", "h_idx": 1, "t_idx": 0, "r": "P17"},  # a duplicate counts once
    ]
    scores = docred_scores(predictions, dev, facts)
    # 3 gold facts, 3 distinct predictions, 2 correct of which 1 in train.
    assert scores["precision"] == pytest.approx(100 * 2 / 3)
    assert scores["recall"] == pytest.approx(100 * 2 / 3)
    assert scores["f1"] == pytest.approx(100 * 2 / 3)
    assert scores["ign_precision"] == pytest.approx(100 * 1 / 2)  # (2 - 1) / (3 - 1)
    assert scores["ign_f1"] == pytest.approx(100 * 4 / 7)  # 2 * 1/2 * 2/3 / (1/2 + 2/3)
    assert docred_scores(predictions, dev)["ign_f1"] == pytest.approx(scores["f1"])


def test_best_threshold_picks_the_best_realizable_cut():
    threshold, f1 = best_threshold(np.array([0.9, 0.8, 0.8, 0.3]), np.array([1, 0, 1, 0]), num_gold=3)
    assert threshold == pytest.approx(0.8) and f1 == pytest.approx(100 * 2 / 3)
    # The cut after the first 0.8 would give F1 1.0 but ">= 0.8" predicts both tied facts.
    threshold, f1 = best_threshold(np.array([0.9, 0.8, 0.8]), np.array([1, 1, 0]), num_gold=2)
    assert threshold == pytest.approx(0.8) and f1 == pytest.approx(80.0)


def test_docred_evaluate_module_loads_offline_and_matches():
    from corefbert.metrics import load_metric

    train, dev = _load("train.json"), _load("dev.json")
    references = [{"title": d["title"], "entity_names": [[m["name"] for m in e] for e in d["vertexSet"]],
                   "h": [x["h"] for x in d["labels"]], "t": [x["t"] for x in d["labels"]],
                   "r": [x["r"] for x in d["labels"]]} for d in dev]
    predictions = [{"title": "Karl Dahl", "h_idx": [0, 2], "t_idx": [1, 1], "r": ["P17", "P27"]},
                   {"title": "Bergen", "h_idx": [1], "t_idx": [0], "r": ["P17"]}]
    result = load_metric("docred").compute(predictions=predictions, references=references,
                                           train_facts=[list(f) for f in training_facts(train)])
    assert result["f1"] == pytest.approx(100 * 2 / 3) and result["ign_f1"] == pytest.approx(100 * 4 / 7)
