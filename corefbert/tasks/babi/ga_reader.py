"""The Gated-Attention (GA) reader (Dhingra, Liu, Yang, Cohen, Salakhutdinov, ACL 2017) with plain GRU or
Coref-GRU document layers (Dhingra et al., NAACL 2018).

Layers k = 1..K−1 (paper section 3.1, eq. 1–2):

    D^k = BiRNN_D^k(X^{k−1}),  Q^k = BiGRU_Q^k(Y)
    α_i = softmax(Q^kᵀ d_i),   q̃_i = Q^k α_i,   x_i^k = d_i ⊙ q̃_i        (multiplicative gating)

Layer K: D^K = BiRNN_D^K(X^{K−1}), q = Q^K_fwd[last] ‖ Q^K_bwd[first] (the question's two end states),
s = softmax(D^K q) over document tokens. Answer (section 3.2): attention sum
Pr(c | d, q) ∝ Σ_{i ∈ I(c, d)} s_i over the positions where word c occurs (extractive bAbI tasks), or, for
answers that are not document words (yes/no, counts, lists, paths), a softmax over the answer vocabulary of
W [q ‖ Σ_i s_i d_i] (the C-GRU paper names the softmax, not its input: this input is our choice).

BiRNN_D is :class:`corefbert.tasks.babi.coref_gru.BiCorefGRU` (``recurrent="cgru"``) or ``torch.nn.GRU``. The queries
always use plain GRUs (the paper replaces the document's layers). ``num_layers=1`` is the plain
bidirectional reader without gating (``bi_gru`` / ``bi_cgru``). Dropout at each layer's output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from corefbert.tasks.babi.coref_gru import BiCorefGRU
from corefbert.tasks.scratch import ScratchConfig

RECURRENT_KINDS = ("gru", "cgru")


@dataclass(frozen=True)
class GAReaderConfig(ScratchConfig):
    """Sizes and options of a reader (saved as the ``"reader"`` of ``babi_reader.json``, beside the weights)."""

    describes: ClassVar[str] = "a bAbI reader config"
    advice: ClassVar[str] = "use the babi_reader.json saved with the weights (finetune/run_babi.py writes it)"

    vocab_size: int
    num_answers: int = 0  # 0: attention sum over document words; > 0: softmax over this many answers
    embedding_dim: int = 64
    hidden_size: int = 64
    num_layers: int = 3
    dropout: float = 0.1
    recurrent: str = "cgru"
    memory: str = "split"


@dataclass
class ReaderOutput:
    loss: torch.Tensor | None  # [] scalar when labels are given
    scores: torch.Tensor  # [B, V] answer probabilities (attention sum) or [B, A] logits (classification)
    attention: torch.Tensor  # [B, T] s over document tokens


def attention_sum(attention: torch.Tensor, doc_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Pr(c) = Σ_{i: doc_i = c} s_i for every word c: ``[B, T], [B, T] -> [B, V]`` (padding carries s = 0)."""
    return attention.new_zeros(attention.size(0), vocab_size).scatter_add(1, doc_ids, attention)


def _run_gru(gru: nn.GRU, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A bidirectional ``nn.GRU`` over right-padded ``inputs [B, T, D]`` -> ``[B, T, 2H]`` (zeros at padding)."""
    packed = pack_padded_sequence(inputs, lengths.cpu().clamp(min=1), batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(gru(packed)[0], batch_first=True, total_length=inputs.size(1))[0]


class GAReader(nn.Module):
    """The reader; ``forward(doc_ids, doc_mask, clusters, query_ids, query_mask, labels=None)``."""

    def __init__(self, config: GAReaderConfig):
        super().__init__()
        if config.recurrent not in RECURRENT_KINDS:
            raise ValueError(f"recurrent must be one of {RECURRENT_KINDS}, not {config.recurrent!r}")
        self.config = config
        hidden = config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=0)
        self.doc_layers, self.query_layers = nn.ModuleList(), nn.ModuleList()
        for k in range(config.num_layers):
            size_in = config.embedding_dim if k == 0 else 2 * hidden
            self.doc_layers.append(BiCorefGRU(size_in, hidden, config.memory) if config.recurrent == "cgru"
                                   else nn.GRU(size_in, hidden, batch_first=True, bidirectional=True))
            self.query_layers.append(nn.GRU(config.embedding_dim, hidden, batch_first=True, bidirectional=True))
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(4 * hidden, config.num_answers) if config.num_answers > 0 else None

    def forward(self, doc_ids, doc_mask, clusters, query_ids, query_mask, labels=None, known=None) -> ReaderOutput:
        """All ``[B, T]`` / ``[B, Q]``; ``labels [B]`` a vocabulary id (attention sum) or an answer index;
        ``known [B]`` bool: False where the label is a placeholder, left out of the loss."""
        doc_mask, query_mask = doc_mask.bool(), query_mask.bool()
        query_emb = self.embedding(query_ids)  # [B, Q, E]
        query_lengths = query_mask.sum(1)
        x = self.dropout(self.embedding(doc_ids))  # [B, T, E]
        for k, layer in enumerate(self.doc_layers):
            cgru = isinstance(layer, BiCorefGRU)
            doc = layer(x, doc_mask, clusters) if cgru else _run_gru(layer, x, doc_mask.sum(1))  # [B, T, 2H]
            query = _run_gru(self.query_layers[k], query_emb, query_lengths)  # [B, Q, 2H]
            if k < self.config.num_layers - 1:
                scores = doc @ query.transpose(1, 2)  # [B, T, Q]
                weights = torch.softmax(scores.masked_fill(~query_mask.unsqueeze(1), float("-inf")), dim=-1)
                x = self.dropout(doc * (weights @ query))  # [B, T, 2H]: x_i = d_i ⊙ q̃_i
            else:
                doc = self.dropout(doc)
        hidden = self.config.hidden_size
        rows = torch.arange(query.size(0), device=query.device)
        q = torch.cat([query[rows, query_lengths - 1, :hidden], query[:, 0, hidden:]], dim=-1)  # [B, 2H]
        logits = (doc @ q.unsqueeze(-1)).squeeze(-1).masked_fill(~doc_mask, float("-inf"))  # [B, T]
        attention = torch.softmax(logits, dim=-1)  # s
        if self.classifier is None:
            scores = attention_sum(attention, doc_ids, self.config.vocab_size)  # [B, V] probabilities
            losses = None if labels is None else -torch.log(scores[rows, labels].clamp_min(1e-12))  # [B]
        else:
            pooled = (attention.unsqueeze(-1) * doc).sum(1)  # [B, 2H]
            scores = self.classifier(torch.cat([q, pooled], dim=-1))  # [B, A]
            losses = None if labels is None else nn.functional.cross_entropy(scores, labels, reduction="none")
        loss = None
        if losses is not None:
            weights = known.float() if known is not None else torch.ones_like(losses)
            loss = (losses * weights).sum() / weights.sum().clamp_min(1.0)  # never a NaN mean over nothing
        return ReaderOutput(loss, scores, attention)
