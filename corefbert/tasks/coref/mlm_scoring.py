"""Pronoun coreference by masked-LM candidate scoring (paper table 5; Kocijan et al. 2019's method).

For each candidate the pronoun is replaced by as many mask tokens as the candidate has subword tokens; the
candidate's score is the mean (or sum) log-probability of its tokens at those masks, and the better-scored
candidate wins. Fine-tuning uses the paper's eq. 5,

    L = -log P(a|S) + alpha * max(0, log P(b|S) - log P(a|S) + beta),

with ``a`` the referent and ``b`` the other candidate (with more than two, the best-scored wrong one); the
WikiCREM variant replaces ``log P(b|S)`` by its mean over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from corefbert.errors import CorefBertError
from corefbert.tasks.coref.readers import PronounExample
from corefbert.tasks.heads import frozen_pooler
from corefbert.text.tokenizers import joins_next, span_tokens

REDUCTIONS = ("mean", "sum")
LOSS_VARIANTS = ("paper", "wikicrem")


def _in_context(tokenizer, left_text: str, candidate: str, right_text: str) -> tuple[list[int], list[int], list[int]]:
    """The ids of ``left_text + candidate + right_text`` from one tokenizer call, cut into those before the
    candidate, the candidate's own (:func:`corefbert.text.tokenizers.span_tokens`) and those after: one call
    over the whole text reads every family as in running text: byte-level BPE's space belongs to the
    candidate's first token, and SentencePiece gives the context after the candidate no space piece of its own
    (tokenized apart, ``"."`` became a space piece and a period)."""
    text = left_text + candidate + right_text
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoding["input_ids"]
    tokens = span_tokens(text, encoding["offset_mapping"], joins_next(encoding.word_ids()), len(left_text),
                         len(left_text) + len(candidate))
    if not tokens:
        return ids, [], []
    return ids[:tokens[0]], ids[tokens[0]:tokens[-1] + 1], ids[tokens[-1] + 1:]


def encode_candidates(example: PronounExample, tokenizer, max_length: int = 128) -> dict[str, list[list[int]]]:
    """One masked sequence per candidate, ``[CLS] left [MASK]*k right [SEP]`` (the text tokenized with the
    candidate in the pronoun's place: :func:`_in_context`), and ``target_ids`` (the candidate's token id at
    each mask, -100 elsewhere); when too long, context is cut on both sides of the masks, as much as fits."""
    left_text = example.text[:example.pronoun_start]
    right_text = example.text[example.pronoun_end:]
    input_ids, target_ids = [], []
    for candidate in example.candidates:
        left, cand, right = _in_context(tokenizer, left_text, candidate, right_text)
        if not cand:
            raise CorefBertError(f"candidate {candidate!r} of {example.id} tokenizes to nothing")
        budget = max_length - 2 - len(cand)
        if budget < 0:
            raise CorefBertError(f"candidate {candidate!r} of {example.id} is longer than max_length {max_length}")
        keep_left = min(len(left), max(budget - len(right), budget // 2))
        keep_right = min(len(right), budget - keep_left)
        masks = [tokenizer.mask_token_id] * len(cand)
        input_ids.append([tokenizer.cls_token_id, *left[len(left) - keep_left:], *masks, *right[:keep_right],
                          tokenizer.sep_token_id])
        target_ids.append([-100] * (1 + keep_left) + cand + [-100] * (keep_right + 1))
    return {"input_ids": input_ids, "target_ids": target_ids}


def with_labels_and_index(batch: dict[str, torch.Tensor], features: list[dict]) -> dict[str, torch.Tensor]:
    """Add ``labels`` (the gold candidate) and ``example_index`` when every feature carries them."""
    if all("label" in f for f in features):
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=torch.long)
    if all("index" in f for f in features):
        batch["example_index"] = torch.tensor([f["index"] for f in features], dtype=torch.long)
    return batch


def collate_candidates(features: list[dict], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad :func:`encode_candidates` features (plus ``label``, -1 when none) to ``[B, N, L]`` tensors, N the
    most candidates of any example; ``candidate_mask`` [B, N] marks the real ones."""
    batch, n_cand = len(features), max(len(f["input_ids"]) for f in features)
    length = max(len(ids) for f in features for ids in f["input_ids"])
    input_ids = torch.full((batch, n_cand, length), pad_token_id, dtype=torch.long)
    target_ids = torch.full((batch, n_cand, length), -100, dtype=torch.long)
    attention_mask = torch.zeros((batch, n_cand, length), dtype=torch.long)
    candidate_mask = torch.zeros((batch, n_cand), dtype=torch.bool)
    for b, feature in enumerate(features):
        for n, (ids, targets) in enumerate(zip(feature["input_ids"], feature["target_ids"])):
            input_ids[b, n, :len(ids)] = torch.tensor(ids)
            target_ids[b, n, :len(targets)] = torch.tensor(targets)
            attention_mask[b, n, :len(ids)] = 1
            candidate_mask[b, n] = True
    out = {"input_ids": input_ids, "attention_mask": attention_mask, "target_ids": target_ids,
           "candidate_mask": candidate_mask}
    return with_labels_and_index(out, features)


