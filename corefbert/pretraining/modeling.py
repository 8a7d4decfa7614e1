"""CorefBERT pretraining models: an MLM head plus the copy-based Mention Reference Prediction (MRP) head.

The copy head (paper section 3.2) scores, for a masked mention whose first/last subword is ``s_i``/``t_i``,
every context token ``k`` with ``(V ⊙ h_k)ᵀ h_i`` and normalizes over ``k`` (eq. 2):

    Pr(x_j | x_i) = softmax_k ((V ⊙ h_k)ᵀ h_i)
    log Pr(w_j | w_i) = log Pr(x_{s_j} | x_{s_i}) + log Pr(x_{t_j} | x_{t_i})           (eq. 3)
    L_MRP = - mean over masked mentions w_i of logsumexp_{w_j ∈ C(w_i)} log Pr(w_j | w_i)   (eq. 4 sums)

What the softmax ranges over (``config.mrp_copy_candidates``, ``--mrp_copy_candidates``):

- ``"copyable"`` (default, this code's choice): the collator's ``copy_mask``, real non-special tokens not
  selected for masking. Padding, special tokens and every masked position (the query included) can never be
  a referent (``C(w_i)`` holds unmasked mentions only), so with them in the softmax part of every gradient
  goes to pushing their scores down; without them eq. 2 is a choice among the words a reader could copy.
- ``"sequence"``: the paper's set, every ``x_k ∈ X`` of the input sequence (special tokens and masked
  positions, the query included); padding is no part of ``X``.

A row that packs several documents (``--packing documents``) adds one rule through the collator's
``document_ids`` to both: only tokens of the query's own document (``"sequence"``: and the row's special
tokens), so a same-surface noun of a neighbouring document is never a candidate.
``config.mrp_official_loss=True`` instead reproduces the official code (thunlp/CorefBERT, ``BertForCopy`` with
the data of ``gen_copy_data_MRP.py``): softmax over all positions of the row (padding, specials and masked
positions included), and a masked word's first and last subword as two separate queries, each a log-sum over
the referents' first (resp. last) subwords alone; a one-token word is one query, and the loss is the mean over
queries, not mentions.

Eq. 4 sums over the masked mentions ``M``; the loss here is their **mean** over the batch, as in the official
code (``BertForCopy`` divides by ``sum(valid_span_mask)``), so the loss scale does not grow with the number of
masked mentions and ``mrp_loss_weight`` 1 is the 1:1 ratio the paper found best (section 4.1).

Only the ``[batch, mentions]`` rows of queries are scored against the sequence, never the full
``length × length`` matrix, and all of it runs in fp32 even under bf16/fp16 autocast: scores of a few
hundred in half precision would lose the differences the softmax is about.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, RobertaConfig
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import BertModel, BertOnlyMLMHead, BertPreTrainedModel
from transformers.models.roberta.modeling_roberta import RobertaLMHead, RobertaModel, RobertaPreTrainedModel

from corefbert.errors import CorefBertError

# Fill for excluded positions: exp(NEG - max) is exactly 0 in fp32, yet sums of two fills stay finite, so
# rows with no valid entry (padding slots) give finite values and no NaN gradient through torch.where.
NEG = -1e9

#: ``config.mrp_copy_candidates``: what eq. 2's softmax ranges over (module docstring). ``copyable``: the
#: collator's ``copy_mask`` (the default); ``sequence``: every token of the sequence, the paper's ``x_k ∈ X``.
COPY_CANDIDATES = ("copyable", "sequence")
MRP_CONFIG_DEFAULTS = {"mrp_loss_weight": 1.0, "mrp_official_loss": False,
                       "mrp_attention_within_documents": False, "mrp_copy_candidates": "copyable"}


@dataclass
class CorefBertPreTrainingOutput(ModelOutput):
    """Output of every CorefBERT pretraining model: ``loss`` = ``mlm_loss + config.mrp_loss_weight *
    mrp_loss``; ``logits`` ``[batch, seq, vocab]``; ``mrp_correct`` / ``mrp_total``: detached counts of masked
    mentions whose best copyable context word is a true referent, and of masked mentions;
    ``last_hidden_state`` ``[batch, seq, hidden]``, what both heads (and the probes) read."""

    loss: torch.FloatTensor | None = None
    mlm_loss: torch.FloatTensor | None = None
    mrp_loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    mrp_correct: torch.LongTensor | None = None
    mrp_total: torch.LongTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    last_hidden_state: torch.FloatTensor | None = None


class MentionReferenceHead(nn.Module):
    """The copy head: one trainable vector ``copy_vector`` (``V``, size hidden)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        # The official code starts V at 1/hidden: initial scores are the mean of h_k ⊙ h_i, small enough
        # that the first softmax is not saturated.
        self.copy_vector = nn.Parameter(torch.full((hidden_size,), 1.0 / hidden_size))

    def forward(self, hidden_states: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor):
        """Copy scores of the start and end queries; see :func:`copy_scores`."""
        return copy_scores(hidden_states, self.copy_vector, starts, ends)


