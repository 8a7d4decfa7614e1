"""Bootstrap intervals (corefbert/metrics/bootstrap.py): the study's paired bootstrap against its literal
reference and hand-computed cases, the percentile interval, and the document (cluster) resamples of the
guides' tables."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from corefbert.ablation.probes import GAP_F1, RATIO, statistic
from corefbert.metrics.bootstrap import (
    drawn_members,
    paired_bootstrap,
    paired_bootstrap_reference,
    percentile_interval,
    resample_indices,
)


@pytest.mark.parametrize("kind, components", [(RATIO, 2), (GAP_F1, 3)])
def test_paired_bootstrap_matches_the_literal_reference(kind, components):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, size=(3, 9, components)).astype(float)
    b = rng.integers(0, 3, size=(3, 9, components)).astype(float)
    figure = functools.partial(statistic, kind)
    fast = paired_bootstrap(figure, a, b, n_samples=300, seed=5)
    slow = paired_bootstrap_reference(figure, a, b, n_samples=300, seed=5)
    assert fast == pytest.approx(slow)
    assert fast["ci_low"] < fast["difference"] < fast["ci_high"]


def test_paired_bootstrap_on_hand_computed_cases():
    ratio = functools.partial(statistic, RATIO)
    right = np.array([[[1, 1], [1, 1], [0, 1], [1, 1]]], dtype=float)  # one seed, 4 problems: 75%
    wrong = np.array([[[0, 1], [1, 1], [0, 1], [0, 1]]], dtype=float)  # 25%
    ci = paired_bootstrap(ratio, right, wrong, n_samples=500)
    assert ci["difference"] == pytest.approx(50.0)
    # Per problem the difference is +100, 0, 0, +100: a resample's mean lies in [0, 100].
    assert 0.0 <= ci["ci_low"] < 50.0 < ci["ci_high"] <= 100.0
    same = paired_bootstrap(ratio, right, right, n_samples=50)
    assert (same["difference"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="unpaired"):
        paired_bootstrap(ratio, right, right[:, :3], n_samples=5)


def test_the_95_percent_interval_is_the_2_5_to_97_5_percentile_range():
    values = np.random.default_rng(1).normal(size=(1000, 4))  # [samples, figures]
    low, high = percentile_interval(values)
    assert (low == np.percentile(values, 2.5, axis=0)).all() and (high == np.percentile(values, 97.5, axis=0)).all()
    assert percentile_interval(np.arange(101.0), level=0.9) == (5.0, 95.0)


def test_a_document_bootstrap_draws_every_item_of_a_drawn_document_as_often_as_it_was_drawn():
    draws = resample_indices(3, n_samples=4, seed=0)
    assert draws.shape == (4, 3) and (resample_indices(3, 4, 0) == draws).all()  # the same draws for every system
    document_of = np.array([0, 0, 1, 2, 2, 2])  # [items]
    fixed = np.array([[2, 0, 0], [1, 1, 1]])
    assert [m.tolist() for m in drawn_members(document_of, fixed)] == [[3, 4, 5, 0, 1, 0, 1], [2, 2, 2]]