def _mlm_head(mlm: nn.Module) -> nn.Module | None:
    """The prediction head of a ``*ForMaskedLM`` (``cls`` for BERT, ``lm_head`` for RoBERTa), if known."""
    for name in ("cls", "lm_head"):
        head = getattr(mlm, name, None)
        if isinstance(head, nn.Module):
            return head
    return None


def candidate_log_probs(mlm: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        target_ids: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """[rows, L] ids, mask and ``target_ids`` (-100: not scored) -> [rows], the mean/sum log-probability of
    the targets. The vocabulary projection runs only at the target positions: full logits would be rows x L
    x V floats (2 GB for 128 x 128 x 30k)."""
    is_target = target_ids != -100  # [rows, L]
    head = _mlm_head(mlm)
    if head is not None:
        hidden = mlm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = head(hidden[is_target])  # [T, V]
    else:
        logits = mlm(input_ids=input_ids, attention_mask=attention_mask).logits[is_target]  # [T, V]
    token_log_probs = logits.float().log_softmax(-1).gather(-1, target_ids[is_target].unsqueeze(-1)).squeeze(-1)
    rows = torch.arange(input_ids.shape[0], device=input_ids.device).unsqueeze(1).expand_as(target_ids)
    sums = torch.zeros(input_ids.shape[0], device=input_ids.device).index_add(0, rows[is_target], token_log_probs)
    return sums if reduction == "sum" else sums / is_target.sum(1).clamp(min=1)


def pronoun_margin_loss(scores: torch.Tensor, labels: torch.Tensor, candidate_mask: torch.Tensor,
                        alpha: float = 10.0, beta: float = 0.2, variant: str = "paper") -> torch.Tensor:
    """Eq. 5, averaged over the examples that have a referent. scores: [B, N] log P(candidate|S); labels: [B]
    referent index (-1: none, ignored); candidate_mask: [B, N]. ``variant="wikicrem"`` uses the batch mean of
    the wrong-candidate score in the hinge (Kocijan et al.'s code: ``loss_1 + alpha * max(0, beta + loss_1 -
    loss_2.mean())``)."""
    valid = labels >= 0  # [B]
    if not valid.any():
        return scores.sum() * 0.0  # keeps the graph (and DDP) whole without a NaN mean over nothing
    scores, labels, candidate_mask = scores[valid], labels[valid], candidate_mask[valid]
    correct = scores.gather(1, labels.unsqueeze(1)).squeeze(1)  # [B']
    wrong_mask = candidate_mask.clone()
    wrong_mask[torch.arange(len(labels)), labels] = False
    wrong = scores.masked_fill(~wrong_mask, float("-inf")).max(1).values  # [B'] best-scored wrong candidate
    if variant == "wikicrem":
        wrong = wrong.mean().expand_as(correct)
    hinge = torch.clamp(wrong - correct + beta, min=0.0)
    return (-correct + alpha * hinge).mean()


@dataclass
class CandidateScoringOutput:
    loss: torch.Tensor | None
    scores: torch.Tensor  # [B, N] log P(candidate|S), -inf on padded candidate slots


class CandidateScoringModel(nn.Module):
    """Wraps any ``AutoModelForMaskedLM``: ``forward(**collate_candidates(...))`` -> scores and eq. 5 loss."""

    def __init__(self, mlm: nn.Module, reduction: str = "mean", alpha: float = 10.0, beta: float = 0.2,
                 loss_variant: str = "paper", pooler: dict[str, torch.Tensor] | None = None):
        super().__init__()
        self.mlm, self.reduction, self.alpha, self.beta, self.loss_variant = mlm, reduction, alpha, beta, loss_variant
        # The masked-LM class has no pooler; the backbone's rides along frozen so the saved folder is a
        # complete encoder checkpoint (AutoModel loads it with no missing key).
        self.pooler = frozen_pooler(mlm.config, pooler)

    def forward(self, input_ids, attention_mask, target_ids, candidate_mask, labels=None, example_index=None):
        batch, n_cand, length = input_ids.shape
        real = candidate_mask.reshape(-1)  # only real candidate slots go through the encoder
        rows = [t.reshape(-1, length)[real] for t in (input_ids, attention_mask, target_ids)]  # [real, L]
        row_scores = candidate_log_probs(self.mlm, *rows, self.reduction)
        scores = torch.full((batch * n_cand,), float("-inf"), device=input_ids.device, dtype=row_scores.dtype)
        scores = scores.masked_scatter(real, row_scores).view(batch, n_cand)
        loss = None
        if labels is not None:
            safe = scores.masked_fill(~candidate_mask, 0.0)  # no -inf reaches the loss or its gradient
            loss = pronoun_margin_loss(safe, labels, candidate_mask, self.alpha, self.beta, self.loss_variant)
        return CandidateScoringOutput(loss=loss, scores=scores)