def copy_scores(hidden_states: torch.Tensor, copy_vector: torch.Tensor, starts: torch.Tensor,
                ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalized fp32 copy scores ``(V ⊙ h_k)ᵀ h_i`` for the query positions ``starts`` and ``ends``
    ``[batch, mentions]`` (``s_i``, ``t_i``) over ``hidden_states`` ``[batch, seq, hidden]`` (any float
    dtype): ``(start_scores, end_scores)``, each ``[batch, mentions, seq]`` float32."""
    batch, _, hidden = hidden_states.shape
    mentions = starts.shape[1]
    with torch.autocast(device_type=hidden_states.device.type, enabled=False):
        states = hidden_states.float()  # [batch, seq, hidden]
        positions = torch.cat([starts, ends], dim=1)  # [batch, 2 * mentions]
        queries = states.gather(1, positions.unsqueeze(-1).expand(batch, 2 * mentions, hidden))
        queries = queries * copy_vector.float()  # [batch, 2 * mentions, hidden]
        scores = torch.bmm(queries, states.transpose(1, 2))  # [batch, 2 * mentions, seq]
    return scores[:, :mentions], scores[:, mentions:]


def own_document(document_ids: torch.Tensor, mention_starts: torch.Tensor) -> torch.Tensor:
    """``[batch, mentions, seq]`` bool: the tokens of each query's own document (of ``[batch, seq]``)."""
    return document_ids.unsqueeze(1) == document_ids.gather(1, mention_starts).unsqueeze(-1)


def softmax_candidates(setting: str, copy_mask: torch.Tensor | None, attention_mask: torch.Tensor | None,
                       document_ids: torch.Tensor | None, mention_starts: torch.Tensor, length: int) -> torch.Tensor:
    """Where each query's copy softmax may look under ``setting`` (one of :data:`COPY_CANDIDATES`):
    ``[batch, 1, seq]`` bool, or ``[batch, mentions, seq]`` with ``document_ids`` (the query's own document;
    ``"sequence"``: and the row's special tokens). ``"copyable"``: ``copy_mask``; ``"sequence"``: the real
    positions of ``attention_mask`` ``[batch, seq]`` (None: every position of ``length``)."""
    if setting == "sequence":
        if attention_mask is None:
            real = mention_starts.new_ones(mention_starts.shape[0], 1, length, dtype=torch.bool)
        elif attention_mask.dim() != 2:
            raise ValueError("mrp_copy_candidates='sequence' needs the [batch, seq] attention_mask")
        else:
            real = attention_mask.bool().unsqueeze(1)  # [batch, 1, seq]
        if document_ids is None:
            return real
        # specials (-1) belong to every document's sequence
        return real & (own_document(document_ids, mention_starts) | (document_ids < 0).unsqueeze(1))
    if setting != "copyable":
        raise ValueError(f"mrp_copy_candidates {setting!r} is not one of {', '.join(COPY_CANDIDATES)}")
    if copy_mask is None:
        raise ValueError("the MRP loss needs copy_mask (the collator's output) unless mrp_official_loss")
    allowed = copy_mask.bool().unsqueeze(1)  # [batch, 1, seq]
    return allowed if document_ids is None else allowed & own_document(document_ids, mention_starts)


def mrp_loss(hidden_states: torch.Tensor, copy_vector: torch.Tensor | None, copy_mask: torch.Tensor | None,
             mrp_mention_starts: torch.Tensor, mrp_mention_ends: torch.Tensor, mrp_mention_mask: torch.Tensor,
             mrp_referent_starts: torch.Tensor, mrp_referent_ends: torch.Tensor,
             mrp_referent_mask: torch.Tensor, official: bool = False,
             document_ids: torch.Tensor | None = None, candidates: str = "copyable",
             attention_mask: torch.Tensor | None = None,
             scores: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The MRP loss (eq. 2-4), averaged over masked mentions; 0 when there is none. Scalar fp32.

    Args:
        hidden_states: ``[batch, seq, hidden]``; copy_vector: ``[hidden]``.
        copy_mask: ``[batch, seq]`` bool, the collator's copyable positions (``candidates="copyable"``).
        mrp_mention_starts / mrp_mention_ends / mrp_mention_mask: ``[batch, mentions]``, the collator's keys.
        mrp_referent_starts / mrp_referent_ends / mrp_referent_mask: ``[batch, mentions, referents]``.
        official: the official code's form (first and last subword as separate queries, softmax over all
            positions, mean over queries); ``candidates`` and ``attention_mask`` are then unused.
        document_ids: ``[batch, seq]``, the collator's; the softmax then stays in the query's document.
        candidates: what the softmax ranges over, one of :data:`COPY_CANDIDATES` (module docstring).
        attention_mask: ``[batch, seq]``, 1 on real tokens (``candidates="sequence"``; None: no padding).
        scores: the :func:`copy_scores` of these queries when already computed (the model's forward).
    """
    if scores is None:
        scores = copy_scores(hidden_states, copy_vector, mrp_mention_starts, mrp_mention_ends)
    start_scores, end_scores = scores  # [batch, mentions, seq] each
    mention_mask, referent_mask = mrp_mention_mask.bool(), mrp_referent_mask.bool()
    if official:
        # thunlp/CorefBERT: softmax over every position; the first and the last subword are separate queries
        # (one for a one-token word), averaged over queries.
        terms = []
        for part, referents in ((start_scores, mrp_referent_starts), (end_scores, mrp_referent_ends)):
            log_norm = torch.logsumexp(part, dim=-1)  # [batch, mentions]
            picked = part.gather(2, referents).masked_fill(~referent_mask, NEG)  # [batch, mentions, refs]
            terms.append(torch.logsumexp(picked, dim=-1) - log_norm)
        end_query = mention_mask & (mrp_mention_starts != mrp_mention_ends)  # [batch, mentions]
        per_query = (torch.where(mention_mask, -terms[0], 0.0).sum()
                     + torch.where(end_query, -terms[1], 0.0).sum())
        return per_query / (mention_mask.sum() + end_query.sum()).clamp(min=1)
    allowed = softmax_candidates(candidates, copy_mask, attention_mask, document_ids, mrp_mention_starts,
                                 hidden_states.shape[1])  # [batch, 1 or mentions, seq]
    start_scores = start_scores.masked_fill(~allowed, NEG)
    end_scores = end_scores.masked_fill(~allowed, NEG)
    start_log_probs = start_scores.gather(2, mrp_referent_starts) - start_scores.logsumexp(-1, keepdim=True)
    end_log_probs = end_scores.gather(2, mrp_referent_ends) - end_scores.logsumexp(-1, keepdim=True)
    word_log_probs = (start_log_probs + end_log_probs).masked_fill(~referent_mask, NEG)  # eq. 3
    log_likelihood = torch.logsumexp(word_log_probs, dim=-1)  # [batch, mentions], eq. 4
    per_mention = torch.where(mention_mask, -log_likelihood, torch.zeros_like(log_likelihood))
    return per_mention.sum() / mention_mask.sum().clamp(min=1)


def _word_end_positions(word_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``word_ids`` ``[batch, seq]``: which positions start a word, and each start's last token."""
    batch, length = word_ids.shape
    is_word = word_ids >= 0
    before = F.pad(word_ids[:, :-1], (1, 0), value=-1)
    after = F.pad(word_ids[:, 1:], (0, 1), value=-1)
    is_first = is_word & (word_ids != before)  # [batch, seq]
    is_last = is_word & (word_ids != after)
    # The n-th first token and the n-th last token of a row belong to the same word (words are contiguous).
    ordinal = is_first.long().cumsum(dim=1) - 1  # [batch, seq]
    positions = torch.arange(length, device=word_ids.device).expand(batch, length)
    ends_by_ordinal = torch.zeros(batch, length + 1, dtype=torch.long, device=word_ids.device)
    ends_by_ordinal.scatter_(1, torch.where(is_last, ordinal, length), positions)
    return is_first, ends_by_ordinal.gather(1, ordinal.clamp(min=0))


def candidate_words(copy_mask: torch.Tensor, word_ids: torch.Tensor, document_ids: torch.Tensor | None = None,
                    mention_starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The words a masked mention may be copied from: ``(candidates, word_ends)``, where ``candidates`` is
    ``[batch, 1, seq]`` (``[batch, mentions, seq]`` with ``document_ids``: the query's document only), True at the
    first token of every word whose first and last tokens are copyable, and ``word_ends`` ``[batch, seq]`` gives
    each word start's last token."""
    is_first, word_ends = _word_end_positions(word_ids)  # [batch, seq] each
    copy_mask = copy_mask.bool()
    candidates = (is_first & copy_mask & copy_mask.gather(1, word_ends)).unsqueeze(1)  # [batch, 1, seq]
    if document_ids is not None:
        candidates = candidates & own_document(document_ids, mention_starts)  # [batch, mentions, seq]
    return candidates, word_ends


@torch.no_grad()
def mrp_accuracy_counts(start_scores: torch.Tensor, end_scores: torch.Tensor, copy_mask: torch.Tensor,
                        word_ids: torch.Tensor, mention_mask: torch.Tensor, referent_starts: torch.Tensor,
                        referent_mask: torch.Tensor, document_ids: torch.Tensor | None = None,
                        mention_starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(correct, total)``: masked mentions whose best copyable context word is a true referent.

    A candidate word scores ``start_scores[s_w] + end_scores[t_w]`` (eq. 3; the softmax normalizers are
    the same for every candidate, so the argmax does not depend on them). Shapes as in :func:`mrp_loss`;
    with ``document_ids`` (and the queries' ``mention_starts``) only words of the query's document compete.
    """
    candidates, word_ends = candidate_words(copy_mask, word_ids, document_ids, mention_starts)
    mentions = start_scores.shape[1]
    word_scores = start_scores + end_scores.gather(2, word_ends.unsqueeze(1).expand(-1, mentions, -1))
    word_scores = word_scores.masked_fill(~candidates, float("-inf"))  # [batch, mentions, seq]
    best = word_scores.argmax(dim=-1)  # [batch, mentions]
    hit = ((referent_starts == best.unsqueeze(-1)) & referent_mask.bool()).any(dim=-1)
    hit = hit & candidates.any(dim=-1) & mention_mask.bool()
    return hit.sum(), mention_mask.bool().sum()


def ensure_mrp_config(config) -> None:
    """Give ``config`` the MRP attributes (saved in config.json) when it lacks them (a stock checkpoint)."""
    for key, default in MRP_CONFIG_DEFAULTS.items():
        if not hasattr(config, key):
            setattr(config, key, default)
    if config.mrp_copy_candidates not in COPY_CANDIDATES:
        raise CorefBertError(f"mrp_copy_candidates {config.mrp_copy_candidates!r} in the model config is not one of "
                             f"{', '.join(COPY_CANDIDATES)}")


def document_attention_mask(attention_mask: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """``[batch, 1, seq, seq]`` bool (query, key), what ``--attention_within_documents`` gives the encoder for rows
    that pack several documents: a word attends the words of its own document and the row's special tokens
    (``[CLS]``, separators, ``[SEP]``: ``document_ids`` -1); a special token attends the special tokens only, so
    that nothing of one document reaches another through them; padding is never attended."""
    real = attention_mask.bool()  # [batch, seq]
    word = document_ids >= 0  # [batch, seq]
    same = document_ids.unsqueeze(2) == document_ids.unsqueeze(1)  # [batch, seq (query), seq (key)]
    words_of_one_document = same & word.unsqueeze(2) & word.unsqueeze(1)
    special_key = (~word).unsqueeze(1)  # [batch, 1, seq]: every query may attend the special tokens
    return ((words_of_one_document | special_key) & real.unsqueeze(1)).unsqueeze(1)


class CorefPreTrainingMixin:
    """Shared forward and init of every CorefBERT pretraining model (this module's BERT and RoBERTa classes and
    the other families' of :mod:`corefbert.pretraining.families`)."""

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, MentionReferenceHead):
            init.constant_(module.copy_vector, 1.0 / module.copy_vector.numel())

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """``PreTrainedModel.from_pretrained``, with the pooler frozen again (loading resets requires_grad)."""
        loaded = super().from_pretrained(*args, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded)._freeze_pooler()
        return loaded

    def _freeze_pooler(self) -> None:
        # Kept so fine-tuning starts from the backbone's trained pooler; frozen because pretraining never
        # uses it, and an unused trainable parameter stops DDP at the second step.
        pooler = getattr(self.base_model, "pooler", None)  # ModernBERT, DeBERTa, ELECTRA, DistilBERT have none
        if pooler is not None:
            pooler.requires_grad_(False)

    def within_documents_mask(self, attention_mask: torch.Tensor, document_ids: torch.Tensor):
        """What the encoder is given under ``mrp_attention_within_documents``: :func:`document_attention_mask`
        ``[batch, 1, seq, seq]`` bool, which BERT-like encoders take as it is (a family overrides this)."""
        return document_attention_mask(attention_mask, document_ids)

    def encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs):
        """The encoder's output (``last_hidden_state`` ``[batch, seq, hidden]``, ...) of :meth:`forward`."""
        return self.base_model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                               position_ids=position_ids, inputs_embeds=inputs_embeds, return_dict=True, **kwargs)

    def mlm_logits(self, hidden_states: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
        """The MLM head's logits: ``[batch, seq, vocab]``, or ``[masked, vocab]`` of the ``targets`` ``[batch, seq]``
        bool rows alone."""
        return self.mlm_head(hidden_states if targets is None else hidden_states[targets])

    def _mlm(self, hidden_states, labels, masked_logits_only: bool):
        """``(logits, L_MLM or None)``: logits ``[batch, seq, vocab]``, or ``[masked, vocab]`` with
        ``masked_logits_only`` and ``labels``."""
        if labels is None:
            return self.mlm_logits(hidden_states, None), None
        targets = labels != -100  # [batch, seq]
        if masked_logits_only:
            logits = masked_logits = self.mlm_logits(hidden_states, targets)  # [masked, vocab]
        else:
            logits = self.mlm_logits(hidden_states, None)  # [batch, seq, vocab]
            masked_logits = logits[targets]  # [masked, vocab]
        # Sum over the selected rows / their count: 0 (not NaN) when nothing is masked, and only the
        # masked rows are cast to fp32 for the softmax over the vocabulary.
        mlm_loss = F.cross_entropy(masked_logits.float(), labels[targets], reduction="sum")
        return logits, mlm_loss / targets.sum().clamp(min=1)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, word_ids=None, copy_mask=None, mrp_mention_starts=None,
                mrp_mention_ends=None, mrp_mention_mask=None, mrp_referent_starts=None,
                mrp_referent_ends=None, mrp_referent_mask=None, document_ids=None,
                masked_logits_only: bool = False, **kwargs) -> CorefBertPreTrainingOutput:
        """Run on a collator batch (every key of docs/contracts.md): ``labels`` ``[batch, seq]`` give the MLM
        loss, the ``mrp_*`` tensors the MRP loss, ``word_ids`` + ``copy_mask`` the MRP accuracy counts;
        missing parts give ``None``. ``masked_logits_only`` (with ``labels``): the MLM head on the masked rows
        alone, ``logits`` ``[masked tokens, vocab]`` in ``labels != -100`` order; the same loss, and the
        vocabulary projection (over half of a small model's compute) shrinks to ~15% of the tokens."""
        token_mask = attention_mask  # [batch, seq]: the real tokens, eq. 2's sequence under "sequence"
        if (getattr(self.config, "mrp_attention_within_documents", False) and document_ids is not None
                and attention_mask is not None and attention_mask.dim() == 2):
            attention_mask = self.within_documents_mask(attention_mask, document_ids)
        outputs = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        hidden_states = outputs.last_hidden_state  # [batch, seq, hidden]
        logits, mlm_loss = self._mlm(hidden_states, labels, masked_logits_only)
        mrp_value = mrp_correct = mrp_total = None
        if mrp_mention_starts is not None:
            scores = self.mrp(hidden_states, mrp_mention_starts, mrp_mention_ends)  # [batch, mentions, seq]
            mrp_value = mrp_loss(
                hidden_states, None, copy_mask, mrp_mention_starts, mrp_mention_ends, mrp_mention_mask,
                mrp_referent_starts, mrp_referent_ends, mrp_referent_mask, self.config.mrp_official_loss,
                document_ids, self.config.mrp_copy_candidates, token_mask, scores=scores)
            # The accuracy asks whether the best copyable word is a referent, under either candidate set.
            if word_ids is not None and copy_mask is not None:
                mrp_correct, mrp_total = mrp_accuracy_counts(
                    *scores, copy_mask, word_ids, mrp_mention_mask, mrp_referent_starts, mrp_referent_mask,
                    document_ids, mrp_mention_starts)
        elif labels is not None:
            mrp_value = logits.new_zeros((), dtype=torch.float32)

        loss = None
        if mrp_value is not None:  # there is an MLM loss only with labels, and then an MRP value (0 or more)
            loss = (0.0 if mlm_loss is None else mlm_loss) + self.config.mrp_loss_weight * mrp_value
            # Keeps V in the graph with no MRP target or a 0 weight (the +MRM ablation): no unused
            # parameter for DDP, and the value is unchanged.
            loss = loss + 0.0 * self.mrp.copy_vector.sum()
        return CorefBertPreTrainingOutput(
            loss=loss, mlm_loss=mlm_loss, mrp_loss=mrp_value, logits=logits, mrp_correct=mrp_correct,
            mrp_total=mrp_total, hidden_states=outputs.hidden_states, attentions=outputs.attentions,
            last_hidden_state=hidden_states)


class CorefBertForPreTraining(CorefPreTrainingMixin, BertPreTrainedModel):
    """BERT with the MLM head (``cls``, tied to the word embeddings) and the MRP copy head (``mrp``);
    parameter names match ``BertForMaskedLM`` plus the pooler: every stock ``AutoModelFor*`` loads it."""

    _tied_weights_keys = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
                          "cls.predictions.decoder.bias": "cls.predictions.bias"}

    def __init__(self, config: BertConfig):
        super().__init__(config)
        ensure_mrp_config(config)
        self.bert = BertModel(config, add_pooling_layer=True)
        self.cls = BertOnlyMLMHead(config)
        self.mrp = MentionReferenceHead(config.hidden_size)
        self.post_init()
        self._freeze_pooler()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    @property
    def mlm_head(self) -> nn.Module:
        return self.cls


class CorefRobertaForPreTraining(CorefPreTrainingMixin, RobertaPreTrainedModel):
    """RoBERTa with the MLM head (``lm_head``, tied) and the MRP copy head (``mrp``); see the BERT class."""

    _tied_weights_keys = {"lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
                          "lm_head.decoder.bias": "lm_head.bias"}

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        ensure_mrp_config(config)
        self.roberta = RobertaModel(config, add_pooling_layer=True)
        self.lm_head = RobertaLMHead(config)
        self.mrp = MentionReferenceHead(config.hidden_size)
        self.post_init()
        self._freeze_pooler()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    @property
    def mlm_head(self) -> nn.Module:
        return self.lm_head
