"""Antecedent scoring of the end-to-end coreference model: the factored first layer the model uses
(``W_1 g_i + W_2 g_j`` once per span, only ``W_3 (g_i ∘ g_j) + W_4 φ`` per pair) versus FFNN_a on the
concatenated ``[g_i, g_j, g_i ∘ g_j, φ]`` pairs (:func:`corefbert.tasks.coref_e2e.span_ranking.pair_scores_concat`).

Forward + backward over k kept spans × K antecedents, as one training document does; prints each time and
the ratio (the paper's span size by default: D = 1270 for the 200-unit BiLSTM with 300-d embeddings + char CNN).

    python benchmarks/bench_antecedent_scoring.py [--spans 200] [--antecedents 100] [--repeats 3]
"""

from __future__ import annotations

import argparse

import torch
from timing import seconds_per_call

from corefbert.tasks.coref_e2e.span_ranking import SpanRanker, SpanRankingConfig, pair_scores_concat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200, help="k: kept spans (λT: 0.4 × 500 words)")
    parser.add_argument("--antecedents", type=int, default=100, help="K (paper: 250)")
    parser.add_argument("--context_dim", type=int, default=400)
    parser.add_argument("--head_dim", type=int, default=450)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    ranker = SpanRanker(SpanRankingConfig(args.context_dim, args.head_dim, max_antecedents=args.antecedents)).eval()
    k, slots = args.spans, min(args.antecedents, args.spans - 1)
    spans = torch.randn(k, ranker.span_dim, requires_grad=True)  # [k, D]
    mention = torch.randn(k, requires_grad=True)  # [k]
    offsets = torch.arange(1, slots + 1)
    positions = torch.arange(k)[:, None] - offsets[None, :]  # [k, K]
    valid, antecedents = positions >= 0, positions.clamp(min=0)
    speakers, genre = torch.zeros(k, dtype=torch.long), torch.tensor(0)

    def factored_scores():
        return ranker.antecedent_scores(spans, mention, speakers, antecedents, valid, offsets, genre)

    def concat_scores():
        phi = ranker.pair_features(speakers, speakers[antecedents], offsets, genre)  # [k, K, 3f]
        return pair_scores_concat(ranker, spans, mention, antecedents, valid, phi)

    def step(score):
        def run():
            score()[:, 1:].masked_fill(~valid, 0).sum().backward()
        return run

    factored = seconds_per_call(step(factored_scores), args.repeats)
    concat = seconds_per_call(step(concat_scores), args.repeats)
    with torch.no_grad():
        same = torch.allclose(factored_scores(), concat_scores(), atol=1e-4)
    print(f"k={k} spans x K={slots} antecedents, D={ranker.span_dim}, threads={torch.get_num_threads()}")
    print(f"concatenated pairs: {concat * 1000:8.1f} ms  (forward + backward)")
    print(f"factored (model):   {factored * 1000:8.1f} ms")
    print(f"speed-up: {concat / factored:.2f}x   same scores: {same}")


if __name__ == "__main__":
    main()
