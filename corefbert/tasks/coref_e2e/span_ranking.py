"""The end-to-end mention-ranking coreference model of Lee et al. (2017), over any word encoder.

Paper, section 4-5, as implemented here (one document at a time):

- Spans: every span of up to ``max_span_width`` words inside one sentence.
- Span representation (eq. 5 ff.): ``g_i = [x*_START(i), x*_END(i), x̂_i, φ(i)]`` with the head attention
  ``α_t = w_α · FFNN_α(x*_t)``, ``a_i,t = exp(α_t) / Σ_{k=START(i)}^{END(i)} exp(α_k)``,
  ``x̂_i = Σ_t a_i,t · x_t`` and ``φ(i)`` a learned span-width embedding.
- Mention score ``s_m(i) = w_m · FFNN_m(g_i)``; antecedent score
  ``s_a(i, j) = w_a · FFNN_a([g_i, g_j, g_i ∘ g_j, φ(i, j)])`` with ``φ(i, j)`` speaker (same/different),
  genre and distance embeddings; ``s(i, j) = s_m(i) + s_m(j) + s_a(i, j)`` and ``s(i, ε) = 0``.
- Pruning: keep the ``λT`` spans (T words) with the highest mention scores, suppressing spans that cross an
  already kept one; each kept span considers the ``K`` kept spans before it as antecedents.
- Loss (eq. 7): ``log Π_i Σ_{ŷ ∈ Y(i) ∩ GOLD(i)} P(ŷ)``, ``GOLD(i) = {ε}`` when span i is not a gold mention
  or none of its candidates is in its cluster; summed over the document's kept spans.

Distances are counted in kept spans and bucketed [1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+] as in the
authors' code. ``antecedent_loss_reference`` in ``tests/references.py`` is the literal, span-by-span version of
the batched scoring and loss.

Memory: the span representations gather [spans, max_width, x_t] and the antecedent scores [k, K, g] (g about
1,270 floats at the paper's sizes: 1.5 GB for the 1,200 kept spans of a 3,000-word crop). Both are computed
64 MiB at a time (:func:`corefbert.training.memory.map_row_chunks`, recomputed in the backward pass), so a
document holds one g_i per span and one score per pair, not pairs × span size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from corefbert.tasks.scratch import ScratchConfig
from corefbert.text.spans import Cluster
from corefbert.training.memory import CHUNK_ELEMENTS, map_row_chunks

NUM_DISTANCE_BUCKETS = 10


@dataclass(frozen=True)
class SpanRankingConfig(ScratchConfig):
    """Sizes of the span-ranking model (paper settings as defaults): the ``"ranker"`` of a model's config."""

    context_dim: int  # x*_t
    head_dim: int  # x_t
    max_span_width: int = 10
    feature_size: int = 20
    ffnn_size: int = 150
    ffnn_depth: int = 2
    dropout: float = 0.2
    top_span_ratio: float = 0.4  # λ
    max_antecedents: int = 250  # K
    num_genres: int = 1
    # The paper's α_t = w_α · FFNN_α(x*_t) has hidden layers; the authors' code projects x*_t linearly (0).
    head_ffnn_depth: int = 2
    allow_crossing_spans: bool = False  # True: pruning keeps the top λT spans without the paper's suppression


def ffnn(input_dim: int, hidden: int, depth: int, dropout: float) -> nn.Sequential:
    """A feed-forward scorer: ``depth`` ReLU layers of ``hidden`` units, then one linear output."""
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(input_dim if i == 0 else hidden, hidden), nn.ReLU(), nn.Dropout(dropout)]
    layers.append(nn.Linear(hidden if depth else input_dim, 1))
    return nn.Sequential(*layers)


