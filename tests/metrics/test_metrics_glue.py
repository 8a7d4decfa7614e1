"""GLUE metrics on cases computed by hand, and the offline ``evaluate`` module."""

from __future__ import annotations

import math

import pytest

from corefbert.errors import CorefBertError
from corefbert.metrics import available_metrics, load_metric, metric_path
from corefbert.metrics.glue import (
    accuracy,
    canonical_task_name,
    f1,
    glue_metrics,
    matthews_correlation,
    pearson,
    spearmanr,
)

PREDICTIONS = [1, 0, 1, 1]
REFERENCES = [1, 1, 0, 1]  # TP 2, FP 1, FN 1, TN 0


def test_accuracy_and_f1_by_hand():
    assert accuracy(PREDICTIONS, REFERENCES) == pytest.approx(2 / 4)
    # precision 2/3, recall 2/3
    assert f1(PREDICTIONS, REFERENCES) == pytest.approx(2 / 3)
    assert f1([0, 0], [1, 0]) == 0.0  # no true positive


def test_matthews_correlation_by_hand():
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (0 - 1) / sqrt(3*3*1*1)
    assert matthews_correlation(PREDICTIONS, REFERENCES) == pytest.approx(-1 / 3)
    # TP 2, TN 2, FP 1, FN 0: (4 - 0) / sqrt(3*2*3*2)
    assert matthews_correlation([1, 1, 0, 0, 1], [1, 0, 0, 0, 1]) == pytest.approx(4 / 6)
    assert matthews_correlation([1, 1, 1], [1, 0, 1]) == 0.0  # constant prediction


def test_correlations_by_hand():
    # x - mean = [-1, 0, 1], y - mean = [-7/3, -1/3, 8/3]: r = 5 / (sqrt(2) * sqrt(114) / 3)
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 7.0]) == pytest.approx(15 / math.sqrt(228))
    # ranks [1, 2, 3] vs [1, 3, 2]: 1 - 6 * 2 / (3 * (9 - 1))
    assert spearmanr([1.0, 2.0, 3.0], [1.0, 5.0, 3.0]) == pytest.approx(0.5)
    assert math.isnan(pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))


def test_metric_map_per_task():
    # Reported in percent, as the papers and every other metric of the toolkit.
    assert glue_metrics("MRPC", PREDICTIONS, REFERENCES) == pytest.approx({"accuracy": 50.0, "f1": 100 * 2 / 3})
    assert set(glue_metrics("qqp", PREDICTIONS, REFERENCES)) == {"accuracy", "f1"}
    assert glue_metrics("CoLA", PREDICTIONS, REFERENCES) == pytest.approx({"matthews_correlation": -100 / 3})
    assert set(glue_metrics("STS-B", [1.0, 2.0, 3.0], [1.0, 5.0, 3.0])) == {"pearson", "spearmanr"}
    for task in ("SST-2", "mnli", "qnli", "rte", "wnli"):
        assert glue_metrics(task, PREDICTIONS, REFERENCES) == {"accuracy": 50.0}
    assert canonical_task_name("sst_2") == "sst2"


def test_bad_inputs():
    with pytest.raises(CorefBertError, match="unknown GLUE task 'mnli2'"):
        glue_metrics("mnli2", [1], [1])
    with pytest.raises(ValueError, match="must be equal"):
        accuracy([1, 0], [1])
    with pytest.raises(CorefBertError, match="unknown metric 'glu'"):
        metric_path("glu")


def test_evaluate_module_loads_offline_and_matches():
    assert "glue" in available_metrics()
    mrpc = load_metric("glue", "mrpc")
    assert mrpc.compute(predictions=PREDICTIONS, references=REFERENCES) == pytest.approx(
        {"accuracy": 50.0, "f1": 100 * 2 / 3}
    )
    stsb = load_metric("glue", "stsb")
    assert stsb.compute(predictions=[1.0, 2.0, 3.0], references=[1.0, 5.0, 3.0])["spearmanr"] == pytest.approx(50.0)
    matched = load_metric("glue", "mnli_mismatched")
    assert matched.compute(predictions=[0, 2, 1], references=[0, 2, 2]) == pytest.approx({"accuracy": 100 * 2 / 3})
