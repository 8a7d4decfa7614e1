"""The study's paired bootstrap: one weighted einsum per arm vs the literal loop over samples and examples.

    python benchmarks/ablation_bootstrap.py                       # 3 seeds x 454 GAP-sized examples
    python benchmarks/ablation_bootstrap.py --examples 2000 --samples 1000

Both take the same resampled indices (``resample_indices``), so they must give the same interval; the script
checks that and prints the time of each and their ratio. The literal one is what a reader would write first:
for each sample, for each seed, sum the counts of the drawn examples.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np

from corefbert.ablation.probes import GAP_F1, statistic
from corefbert.metrics.bootstrap import paired_bootstrap, paired_bootstrap_reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--examples", type=int, default=454, help="GAP validation has 454")
    parser.add_argument("--samples", type=int, default=200, help="bootstrap samples (the study's default: 1000)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, size=(args.seeds, args.examples, 3)).astype(float)  # GAP's (tp, fp, fn)
    b = rng.integers(0, 2, size=(args.seeds, args.examples, 3)).astype(float)
    gap_f1 = functools.partial(statistic, GAP_F1)
    start = time.perf_counter()
    fast = paired_bootstrap(gap_f1, a, b, args.samples)
    fast_s = time.perf_counter() - start
    start = time.perf_counter()
    slow = paired_bootstrap_reference(gap_f1, a, b, args.samples)
    slow_s = time.perf_counter() - start
    assert all(np.isclose(fast[k], slow[k]) for k in fast), (fast, slow)
    print(f"{args.seeds} seeds x {args.examples} examples, {args.samples} samples: vectorised {fast_s * 1e3:.1f} ms, "
          f"literal {slow_s * 1e3:.1f} ms, ratio {slow_s / fast_s:.1f}x; same CI "
          f"[{fast['ci_low']:+.2f}, {fast['ci_high']:+.2f}]")


if __name__ == "__main__":
    main()
