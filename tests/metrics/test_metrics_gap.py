"""GAP scoring (corefbert/metrics/gap.py) on hand-computed cases: F1 per gender and the bias, the system TSV,
accuracy by group."""

from __future__ import annotations

import pytest

from corefbert.metrics.gap import accuracy, gap_metrics, read_gap_system_tsv


def test_gap_f1_gender_split_hand_computed():
    # ids: (A-coref, B-coref, pronoun)
    gold = {
        "m1": (True, False, "he"),    # system right:            tp 1, tn 1
        "m2": (False, True, "his"),   # system picks A:          fp 1, fn 1
        "m3": (False, False, "him"),  # neither; system picks B: fp 1, tn 1
        "f1": (False, True, "She"),   # system right:            tp 1, tn 1
        "f2": (False, False, "her"),  # neither; system says neither: tn 2
        "f3": (True, False, "her"),   # no system output:        fn 2 (official: missing = false negative)
    }
    system = {"m1": (True, False), "m2": (True, False), "m3": (False, True), "f1": (False, True),
              "f2": (False, False)}
    result = gap_metrics(gold, system)
    assert (result["tp"], result["fp"], result["fn"], result["tn"]) == (2, 2, 3, 5)
    # overall P = 2/4, R = 2/5 -> F1 = 2PR/(P+R) = 4/9
    assert result["f1"] == pytest.approx(100 * 4 / 9)
    # masculine: tp 1, fp 2, fn 1 -> P 1/3, R 1/2, F1 0.4
    assert result["masculine_f1"] == pytest.approx(40.0)
    # feminine: tp 1, fp 0, fn 2 -> P 1, R 1/3, F1 0.5
    assert result["feminine_f1"] == pytest.approx(50.0)
    assert result["bias"] == pytest.approx(50.0 / 40.0)


def test_gap_bias_left_out_when_a_gender_scores_zero_and_system_tsv_roundtrip(tmp_path):
    gold = {"a": (True, False, "he"), "b": (True, False, "she")}
    result = gap_metrics(gold, {"a": (True, False), "b": (False, True)})
    assert result["masculine_f1"] == 100.0 and result["feminine_f1"] == 0.0 and "bias" not in result
    path = tmp_path / "sys.tsv"
    path.write_text("a\tTRUE\tFALSE\nb\tFALSE\tTRUE\n")
    assert read_gap_system_tsv(str(path)) == {"a": (True, False), "b": (False, True)}


def test_accuracy_with_groups_counts_unanswerable_as_wrong():
    result = accuracy([0, 1, 1, 0], [0, 0, 1, None], groups=["male", "female", "female", None])
    assert result == {"accuracy": 50.0, "accuracy_female": 50.0, "accuracy_male": 100.0}
