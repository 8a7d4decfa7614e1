"""Extractive-QA models: the paper's QUOREF model and a multi-answer wrapper for the standard QA head.

``QuorefQAModel`` (paper section 4.1): any encoder ``AutoModel.from_pretrained`` loads, one extra randomly
initialized Transformer layer over its output (the "reasoning layer": BERT's layer, sized as the encoder), a
start/end head, and an answer-count head on the first token that predicts 0, 1 or 2 answer spans in the
window. Either extra piece can be switched off; with both off it is plain BERT QA. ``save_pretrained`` writes
the encoder as an ordinary checkpoint plus the sidecar ``quoref_head.*`` (:mod:`corefbert.tasks.heads`).

``SpanQAModel`` wraps ``AutoModelForQuestionAnswering`` (MRQA/SQuAD) so the loss can use up to four
gold spans per window; what it saves is the plain Hugging Face QA checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModelForQuestionAnswering, BertConfig
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import BertLayer
from transformers.models.roberta.modeling_roberta import RobertaLayer

from corefbert.errors import CorefBertError, one_line
from corefbert.tasks.heads import (
    frozen_pooler,
    load_encoder,
    load_encoder_and_head,
    read_head_config,
    save_encoder_and_head,
    saved_pooler,
    with_pooler,
)
from corefbert.tasks.qa.windows import span_loss

logger = logging.getLogger(__name__)

HEAD = "quoref"  # quoref_head.safetensors + quoref_head.json
_LAYERS = {"bert": BertLayer, "roberta": RobertaLayer}
# Where each family's config keeps what a BERT layer reads, first name found wins (DistilBERT: ``hidden_dim``,
# ``activation``, ``dropout``; ModernBERT: ``hidden_activation``, ``norm_eps``, ``mlp_dropout``).
_LAYER_SETTINGS = {"intermediate_size": ("intermediate_size", "hidden_dim"),
                   "hidden_act": ("hidden_act", "hidden_activation", "activation"),
                   "layer_norm_eps": ("layer_norm_eps", "norm_eps"),
                   "hidden_dropout_prob": ("hidden_dropout_prob", "dropout", "mlp_dropout"),
                   "attention_probs_dropout_prob": ("attention_probs_dropout_prob", "attention_dropout")}


def reasoning_layer_config(config):
    """The reasoning layer's config: the encoder's own for BERT and RoBERTa (their layer class), else a
    :class:`BertConfig` with the encoder's sizes, activation, norm epsilon and dropout (BERT's layer)."""
    if config.model_type in _LAYERS:
        return config
    found = {key: [getattr(config, name) for name in names if getattr(config, name, None) is not None]
             for key, names in _LAYER_SETTINGS.items()}
    settings = {key: values[0] for key, values in found.items() if values}
    settings.setdefault("intermediate_size", 4 * config.hidden_size)
    return BertConfig(hidden_size=config.hidden_size, num_attention_heads=config.num_attention_heads,
                      initializer_range=getattr(config, "initializer_range", 0.02), **settings)


@dataclass
class QAOutput(ModelOutput):
    """``loss`` when labels were given; logits per token [batch, seq] and per count [batch, counts]."""

    loss: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None
    count_logits: torch.Tensor | None = None


def _mask_padding(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    # Padding must get no probability, or a window's loss would depend on the batch it is padded in.
    return logits.masked_fill(attention_mask == 0, torch.finfo(logits.dtype).min)


class QuorefQAModel(nn.Module):
    """Encoder + optional reasoning layer + start/end head + optional answer-count head."""

    def __init__(self, encoder: nn.Module, reasoning_layer: bool = True, count_head: bool = True, max_count: int = 2):
        super().__init__()
        self.encoder = encoder
        config = encoder.config
        self.options = {"reasoning_layer": reasoning_layer, "count_head": count_head, "max_count": max_count}
        self.reasoning = None
        if reasoning_layer:
            self.reasoning_config = reasoning_layer_config(config)
            self.reasoning = _LAYERS.get(config.model_type, BertLayer)(self.reasoning_config)
            self.reasoning.apply(self._init_weights)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.count_outputs = nn.Linear(config.hidden_size, max_count + 1) if count_head else None
        for head in (self.qa_outputs, self.count_outputs):  # None: no count head, nothing to initialise
            self._init_weights(head)

    def _init_weights(self, module: nn.Module) -> None:
        std = getattr(self.encoder.config, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    @classmethod
    def from_pretrained(cls, model_name_or_path: str, reasoning_layer: bool = True, count_head: bool = True):
        """Load an encoder checkpoint (fresh heads) or a saved QUOREF model (its own heads and options)."""
        options = read_head_config(model_name_or_path, HEAD)
        encoder = load_encoder(model_name_or_path)  # pooler kept (frozen): the saved encoder is a checkpoint
        if options is None:
            return cls(encoder, reasoning_layer=reasoning_layer, count_head=count_head)
        asked = {"reasoning_layer": reasoning_layer, "count_head": count_head}
        if any(options.get(key, value) != value for key, value in asked.items()):
            logger.warning("%s was fine-tuned with %s; its saved heads are used, not %s",
                           model_name_or_path, options, asked)
        model = cls(encoder, **options)
        load_encoder_and_head(model, str(model_name_or_path), HEAD, with_encoder=False)
        return model

    def load_weights(self, directory: str) -> None:
        """Reload encoder and heads from a directory :meth:`save_pretrained` wrote, in place."""
        load_encoder_and_head(self, directory, HEAD)

    def save_pretrained(self, output_dir: str, state_dict: dict | None = None) -> None:
        """Write the encoder as an ordinary checkpoint and the heads in the ``quoref_head.*`` sidecar."""
        save_encoder_and_head(self, output_dir, HEAD, self.options, state_dict)

    def forward(self, input_ids, attention_mask, token_type_ids=None, answer_starts=None, answer_ends=None,
                answer_count=None, feature_index=None) -> QAOutput:
        """Logits per window; ``loss`` = span CE summed over the window's gold spans + count CE."""
        types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        encoded = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **types)
        hidden = encoded.last_hidden_state  # [batch, seq, hidden]
        if self.reasoning is not None:
            mask = create_bidirectional_mask(config=self.reasoning_config, inputs_embeds=hidden,
                                             attention_mask=attention_mask)
            hidden = self.reasoning(hidden, mask)  # [batch, seq, hidden]
            if isinstance(hidden, tuple):
                hidden = hidden[0]
        start_logits, end_logits = self.qa_outputs(hidden).unbind(dim=-1)  # [batch, seq] each
        start_logits = _mask_padding(start_logits, attention_mask)
        end_logits = _mask_padding(end_logits, attention_mask)
        count_logits = self.count_outputs(hidden[:, 0]) if self.count_outputs is not None else None  # [batch, counts]
        loss = None
        if answer_starts is not None and answer_ends is not None:
            loss = span_loss(start_logits, end_logits, answer_starts, answer_ends, reduction="sum")
            if count_logits is not None and answer_count is not None:
                loss = loss + nn.functional.cross_entropy(count_logits.float(), answer_count)
        return QAOutput(loss=loss, start_logits=start_logits, end_logits=end_logits, count_logits=count_logits)