def enumerate_spans(sentence_of_word: torch.Tensor, max_width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All spans of up to ``max_width`` words inside one sentence, ordered by (start, end).
    ``sentence_of_word`` [words] -> starts, ends [spans] (inclusive word indices)."""
    num_words = sentence_of_word.shape[0]
    starts = torch.arange(num_words, device=sentence_of_word.device).repeat_interleave(max_width)
    ends = starts + torch.arange(max_width, device=starts.device).repeat(num_words)
    inside = ends < num_words
    starts, ends = starts[inside], ends[inside]
    same_sentence = sentence_of_word[starts] == sentence_of_word[ends]
    return starts[same_sentence], ends[same_sentence]


def bucket_distance(distance: torch.Tensor) -> torch.Tensor:
    """[0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+] -> 0..9."""
    logspace = torch.floor(torch.log2(distance.clamp(min=1).float())).long() + 3
    return torch.where(distance <= 4, distance, logspace).clamp(0, NUM_DISTANCE_BUCKETS - 1)


def prune_spans(scores: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, keep: int,
                allow_crossing: bool = False) -> torch.Tensor:
    """Indices of up to ``keep`` spans in decreasing mention score, skipping any span that crosses a kept one
    (``s1 < s2 <= e1 < e2``; unless ``allow_crossing``), in (start, end) order. Spans are at most a sentence
    long, so each check looks at the span's own words only."""
    order = torch.argsort(scores, descending=True).tolist()
    starts_list, ends_list = starts.tolist(), ends.tolist()
    max_end_from: dict[int, int] = {}  # start -> the largest end of a kept span starting there
    min_start_to: dict[int, int] = {}  # end -> the smallest start of a kept span ending there
    kept: list[int] = []
    for index in order:
        if len(kept) >= keep:
            break
        s, e = starts_list[index], ends_list[index]
        if not allow_crossing and (any(max_end_from.get(p, -1) > e for p in range(s + 1, e + 1)) or
                                   any(min_start_to.get(p, s) < s for p in range(s, e))):
            continue
        kept.append(index)
        max_end_from[s] = max(max_end_from.get(s, -1), e)
        min_start_to[e] = min(min_start_to.get(e, s), s)
    kept.sort(key=lambda i: (starts_list[i], ends_list[i]))
    return torch.tensor(kept, dtype=torch.long, device=scores.device)


class SpanRanker(nn.Module):
    """Span representations, mention scores, pruning, antecedent scores and the loss of Lee et al. (2017)."""

    def __init__(self, config: SpanRankingConfig):
        super().__init__()
        self.config = c = config
        self.width_embeddings = nn.Embedding(c.max_span_width, c.feature_size)
        self.head_scorer = ffnn(c.context_dim, c.ffnn_size, c.head_ffnn_depth, c.dropout)  # α_t = w_α · FFNN_α(x*_t)
        self.span_dim = 2 * c.context_dim + c.head_dim + c.feature_size
        self.mention_scorer = ffnn(self.span_dim, c.ffnn_size, c.ffnn_depth, c.dropout)
        self.distance_embeddings = nn.Embedding(NUM_DISTANCE_BUCKETS, c.feature_size)
        self.speaker_embeddings = nn.Embedding(2, c.feature_size)
        self.genre_embeddings = nn.Embedding(max(1, c.num_genres), c.feature_size)
        self.antecedent_scorer = ffnn(3 * self.span_dim + 3 * c.feature_size, c.ffnn_size, c.ffnn_depth, c.dropout)
        self.dropout = nn.Dropout(c.dropout)
        #: Floats a chunk of span or pair intermediates may hold (memory, not results: not saved).
        self.chunk_elements = CHUNK_ELEMENTS

    def span_embeddings(self, context: torch.Tensor, head_inputs: torch.Tensor, starts: torch.Tensor,
                        ends: torch.Tensor) -> torch.Tensor:
        """g_i for spans ``starts``/``ends`` [spans] over ``context`` [words, Dc], ``head_inputs`` [words, Dx]
        -> [spans, span_dim], :attr:`chunk_elements` at a time (the head attention gathers [spans, L, Dx])."""
        width_limit = self.config.max_span_width
        alpha = self.head_scorer(context).squeeze(-1)  # α_t [words]

        def chunk(start: int, end: int, context, head_inputs, alpha) -> torch.Tensor:
            first, last = starts[start:end], ends[start:end]  # [r]
            widths = last - first  # [r], 0-based
            offsets = torch.arange(width_limit, device=first.device)
            words = torch.minimum(first[:, None] + offsets[None, :], last[:, None])  # [r, max_width]
            inside = offsets[None, :] <= widths[:, None]
            logits = alpha[words].masked_fill(~inside, float("-inf"))  # [r, max_width]
            attention = torch.softmax(logits, dim=-1)
            head = (attention.unsqueeze(-1) * head_inputs[words]).sum(dim=1)  # x̂_i [r, Dx]
            width = self.dropout(self.width_embeddings(widths))  # φ(i)
            return torch.cat([context[first], context[last], head, width], dim=-1)

        per_span = 2 * width_limit * head_inputs.shape[-1] + self.span_dim  # gathered x_t, weighted, g_i
        return map_row_chunks(chunk, starts.shape[0], per_span, self.chunk_elements, context, head_inputs, alpha)

    def pair_features(self, target_speakers: torch.Tensor, candidate_speakers: torch.Tensor, offsets: torch.Tensor,
                      genre: torch.Tensor) -> torch.Tensor:
        """φ(i, j) for [r, K] antecedent slots: the speaker of each target span [r] and of its candidates [r, K],
        the slot distances ``offsets`` [K] -> [r, K, 3 * feature_size]."""
        same_speaker = (target_speakers[:, None] == candidate_speakers).long()
        rows, slots = candidate_speakers.shape
        features = [self.speaker_embeddings(same_speaker),
                    self.genre_embeddings(genre.view(1, 1).expand(rows, slots)),
                    self.distance_embeddings(bucket_distance(offsets)).unsqueeze(0).expand(rows, -1, -1)]
        return self.dropout(torch.cat(features, dim=-1))

    def forward(self, context: torch.Tensor, head_inputs: torch.Tensor, sentence_of_word: torch.Tensor,
                speaker_ids: torch.Tensor, genre: torch.Tensor, gold_starts: torch.Tensor | None = None,
                gold_ends: torch.Tensor | None = None, gold_cluster_ids: torch.Tensor | None = None) -> dict:
        """One document -> ``top_starts``/``top_ends`` [k], ``antecedents`` [k, K] (indices into the top
        spans), ``scores`` [k, K + 1] (column 0: the dummy ε), and ``loss`` when gold clusters are given."""
        c = self.config
        starts, ends = enumerate_spans(sentence_of_word, c.max_span_width)
        spans = self.span_embeddings(context, head_inputs, starts, ends)  # [spans, D]
        mention_scores = self.mention_scorer(spans).squeeze(-1)  # s_m [spans]
        keep = max(1, int(c.top_span_ratio * context.shape[0]))
        top = prune_spans(mention_scores.detach(), starts, ends, keep, c.allow_crossing_spans)  # [k]
        top_starts, top_ends = starts[top], ends[top]
        top_spans, top_scores = spans[top], mention_scores[top]
        k = top.shape[0]
        slots = max(1, min(c.max_antecedents, k - 1))
        offsets = torch.arange(1, slots + 1, device=top.device)  # [K]: the K closest earlier kept spans
        positions = torch.arange(k, device=top.device)[:, None] - offsets[None, :]  # [k, K]
        valid = positions >= 0
        antecedents = positions.clamp(min=0)
        scores = self.antecedent_scores(top_spans, top_scores, speaker_ids[top_starts], antecedents, valid, offsets,
                                        genre)
        out = {"top_starts": top_starts, "top_ends": top_ends, "antecedents": antecedents, "scores": scores}
        if gold_starts is not None:
            cluster = top_cluster_ids(top_starts, top_ends, gold_starts, gold_ends, gold_cluster_ids)
            out["loss"] = marginal_log_likelihood_loss(scores, cluster, antecedents, valid)
        return out

    def antecedent_scores(self, top_spans: torch.Tensor, top_scores: torch.Tensor, top_speakers: torch.Tensor,
                          antecedents: torch.Tensor, valid: torch.Tensor, offsets: torch.Tensor,
                          genre: torch.Tensor) -> torch.Tensor:
        """s(i, j) for the [k, K] slots ``antecedents`` of the kept spans ``top_spans`` [k, D] (mention scores
        [k], speakers [k]; slot distances ``offsets`` [K]) -> [k, K + 1], ε's 0 first, invalid slots -inf.

        FFNN_a's first layer on ``[g_i, g_j, g_i ∘ g_j, φ]`` is ``W_1 g_i + W_2 g_j + W_3 (g_i ∘ g_j) + W_4 φ``:
        the first two terms are computed once per span rather than once per pair (a third of the work;
        ``benchmarks/bench_antecedent_scoring.py``); :func:`pair_scores_concat` is the plain version."""
        first, rest = self.antecedent_scorer[0], self.antecedent_scorer[1:]
        d, phi_dim = top_spans.shape[-1], 3 * self.config.feature_size
        w_target, w_candidate, w_product, w_phi = first.weight.split([d, d, d, phi_dim], dim=1)
        per_target = top_spans @ w_target.T + first.bias  # [k, H]
        per_candidate = top_spans @ w_candidate.T  # [k, H]

        def chunk(start: int, end: int, top_spans, per_target, per_candidate) -> torch.Tensor:
            rows = antecedents[start:end]  # [r, K]
            pair_phi = self.pair_features(top_speakers[start:end], top_speakers[rows], offsets, genre)  # [r, K, 3f]
            product = top_spans[start:end, None, :] * top_spans[rows]  # g_i ∘ g_j [r, K, D]
            hidden = per_target[start:end, None, :] + per_candidate[rows] + product @ w_product.T + \
                pair_phi @ w_phi.T  # [r, K, H]
            return rest(hidden).squeeze(-1)  # s_a [r, K]

        per_target_span = antecedents.shape[1] * (2 * d + phi_dim + 2 * first.out_features)
        pair_scores = map_row_chunks(chunk, top_spans.shape[0], per_target_span, self.chunk_elements, top_spans,
                                     per_target, per_candidate)  # [k, K]
        return self.combine(top_scores, pair_scores, antecedents, valid)

    @staticmethod
    def combine(top_scores, pair_scores, antecedents, valid) -> torch.Tensor:
        """s(i, j) = s_m(i) + s_m(j) + s_a(i, j), -inf where no antecedent, ε's 0 in column 0."""
        scores = top_scores[:, None] + top_scores[antecedents] + pair_scores  # [k, K]
        scores = scores.masked_fill(~valid, float("-inf"))
        return torch.cat([torch.zeros_like(scores[:, :1]), scores], dim=1)


def pair_scores_concat(ranker: SpanRanker, top_spans, top_scores, antecedents, valid, pair_phi) -> torch.Tensor:
    """:meth:`SpanRanker.antecedent_scores` the obvious way: FFNN_a on the concatenated [k, K, 3D + 3f] pairs."""
    target = top_spans[:, None, :].expand(-1, antecedents.shape[1], -1)  # g_i [k, K, D]
    candidate = top_spans[antecedents]  # g_j [k, K, D]
    pairs = torch.cat([target, candidate, target * candidate, pair_phi], dim=-1)
    return ranker.combine(top_scores, ranker.antecedent_scorer(pairs).squeeze(-1), antecedents, valid)


def top_cluster_ids(top_starts, top_ends, gold_starts, gold_ends, gold_cluster_ids) -> torch.Tensor:
    """The gold cluster id (1-based; 0: not a gold mention) of each kept span -> [k]."""
    same = (top_starts[:, None] == gold_starts[None, :]) & (top_ends[:, None] == gold_ends[None, :])  # [k, gold]
    return (same.long() * gold_cluster_ids[None, :]).max(dim=1).values if gold_starts.numel() else \
        torch.zeros_like(top_starts)


def marginal_log_likelihood_loss(scores: torch.Tensor, cluster: torch.Tensor, antecedents: torch.Tensor,
                                 valid: torch.Tensor) -> torch.Tensor:
    """Eq. 7 over ``scores`` [k, K + 1] with the kept spans' gold ``cluster`` ids [k] -> [] summed loss."""
    gold = (cluster[antecedents] == cluster[:, None]) & (cluster[:, None] > 0) & valid  # [k, K]
    dummy = ~gold.any(dim=1, keepdim=True)  # GOLD(i) = {ε}
    gold = torch.cat([dummy, gold], dim=1)  # [k, K + 1]
    marginal = torch.logsumexp(scores.masked_fill(~gold, float("-inf")), dim=1)
    return (torch.logsumexp(scores, dim=1) - marginal).sum()


def predict_clusters(top_starts: torch.Tensor, top_ends: torch.Tensor, antecedents: torch.Tensor,
                     scores: torch.Tensor) -> list[Cluster]:
    """Greedy decoding: each kept span links to its highest-scoring antecedent (ε: none); linked spans form
    clusters (mentions with inclusive ends), in the order of their first mention."""
    best = scores.argmax(dim=1)  # [k], 0: ε
    chosen = antecedents.gather(1, (best - 1).clamp(min=0)[:, None]).squeeze(1)  # [k]: the kept span each links to
    starts, ends = top_starts.tolist(), top_ends.tolist()
    cluster_of: dict[int, int] = {}
    clusters: list[Cluster] = []
    for i, (choice, j) in enumerate(zip(best.tolist(), chosen.tolist())):
        if choice == 0:
            continue
        if j not in cluster_of:
            cluster_of[j] = len(clusters)
            clusters.append([(starts[j], ends[j])])
        cluster_of[i] = cluster_of[j]
        clusters[cluster_of[j]].append((starts[i], ends[i]))
    return [sorted(set(cluster)) for cluster in clusters]
