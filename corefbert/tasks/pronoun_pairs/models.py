"""Sentence-pair entailment classifiers trained from scratch: does ``source`` (the text with a pronoun) entail
``target`` (the same text with the pronoun replaced)?

- ``da``: Decomposable Attention (Parikh, Täckström, Das and Uszkoreit, EMNLP 2016): attend, compare,
  aggregate, with the optional intra-sentence attention and its distance bias (section 3.4).
- ``lstmn``: the Deep-Attention LSTMN encoder-decoder with deep fusion (Cheng, Dong and Lapata, EMNLP 2016;
  :mod:`corefbert.tasks.pronoun_pairs.lstmn`).
- ``bilstm``: a BiLSTM encoder-decoder: the decoder BiLSTM reads the target starting from the encoder's final
  states (conditional encoding), the classifier reads the decoder's final states.

Every model takes ``source_ids``/``source_mask`` ``[batch, src]``, ``target_ids``/``target_mask``
``[batch, tgt]`` (right-padded, mask 1 on words) and optional ``labels`` ``[batch]`` and returns
``SequenceClassifierOutput(loss, logits [batch, num_labels])``; saved as :data:`PAIR_FOLDER`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from corefbert.tasks.pronoun_pairs.lstmn import LSTMN
from corefbert.tasks.scratch import ScratchConfig, ScratchFolder

CONFIG_FILE = "pair_model.json"
MODEL_TYPES = ("da", "lstmn", "bilstm")


@dataclass(frozen=True)
class PairModelConfig(ScratchConfig):
    """What rebuilds a pair model; defaults are Parikh et al.'s (200 hidden units, dropout 0.2, 300-d words)."""

    describes: ClassVar[str] = "a pair model config"
    advice: ClassVar[str] = f"use the {CONFIG_FILE} saved with the weights (run_pronoun_pairs.py writes it)"

    model_type: str
    vocab_size: int
    embedding_dim: int = 300
    hidden_size: int = 200
    num_labels: int = 2
    dropout: float = 0.2
    pad_id: int = 0
    freeze_embeddings: bool = False
    intra_attention: bool = False  # da only (section 3.4)
    max_distance: int = 10  # da intra-attention: "all distances greater than 10 words share a common bias"
    init_std: float = 0.01  # da: N(0, 0.01) weights as section 4 states; 0 keeps PyTorch's default init

    def check(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {self.model_type!r} is not one of {', '.join(MODEL_TYPES)}")


def _feed_forward(inputs: int, hidden: int, dropout: float) -> nn.Sequential:
    """Parikh et al.'s F, G, H and F_intra: two ReLU layers ("dropout ... for all ReLU layers": on the input of each)."""
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(inputs, hidden), nn.ReLU(),
                         nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.ReLU())


def _masked_softmax(scores: torch.Tensor, keep: torch.Tensor, dim: int) -> torch.Tensor:
    return scores.masked_fill(keep == 0, float("-inf")).softmax(dim)


def distance_buckets(length: int, max_distance: int, device=None) -> torch.Tensor:
    """``[length, length]`` index of the bias ``d_{i-j}``: ``i - j + max_distance`` for ``|i - j| <= max_distance``,
    one shared bucket ``2 * max_distance + 1`` for every longer distance."""
    offset = torch.arange(length, device=device)[:, None] - torch.arange(length, device=device)[None, :]
    return torch.where(offset.abs() <= max_distance, offset + max_distance, 2 * max_distance + 1)


class _Embedder(nn.Module):
    def __init__(self, config: PairModelConfig):
        super().__init__()
        self.embeddings = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=config.pad_id)
        self.embeddings.weight.requires_grad_(not config.freeze_embeddings)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(ids)  # [batch, len, embedding]


def _classification_output(logits: torch.Tensor, labels: torch.Tensor | None) -> SequenceClassifierOutput:
    loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
    return SequenceClassifierOutput(loss=loss, logits=logits)


