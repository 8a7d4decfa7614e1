"""KGAT (Liu et al., ACL 2020): kernel graph attention over claim-evidence pairs for FEVER.

Each of a claim's N evidence sentences is encoded together with the claim (a node). Gaussian kernels over
the cosine similarity of token pairs turn token matches into soft-match features (21 kernels: an
exact-match kernel mu = 1, sigma = 1e-3, and 20 means evenly spaced over [-1, 1] with sigma 0.1, as
published in thunlp/KernelGAT). They drive node selection (claim tokens against the node's evidence tokens
-> a score per node -> softmax over the claim's nodes) and edge attention (for node i, the tokens of every
node j weighted by their kernel match with node i's tokens, then the nodes j by an MLP on [CLS_i; summary_j]).
The label distribution is the selection-weighted sum of each node's prediction from [CLS_i; message_i], the
loss its negative log-likelihood. Unlike the original, padded nodes (claims with fewer than N sentences) are
masked out of both softmaxes instead of being empty sentences.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn


def kernel_mus(num_kernels: int) -> list[float]:
    """Kernel means: 1 (exact match), then the centres of ``num_kernels - 1`` equal bins of [-1, 1]."""
    bin_size = 2.0 / max(num_kernels - 1, 1)
    mus = [1.0, 1 - bin_size / 2][:num_kernels]
    while len(mus) < num_kernels:
        mus.append(mus[-1] - bin_size)
    return mus


def kernel_sigmas(num_kernels: int) -> list[float]:
    """Kernel widths: 1e-3 for the exact-match kernel, 0.1 for the others (the published values)."""
    return [1e-3] + [0.1] * (num_kernels - 1)


def kernel_features(query: torch.Tensor, doc: torch.Tensor, doc_mask: torch.Tensor, mus: torch.Tensor,
                    sigmas: torch.Tensor) -> torch.Tensor:
    """Log kernel-pooled soft matches of each query token against the (masked) doc tokens: query [X, Lq, H]
    and doc [X, Ld, H] L2-normalized, doc_mask [X, Ld] -> [X, Lq, K]:
    ``log(sum_d exp(-(cos(q, d) - mu_k)^2 / (2 sigma_k^2)))``, clamped at 1e-10 before the log."""
    similarity = torch.bmm(query, doc.transpose(1, 2)).unsqueeze(-1)  # [X, Lq, Ld, 1]
    kernels = torch.exp(-((similarity - mus) ** 2) / (2 * sigmas**2)) * doc_mask[:, None, :, None]  # [X, Lq, Ld, K]
    return torch.log(kernels.sum(2).clamp(min=1e-10))


class KgatModel(nn.Module):
    """KGAT head on any encoder. ``forward`` takes the flattened real nodes and their place in [B, N]."""

    def __init__(self, encoder: nn.Module, num_labels: int = 3, num_kernels: int = 21):
        super().__init__()
        self.encoder = encoder
        hidden = encoder.config.hidden_size
        self.register_buffer("mus", torch.tensor(kernel_mus(num_kernels)), persistent=False)
        self.register_buffer("sigmas", torch.tensor(kernel_sigmas(num_kernels)), persistent=False)
        self.node_selection = nn.Linear(num_kernels, 1)
        self.token_attention = nn.Linear(num_kernels, 1)
        self.node_attention = nn.Sequential(nn.Linear(2 * hidden, 128), nn.ReLU(), nn.Linear(128, 1))
        self.classifier = nn.Linear(2 * hidden, num_labels)

    def forward(self, input_ids, attention_mask, claim_mask, evidence_mask, node_index, node_mask,
                token_type_ids=None, labels=None):
        batch, nodes = node_mask.shape
        encoded = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                               **({"token_type_ids": token_type_ids} if token_type_ids is not None else {}))
        real = encoded.last_hidden_state  # [M, L, H] real nodes only
        length, hidden_size = real.shape[1:]
        hidden = real.new_zeros(batch * nodes, length, hidden_size).index_copy(0, node_index, real)
        hidden = hidden.view(batch, nodes, length, hidden_size)  # [B, N, L, H]

        def scatter(mask):  # [M, L] -> [B, N, L]
            full = mask.new_zeros(batch * nodes, length).index_copy(0, node_index, mask)
            return full.view(batch, nodes, length).to(real.dtype)

        claim, evidence = scatter(claim_mask), scatter(evidence_mask)
        text = ((claim + evidence) > 0).to(real.dtype)  # [B, N, L] every non-special token
        cls = hidden[:, :, 0]  # [B, N, H]
        normed = nn.functional.normalize(hidden, p=2, dim=-1)
        flat = normed.view(batch * nodes, length, hidden_size)

        # Node selection: claim tokens matched against the same node's evidence tokens.
        matches = kernel_features(flat, flat, evidence.view(-1, length), self.mus, self.sigmas)  # [B*N, L, K]
        claim_flat = claim.view(-1, length, 1)
        pooled = (matches * claim_flat).sum(1) / (claim_flat.sum(1) + 1e-10)  # [B*N, K]
        selection = self.node_selection(pooled).view(batch, nodes).masked_fill(~node_mask, -1e4)
        select_prob = torch.softmax(selection, dim=1)  # [B, N]

        messages = []
        for i in range(nodes):  # edge attention into node i (a loop as in the original: memory)
            own = normed[:, i:i + 1].expand(-1, nodes, -1, -1).reshape(-1, length, hidden_size)
            own_mask = text[:, i:i + 1].expand(-1, nodes, -1).reshape(-1, length)
            token_scores = self.token_attention(kernel_features(flat, own, own_mask, self.mus, self.sigmas))
            token_scores = token_scores.view(batch, nodes, length).masked_fill(text == 0, -1e4)
            token_weights = torch.softmax(token_scores, dim=-1).unsqueeze(-1)  # [B, N, L, 1]
            summaries = (token_weights * hidden).sum(2)  # [B, N, H] node j read from node i's view
            node_scores = self.node_attention(torch.cat([cls[:, i:i + 1].expand(-1, nodes, -1), summaries], -1))
            node_weights = torch.softmax(node_scores.squeeze(-1).masked_fill(~node_mask, -1e4), dim=1)  # [B, N]
            messages.append((node_weights.unsqueeze(-1) * summaries).sum(1))  # [B, H]
        node_logits = self.classifier(torch.cat([cls, torch.stack(messages, dim=1)], dim=-1))  # [B, N, C]
        probs = (select_prob.unsqueeze(-1) * torch.softmax(node_logits, dim=-1)).sum(1)  # [B, C]
        log_probs = torch.log(probs.clamp(min=1e-10))
        loss = nn.functional.nll_loss(log_probs, labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=log_probs, select_prob=select_prob)