class SpanQAModel(nn.Module):
    """``AutoModelForQuestionAnswering`` whose loss marginalizes over up to N gold spans per window. The QA
    class has no pooler, so the backbone's is carried along frozen and saved with it: the folder then loads
    with ``AutoModel`` with no missing key as well."""

    def __init__(self, qa_model: nn.Module, pooler: dict[str, torch.Tensor] | None = None):
        super().__init__()
        self.qa = qa_model
        self.pooler = frozen_pooler(qa_model.config, pooler)

    @classmethod
    def from_pretrained(cls, model_name_or_path: str):
        """A QA model from an encoder or QA checkpoint (the head is new unless the checkpoint has one)."""
        try:
            qa = AutoModelForQuestionAnswering.from_pretrained(model_name_or_path)
        except (OSError, ValueError) as err:
            raise CorefBertError(f"cannot load a QA model ({one_line(err, first_line=True)})", path=model_name_or_path) from None
        return cls(qa, saved_pooler(str(model_name_or_path)))

    def save_pretrained(self, output_dir: str, state_dict: dict | None = None) -> None:
        """Save as a plain Hugging Face QA checkpoint (loads with ``AutoModelForQuestionAnswering``)."""
        state_dict = with_pooler(self.state_dict() if state_dict is None else state_dict, "pooler",
                                 self.qa.base_model_prefix)
        qa_state = {k[len("qa."):] if k.startswith("qa.") else k: v for k, v in state_dict.items()}
        self.qa.save_pretrained(output_dir, state_dict=qa_state)

    def load_weights(self, directory: str) -> None:
        """Reload the weights :meth:`save_pretrained` wrote, in place."""
        self.qa.load_state_dict(AutoModelForQuestionAnswering.from_pretrained(directory).state_dict())
        pooler = saved_pooler(directory)
        if pooler is not None and self.pooler is not None:
            self.pooler.load_state_dict(pooler)

    def forward(self, input_ids, attention_mask, token_type_ids=None, answer_starts=None, answer_ends=None,
                answer_count=None, feature_index=None) -> QAOutput:
        """Start/end logits [batch, seq]; ``loss`` marginalizes over the window's gold spans."""
        types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        outputs = self.qa(input_ids=input_ids, attention_mask=attention_mask, **types)
        start_logits = _mask_padding(outputs.start_logits, attention_mask)
        end_logits = _mask_padding(outputs.end_logits, attention_mask)
        loss = None
        if answer_starts is not None and answer_ends is not None:
            loss = span_loss(start_logits, end_logits, answer_starts, answer_ends, reduction="marginal")
        return QAOutput(loss=loss, start_logits=start_logits, end_logits=end_logits)

