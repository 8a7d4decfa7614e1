"""DocRED relation scorer: ``torch.nn.functional.bilinear`` versus the two-matmul form the model uses.

Scores N entity pairs over R relations with a [R, D, D] weight (forward + backward), as one training
batch of the DocRED model does; prints the time of each and the ratio.

    python benchmarks/docred_bilinear.py [--pairs 2000] [--dim 148] [--relations 97] [--repeats 3]
"""

from __future__ import annotations

import argparse

import torch
from timing import seconds_per_call

from corefbert.tasks.docred import bilinear_scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=148)
    parser.add_argument("--relations", type=int, default=97)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    heads = torch.randn(args.pairs, args.dim, requires_grad=True)
    tails = torch.randn(args.pairs, args.dim, requires_grad=True)
    layer = torch.nn.Bilinear(args.dim, args.dim, args.relations)

    def reference():
        torch.nn.functional.bilinear(heads, tails, layer.weight, layer.bias).sum().backward()

    def ours():
        bilinear_scores(heads, tails, layer.weight, layer.bias).sum().backward()

    with torch.no_grad():
        diff = (bilinear_scores(heads, tails, layer.weight, layer.bias)
                - torch.nn.functional.bilinear(heads, tails, layer.weight, layer.bias)).abs().max().item()
    slow, fast = seconds_per_call(reference, args.repeats), seconds_per_call(ours, args.repeats)
    print(f"pairs={args.pairs} dim={args.dim} relations={args.relations} threads={torch.get_num_threads()}")
    print(f"F.bilinear      {slow * 1000:9.1f} ms  (forward + backward)")
    print(f"bilinear_scores {fast * 1000:9.1f} ms  max |difference| {diff:.2e}")
    print(f"speed-up {slow / fast:.1f}x")


if __name__ == "__main__":
    main()
