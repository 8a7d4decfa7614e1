"""Bootstrap intervals, in one place: the ablation study's paired bootstrap over examples and seeds
(:mod:`corefbert.ablation.study`) and the document bootstraps of the guides' result tables
(``docs/guides/coref_e2e_bootstrap.py``, ``docs/guides/pronoun_pairs_intervals.py``).

A bootstrap redraws the *units* that vary (examples, documents) with replacement, ``n_samples`` times, from one
seeded generator (:func:`resample_indices`: the same draws for every system compared, so their differences are
paired), recomputes the figure on each draw, and reports the percentile interval of those values
(:func:`percentile_interval`; 95%: the 2.5th to the 97.5th percentile).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# A figure (percent) from counts summed over the drawn examples: [..., components] -> [...].
Statistic = Callable[[np.ndarray], np.ndarray]


def resample_indices(n_units: int, n_samples: int = 1000, seed: int = 0) -> np.ndarray:
    """``[n_samples, n_units]`` unit indices drawn with replacement (one bootstrap sample a row)."""
    return np.random.default_rng(seed).integers(0, n_units, size=(n_samples, n_units))


def resample_weights(n_units: int, samples: int, seed: int) -> np.ndarray:
    """``[samples, n_units]``: how often each unit is drawn in each resample of :func:`resample_indices`, for
    figures that are sums over units (the frozen-feature probe's per-document pair statistics)."""
    index = resample_indices(n_units, samples, seed)  # [R, D]
    weights = np.zeros((samples, n_units))
    np.add.at(weights, (np.arange(samples)[:, None], index), 1.0)
    return weights


def drawn_members(unit_of: Sequence[int] | np.ndarray, draws: np.ndarray) -> list[np.ndarray]:
    """The items of each draw of units (a cluster bootstrap): ``unit_of`` ``[items]`` gives each item's unit
    ``0..U-1``, ``draws`` ``[n_samples, U]`` the drawn units; each draw holds every item of a drawn unit, as
    often as the unit was drawn, in the order of the draw."""
    unit_of = np.asarray(unit_of)
    members = [np.flatnonzero(unit_of == unit) for unit in range(draws.shape[1])]
    return [np.concatenate([members[unit] for unit in draw]) for draw in draws]


def percentile_interval(values, level: float = 0.95) -> tuple:
    """``(low, high)``: the percentile interval of bootstrap ``values`` ``[n_samples, ...]`` at ``level``, per
    figure (along the first axis)."""
    tail = (100.0 - 100.0 * level) / 2  # 2.5 exactly for 0.95
    low, high = np.percentile(values, [tail, 100.0 - tail], axis=0)
    return low, high


def paired_difference(statistic: Statistic, a: np.ndarray, b: np.ndarray) -> float:
    """Mean over seeds of ``statistic(a_k) - statistic(b_k)``; ``a``, ``b`` are ``[seeds, examples, components]``."""
    return float(np.mean(statistic(a.sum(axis=1)) - statistic(b.sum(axis=1))))


def paired_bootstrap(statistic: Statistic, a: np.ndarray, b: np.ndarray, n_samples: int = 1000, seed: int = 0,
                     level: float = 0.95) -> dict[str, float]:
    """Paired bootstrap CI of ``A - B`` (arms ``a``, ``b``: counts ``[seeds, examples, components]``, seed
    ``k`` of A paired with seed ``k`` of B, example ``i`` the same problem in both), the figure of summed
    counts being ``statistic``. Each sample redraws the *examples* and keeps every seed of a drawn example (a
    cluster bootstrap); its value is the mean over seeds of the per-seed difference."""
    if a.shape != b.shape:
        raise ValueError(f"unpaired counts {a.shape} vs {b.shape}")
    weights = resample_weights(a.shape[1], n_samples, seed)  # [R, n]: the sums below are one einsum each
    sum_a = np.einsum("ri,kic->rkc", weights, a.astype(np.float64))  # [R, seeds, components]
    sum_b = np.einsum("ri,kic->rkc", weights, b.astype(np.float64))
    values = (statistic(sum_a) - statistic(sum_b)).mean(axis=1)  # [R]
    return _interval(paired_difference(statistic, a, b), values, level, a.shape)


def paired_bootstrap_reference(statistic: Statistic, a: np.ndarray, b: np.ndarray, n_samples: int = 1000,
                               seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """:func:`paired_bootstrap` written out literally, one sample, seed and drawn example at a time (the test
    holds the vectorised one to it)."""
    index = resample_indices(a.shape[1], n_samples, seed)
    values = []
    for row in index:
        differences = []
        for k in range(a.shape[0]):
            total_a, total_b = np.zeros(a.shape[2]), np.zeros(b.shape[2])
            for i in row:
                total_a += a[k, i]
                total_b += b[k, i]
            differences.append(float(statistic(total_a) - statistic(total_b)))
        values.append(sum(differences) / len(differences))
    return _interval(paired_difference(statistic, a, b), np.array(values), level, a.shape)


def _interval(observed: float, values: np.ndarray, level: float, shape) -> dict[str, float]:
    low, high = percentile_interval(values, level)
    return {"difference": observed, "ci_low": float(low), "ci_high": float(high), "seeds": int(shape[0]),
            "examples": int(shape[1]), "samples": int(len(values))}