class DecomposableAttention(nn.Module):
    """Parikh et al. (2016). Words are embedded, projected linearly to ``hidden_size`` ("projected down to 200
    dimensions", section 4), and a learned NULL vector is prepended to each sentence so that a word may align
    to nothing (the NULL token of the paper's input representation)."""

    def __init__(self, config: PairModelConfig):
        super().__init__()
        self.config = config
        d, drop = config.hidden_size, config.dropout
        self.embed = _Embedder(config)
        self.project = nn.Linear(config.embedding_dim, d, bias=False)
        self.null = nn.Parameter(torch.randn(d) * 0.1)
        width = d
        if config.intra_attention:
            self.intra = _feed_forward(d, d, drop)
            self.distance_bias = nn.Parameter(torch.zeros(2 * config.max_distance + 2))
            width = 2 * d  # ā_i = [a_i, a'_i]
        self.attend = _feed_forward(width, d, drop)  # F
        self.compare = _feed_forward(2 * width, d, drop)  # G
        self.aggregate = _feed_forward(2 * d, d, drop)  # H
        self.classify = nn.Linear(d, config.num_labels)  # "followed by a linear layer"; no dropout on it
        # "All other parameter weights (hidden layers etc.) were initialized from random Gaussians with mean 0
        # and standard deviation 0.01" (section 4); biases start at zero.
        for module in self.modules():
            if isinstance(module, nn.Linear) and config.init_std > 0:
                nn.init.normal_(module.weight, 0.0, config.init_std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def sentence(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected words with NULL in front ``[batch, 1 + len, d]`` (or ``2d`` with intra-attention) and the
        mask ``[batch, 1 + len]``."""
        words = self.project(self.embed(ids))  # [batch, len, d]
        words = torch.cat([self.null.expand(words.shape[0], 1, -1), words], 1)  # [batch, 1 + len, d]
        mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], 1)  # [batch, 1 + len]
        if not self.config.intra_attention:
            return words, mask
        # eq. 6: f_ij = F_intra(a_i)^T F_intra(a_j); eq. 7: a'_i = Σ_j softmax_j(f_ij + d_{i-j}) a_j
        keys = self.intra(words)  # [batch, 1 + len, d]
        scores = keys @ keys.transpose(1, 2)  # [batch, 1 + len, 1 + len]
        buckets = distance_buckets(words.shape[1], self.config.max_distance, words.device)
        scores = scores + self.distance_bias[buckets]
        self_aligned = _masked_softmax(scores, mask[:, None, :], -1) @ words  # [batch, 1 + len, d]
        return torch.cat([words, self_aligned], -1), mask

    def forward(self, source_ids, source_mask, target_ids, target_mask, labels=None) -> SequenceClassifierOutput:
        a, a_mask = self.sentence(source_ids, source_mask)  # [batch, la, w], [batch, la]
        b, b_mask = self.sentence(target_ids, target_mask)  # [batch, lb, w], [batch, lb]
        # Attend, eq. 1: e_ij = F(a_i)^T F(b_j)
        e = self.attend(a) @ self.attend(b).transpose(1, 2)  # [batch, la, lb]
        # eq. 2: β_i = Σ_j softmax_j(e_ij) b_j ;  α_j = Σ_i softmax_i(e_ij) a_i
        beta = _masked_softmax(e, b_mask[:, None, :], 2) @ b  # [batch, la, w]
        alpha = _masked_softmax(e, a_mask[:, :, None], 1).transpose(1, 2) @ a  # [batch, lb, w]
        # Compare, eq. 3: v1,i = G([ā_i, β_i]) ;  v2,j = G([b̄_j, α_j])
        v1 = self.compare(torch.cat([a, beta], -1)) * a_mask[..., None]  # [batch, la, d]
        v2 = self.compare(torch.cat([b, alpha], -1)) * b_mask[..., None]  # [batch, lb, d]
        # Aggregate, eq. 4: v1 = Σ_i v1,i ; v2 = Σ_j v2,j ; eq. 5: ŷ = H([v1, v2])
        logits = self.classify(self.aggregate(torch.cat([v1.sum(1), v2.sum(1)], -1)))  # [batch, labels]
        return _classification_output(logits, labels)


def _mean_over_words(tape: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[batch, len, d]`` averaged over the words (mask 1) -> ``[batch, d]``."""
    mask = mask.to(tape.dtype)[..., None]
    return (tape * mask).sum(1) / mask.sum(1).clamp(min=1)


class LSTMNPairModel(nn.Module):
    """Cheng et al. (2016), section 3.3 and the NLI setting of section 5.3: an LSTMN encoder reads the premise
    (``source``), a deep-fusion LSTMN decoder the hypothesis (``target``) attending over the encoder's tapes;
    both hidden tapes average-pooled, concatenated and classified by an MLP with a tanh hidden layer."""

    def __init__(self, config: PairModelConfig):
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.embed = _Embedder(config)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = LSTMN(config.embedding_dim, d)
        self.decoder = LSTMN(config.embedding_dim, d, fusion=True)
        self.classifier = nn.Sequential(nn.Linear(2 * d, d), nn.Tanh(), nn.Dropout(config.dropout),
                                        nn.Linear(d, config.num_labels))

    def forward(self, source_ids, source_mask, target_ids, target_mask, labels=None) -> SequenceClassifierOutput:
        gamma, alpha = self.encoder(self.dropout(self.embed(source_ids)))  # [batch, src, d] each
        hidden, _ = self.decoder(self.dropout(self.embed(target_ids)), source=(gamma, alpha, source_mask))
        pooled = torch.cat([_mean_over_words(gamma, source_mask), _mean_over_words(hidden, target_mask)], -1)
        return _classification_output(self.classifier(pooled), labels)  # pooled [batch, 2d]


class BiLSTMPairModel(nn.Module):
    """A BiLSTM encoder-decoder: the encoder BiLSTM reads ``source``; the decoder BiLSTM reads ``target`` from
    the encoder's final (h, c) of each direction (Rocktäschel et al.'s conditional encoding, both directions);
    the decoder's final forward and backward states go to an MLP with a tanh hidden layer."""

    def __init__(self, config: PairModelConfig):
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.embed = _Embedder(config)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = nn.LSTM(config.embedding_dim, d, batch_first=True, bidirectional=True)
        self.decoder = nn.LSTM(config.embedding_dim, d, batch_first=True, bidirectional=True)
        self.classifier = nn.Sequential(nn.Linear(2 * d, d), nn.Tanh(), nn.Dropout(config.dropout),
                                        nn.Linear(d, config.num_labels))

    @staticmethod
    def _run(lstm: nn.LSTM, inputs: torch.Tensor, mask: torch.Tensor, state=None):
        """Packed, so the final states are those of each sequence's last word, not of its padding."""
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
        return lstm(packed, state)[1]  # (h, c): [2, batch, d] each, forward and backward

    def forward(self, source_ids, source_mask, target_ids, target_mask, labels=None) -> SequenceClassifierOutput:
        state = self._run(self.encoder, self.dropout(self.embed(source_ids)), source_mask)
        h, _ = self._run(self.decoder, self.dropout(self.embed(target_ids)), target_mask, state)
        final = torch.cat([h[0], h[1]], -1)  # [batch, 2d]
        return _classification_output(self.classifier(final), labels)


_CLASSES = {"da": DecomposableAttention, "lstmn": LSTMNPairModel, "bilstm": BiLSTMPairModel}


def build_pair_model(config: PairModelConfig, pretrained: torch.Tensor | None = None) -> nn.Module:
    """A fresh model of ``config.model_type``; ``pretrained`` ``[vocab, embedding]`` replaces the embeddings."""
    model = _CLASSES[config.model_type](config)
    if pretrained is not None:
        with torch.no_grad():
            model.embed.embeddings.weight.copy_(pretrained)
    return model


#: A scratch model's folder (:mod:`corefbert.tasks.scratch`): ``model.safetensors``, ``pair_model.json`` (its
#: :class:`PairModelConfig`) and ``vocab.json``.
PAIR_FOLDER = ScratchFolder(CONFIG_FILE, PairModelConfig, lambda config, _vocabulary: build_pair_model(config),
                            f"run_pronoun_pairs.py with --model {'|'.join(MODEL_TYPES)}")
