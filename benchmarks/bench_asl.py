"""ASL (Luo & Glass 2018, eqs. 1-6): the batched recurrence the model uses against the literal per-sentence,
per-word, per-previous-word reference, and against the earlier static reconstruction (attention and gate
without h_{t-1}, computed before a cuDNN/ATen BiLSTM), all in one run on the same sentences.

Forward + backward over one training crop's sentences (``--sentences`` of ``--words`` words, the paper's sizes
by default: 200-unit LSTMs, a 150-unit attention MLP, 350-d word vectors = 300-d embeddings + the char CNN);
prints each time, the ratios, and whether batched and literal outputs agree.

    python benchmarks/bench_asl.py [--sentences 10] [--words 25] [--repeats 3]
"""

from __future__ import annotations

import argparse

import torch
from timing import seconds_per_call

from corefbert.tasks.coref_e2e.encoders import (
    AttentionalSentenceLinking,
    StaticAttentionalSentenceLinking,
    asl_reference,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=10)
    parser.add_argument("--words", type=int, default=25, help="words per sentence (each sentence one shorter "
                                                              "than the last, from this length down)")
    parser.add_argument("--dim", type=int, default=350, help="word vector size x_{i,t}")
    parser.add_argument("--hidden", type=int, default=200)
    parser.add_argument("--attention", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    paper = AttentionalSentenceLinking(args.dim, args.hidden, args.attention).eval()
    static = StaticAttentionalSentenceLinking(args.dim, args.hidden, args.attention).eval()
    lengths = torch.tensor([max(1, args.words - i % 5) for i in range(args.sentences)])  # [S]
    padded = torch.randn(args.sentences, int(lengths.max()), args.dim)  # [S, T, D]
    sentences = [padded[i, :n] for i, n in enumerate(lengths.tolist())]

    def batched(module):
        return lambda: module(padded, lengths).sum().backward()

    def literal():
        sum(out.sum() for out in asl_reference(paper, sentences)).backward()

    fast = seconds_per_call(batched(paper), args.repeats)
    old = seconds_per_call(batched(static), args.repeats)
    slow = seconds_per_call(literal, max(1, args.repeats // 3))
    with torch.no_grad():
        out = paper(padded, lengths)
        same = all(torch.allclose(out[i, :len(r)], r, atol=1e-5) for i, r in enumerate(asl_reference(paper, sentences)))
    print(f"{args.sentences} sentences of <= {int(lengths.max())} words, D={args.dim}, hidden={args.hidden}, "
          f"attention={args.attention}, threads={torch.get_num_threads()}; forward + backward")
    print(f"literal per-step reference (eqs. 1-6): {slow * 1000:9.1f} ms")
    print(f"batched recurrence (model default):    {fast * 1000:9.1f} ms   {slow / fast:6.1f}x faster than literal")
    print(f"static reconstruction (no h_(t-1)):    {old * 1000:9.1f} ms   paper-exact costs {fast / old:.1f}x it")
    print(f"batched == literal: {same}")


if __name__ == "__main__":
    main()
