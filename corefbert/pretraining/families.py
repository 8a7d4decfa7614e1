"""CorefBERT pretraining on every encoder family with a masked-LM head in transformers, the Auto registration, and
the one loader of a pretraining checkpoint.

Each family's class is its own ``<Family>ForMaskedLM`` (body, MLM head, weight names and tying, all
transformers') plus the copy head ``mrp`` and the forward of
:class:`~corefbert.pretraining.modeling.CorefPreTrainingMixin`, so a checkpoint keeps its family's
``model_type`` and loads into every stock ``AutoModel*`` of that family. BERT and RoBERTa keep their own
classes (the converter's layout, with BERT's pooler). Any other family with an ``AutoModelForMaskedLM`` class
gets one made the same way (:func:`pretraining_class`), its MLM logits from the stock forward, every position.

What differs by family:

- ``token_type_ids``: DistilBERT and ModernBERT have none; given to a body that takes none, they are refused
  in one line rather than dropped.
- The MLM head on hidden states (:data:`MLM_HEADS`): ``masked_logits_only`` runs it on the masked rows only.
- Per-document attention (``--attention_within_documents``): BERT, RoBERTa, ELECTRA and DistilBERT take the
  ``[batch, 1, seq, seq]`` mask as it is, DeBERTa-v2/v3's encoder layers too. ModernBERT alternates global and
  local (sliding-window) layers, and one 4-D mask would drop the window, so it gets transformers' own two
  masks, each with the document rule added. Under a flash-attention kernel transformers builds no mask from a
  mask function: refused.
"""


from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os

import torch
from torch import nn
from transformers import (
    AutoConfig,
    DebertaV2ForMaskedLM,
    DistilBertForMaskedLM,
    ElectraForMaskedLM,
    ModernBertForMaskedLM,
)
from transformers.masking_utils import create_bidirectional_mask, create_bidirectional_sliding_window_mask
from transformers.utils import logging as hf_logging

from corefbert.errors import CorefBertError
from corefbert.pretraining.modeling import (
    CorefBertForPreTraining,
    CorefPreTrainingMixin,
    CorefRobertaForPreTraining,
    MentionReferenceHead,
    document_attention_mask,
    ensure_mrp_config,
)
from corefbert.training.model_folders import (
    check_model_folder,
    check_sizes_against_weights,
    safetensors_files,
)

logger = logging.getLogger(__name__)


#: Each family's MLM head on final hidden states ``[..., hidden]`` -> logits ``[..., vocab]``, as its
#: ``<Family>ForMaskedLM.forward`` applies it (tests/pretraining/test_families.py checks they agree).
MLM_HEADS = {
    "modernbert": lambda model, hidden: model.decoder(model.head(hidden)),
    "deberta-v2": lambda model, hidden: (
        model.cls(hidden) if model.legacy else model.lm_predictions(hidden, model.deberta.embeddings.word_embeddings)),
    "electra": lambda model, hidden: model.generator_lm_head(model.generator_predictions(hidden)),
    "distilbert": lambda model, hidden: model.vocab_projector(
        model.vocab_layer_norm(model.activation(model.vocab_transform(hidden)))),
}


class FamilyPreTrainingMixin(CorefPreTrainingMixin):
    """A family's stock masked LM with the copy head: put it before ``<Family>ForMaskedLM`` in the bases."""

    def __init__(self, config):
        ensure_mrp_config(config)
        super().__init__(config)  # the stock masked LM: body, MLM head, tying; its post_init adds the copy head

    def post_init(self):
        """The stock ``post_init``, with the copy head added first so that it is initialized and tracked too."""
        if "mrp" not in self._modules:
            self.mrp = MentionReferenceHead(self.config.hidden_size)
        super().post_init()

    @property
    def mlm_head(self):
        """The family's MLM head as a function of final hidden states (:data:`MLM_HEADS`)."""
        return functools.partial(MLM_HEADS[self.config.model_type], self)

    def encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs):
        """The body's output; ``token_type_ids`` only to a body that takes them."""
        inputs = dict(attention_mask=attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds, **kwargs)
        if token_type_ids is not None:
            if "token_type_ids" not in inspect.signature(self.base_model.forward).parameters:
                raise ValueError(f"{self.config.model_type} takes no token_type_ids; leave them out of the batch")
            inputs["token_type_ids"] = token_type_ids
        return self.base_model(input_ids, return_dict=True, **inputs)


class CorefModernBertForPreTraining(FamilyPreTrainingMixin, ModernBertForMaskedLM):
    """ModernBERT (``ModernBertForMaskedLM``: ``model``, ``head``, ``decoder`` tied to the token embeddings) with
    the copy head ``mrp``. Its local layers keep their window under per-document attention."""

    def within_documents_mask(self, attention_mask: torch.Tensor, document_ids: torch.Tensor) -> dict:
        """transformers' masks of ModernBERT's two layer kinds, each also confined to the documents of the row
        (:func:`document_attention_mask`'s rule): ``{"full_attention": ..., "sliding_attention": ...}`` in the
        form the attention implementation takes (bool for sdpa, additive for eager: both tested to agree)."""
        if "flash" in str(self.config._attn_implementation):
            raise CorefBertError("attention_within_documents needs attn_implementation sdpa, eager or flex_attention: "
                                 "flash attention builds no per-document mask")
        allowed = document_attention_mask(attention_mask, document_ids)[:, 0]  # [batch, seq (query), seq (key)]

        def same_document(batch_idx, head_idx, q_idx, kv_idx):
            return allowed[batch_idx, q_idx, kv_idx]

        shape_of = torch.empty(*attention_mask.shape, 1, dtype=self.dtype, device=attention_mask.device)
        kwargs = dict(config=self.config, inputs_embeds=shape_of, attention_mask=attention_mask.bool(),
                      and_mask_function=same_document)
        return {"full_attention": create_bidirectional_mask(**kwargs),
                "sliding_attention": create_bidirectional_sliding_window_mask(**kwargs)}


class CorefDebertaV2ForPreTraining(FamilyPreTrainingMixin, DebertaV2ForMaskedLM):
    """DeBERTa-v2/v3 (``DebertaV2ForMaskedLM``: ``deberta`` and ``cls``, or ``lm_predictions`` for a non-legacy
    config) with the copy head ``mrp``."""

    def encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs):
        """The body's output. A per-document mask ``[batch, 1, seq, seq]`` goes to the encoder's layers alone, as
        ``[batch, query, key]`` (what ``DebertaV2Encoder`` reads as a pairwise mask, its convolution's token mask
        included); the embeddings, which only zero padding and take a ``[batch, seq]`` mask, get the real tokens."""
        if attention_mask is None or attention_mask.dim() != 4:
            return super().encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        pairwise = attention_mask[:, 0]  # [batch, query, key]
        real = pairwise.any(dim=1)  # [batch, seq]: a key someone attends is a real token (specials: everyone)

        def pairwise_to_encoder(module, args):  # DebertaV2Model calls encoder(embeddings, attention_mask, ...)
            return (args[0], pairwise, *args[2:])

        hook = self.deberta.encoder.register_forward_pre_hook(pairwise_to_encoder)
        try:
            return super().encode(input_ids, real.long(), token_type_ids, position_ids, inputs_embeds, **kwargs)
        finally:
            hook.remove()


class CorefElectraForPreTraining(FamilyPreTrainingMixin, ElectraForMaskedLM):
    """ELECTRA (``ElectraForMaskedLM``: a generator or a discriminator body ``electra`` with the generator's MLM head)
    with the copy head ``mrp``."""


class CorefDistilBertForPreTraining(FamilyPreTrainingMixin, DistilBertForMaskedLM):
    """DistilBERT (``DistilBertForMaskedLM``: ``distilbert``, ``vocab_transform``, ``vocab_layer_norm``,
    ``vocab_projector`` tied) with the copy head ``mrp``."""


#: The pretraining class of each family by ``model_type``; :func:`pretraining_class` adds any other masked LM.
PRETRAINING_CLASSES = {
    "bert": CorefBertForPreTraining,
    "roberta": CorefRobertaForPreTraining,
    "modernbert": CorefModernBertForPreTraining,
    "deberta-v2": CorefDebertaV2ForPreTraining,
    "electra": CorefElectraForPreTraining,
    "distilbert": CorefDistilBertForPreTraining,
}


class _StockHeadMixin(FamilyPreTrainingMixin):
    """For a family without an entry in :data:`MLM_HEADS`: the logits are the stock forward's own (on every
    position), with the final hidden states caught on their way out of the body."""

    def encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs):
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      inputs_embeds=inputs_embeds, **kwargs)
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        caught = {}

        def catch(module, args, output):  # returns None: the stock forward goes on with the output unchanged
            caught["out"] = output

        hook = self.base_model.register_forward_hook(catch)
        try:
            stock = super(CorefPreTrainingMixin, self).forward(**inputs)  # the MaskedLM class's own forward
        finally:
            hook.remove()
        # Held until mlm_logits of this same forward takes it: the head already ran inside the stock forward.
        self._stock_logits = stock.logits  # [batch, seq, vocab]
        return caught["out"]

    def mlm_logits(self, hidden_states: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
        logits = self.__dict__.pop("_stock_logits")
        return logits if targets is None else logits[targets]


def pretraining_class(config, path: str | None = None) -> type:
    """The CorefBERT pretraining class for ``config``'s family: one of :data:`PRETRAINING_CLASSES`, or one made from
    the family's ``AutoModelForMaskedLM`` class. Raises :class:`CorefBertError` (naming ``path``) for a family
    without one."""
    model_type = getattr(config, "model_type", None)
    if model_type in PRETRAINING_CLASSES:
        return PRETRAINING_CLASSES[model_type]
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING

    try:
        if getattr(config, "is_encoder_decoder", False):  # BART's masked LM is a decoder's: no encoder states to copy
            raise KeyError(model_type)
        stock = MODEL_FOR_MASKED_LM_MAPPING[type(config)]
    except KeyError:
        raise CorefBertError(
            f"model_type {model_type!r} is not supported: it has no masked-LM head in transformers, and CorefBERT "
            f"pretrains an encoder with one ({', '.join(sorted(PRETRAINING_CLASSES))} or another "
            "AutoModelForMaskedLM family)", path=path) from None
    stock = stock[0] if isinstance(stock, tuple) else stock
    name = "Coref" + stock.__name__.replace("ForMaskedLM", "ForPreTraining")
    made = type(name, (_StockHeadMixin, stock), {"__module__": __name__, "__doc__": f"{stock.__name__} + ``mrp``."})
    globals()[name] = made  # found by name where a class is looked up by its module (pickle)
    PRETRAINING_CLASSES[model_type] = made
    register_auto_classes()
    return made


def register_auto_classes() -> None:
    """Make ``AutoModelForPreTraining`` give the CorefBERT class for a CorefBERT checkpoint of every family here.

    A checkpoint keeps its family's ``model_type``, which transformers maps to its stock class (for BERT
    ``BertForPreTraining``), without the copy head. Registering a pair (the stock default and ours) lets
    transformers choose by the ``architectures`` that ``save_pretrained`` writes, so ordinary checkpoints
    still get the stock class. No remote code is involved.
    """
    from transformers import AutoModelForPreTraining
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING as MASKED_LM
    from transformers.models.auto.modeling_auto import MODEL_FOR_PRETRAINING_MAPPING as PRETRAINING

    for coref_class in PRETRAINING_CLASSES.values():
        config_class = coref_class.config_class
        # The stock default: the family's pretraining class, else (ModernBERT has none) its masked LM.
        stock = (PRETRAINING if config_class in PRETRAINING else MASKED_LM)[config_class]
        stock = stock[0] if isinstance(stock, tuple) else stock  # already registered: keep the stock default
        AutoModelForPreTraining.register(config_class, (stock, coref_class), exist_ok=True)


register_auto_classes()


@functools.cache
def head_prefixes(coref_class: type) -> tuple[str, ...]:
    """The top-level modules of ``coref_class`` outside its body and copy head, i.e. its MLM head (``("cls.",)``,
    ``("decoder.", "head.")``, ...), read from the class built on the meta device, so no list is kept by hand."""
    with torch.device("meta"):
        model = coref_class(coref_class.config_class())
    body = model.base_model_prefix
    return tuple(sorted(f"{name}." for name, child in model.named_children()
                        if name not in (body, "mrp") and any(True for _ in child.parameters())))


def checkpoint_extras() -> tuple[str, ...]:
    """Weights of a CorefBERT checkpoint that a load of the encoder (or of the masked LM) leaves out on purpose: the
    copy vector, every family's MLM head and the pooler (prefixes after any body prefix)."""
    heads = {prefix for coref_class in PRETRAINING_CLASSES.values() for prefix in head_prefixes(coref_class)}
    return ("mrp.", "pooler.", *sorted(heads))


@contextlib.contextmanager
def _without_load_report():
    """transformers' multi-line loading report silenced: the callers say what matters in one line."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


def load_quietly(auto_class, path: str, unused=None, fresh_ok=(), **kwargs):
    """``auto_class.from_pretrained(path, **kwargs)`` without transformers' multi-line load report.

    For the toolkit's own loads of a checkpoint whose other parts it reads itself (the copy vector, the
    pooler), which the report would call UNEXPECTED. Unexpected weights outside ``unused`` (prefixes after any
    model prefix; None: :func:`checkpoint_extras`) and missing ones outside ``fresh_ok`` get one warning line
    each. Returns ``(model, loading info)``.
    """
    unused = checkpoint_extras() if unused is None else unused
    with _without_load_report():
        model, info = auto_class.from_pretrained(path, output_loading_info=True, **kwargs)

    def bare(key: str) -> str:  # "bert.pooler.dense.weight" -> "pooler.dense.weight"
        prefix = f"{model.base_model_prefix}."
        return key[len(prefix):] if key.startswith(prefix) else key

    surprising = sorted(k for k in info["unexpected_keys"] if not bare(k).startswith(tuple(unused)))
    fresh = sorted(k for k in info["missing_keys"] if not bare(k).startswith(tuple(fresh_ok)))
    if surprising:
        logger.warning("%s: %d weight(s) of the checkpoint are not used by %s (first: %s)", path, len(surprising),
                       type(model).__name__, surprising[0])
    if fresh:
        logger.warning("%s: %d weight(s) of %s are not in the checkpoint and start at random (first: %s)", path,
                       len(fresh), type(model).__name__, fresh[0])
    return model, info


def _read_config(path: str):
    looks_local = os.path.isabs(path) or path.startswith(".") or path.count("/") > 1
    if looks_local and not os.path.isdir(path):
        raise CorefBertError("no such checkpoint directory; check --model_name_or_path", path=path)
    check_model_folder(path)  # safetensors only: unpickling a weights file can run code
    try:
        return AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as err:
        reason = " ".join(str(err).split())[:200]
        raise CorefBertError(f"cannot read a model config ({reason}); give a local checkpoint directory with "
                             "config.json", path=path) from None


def load_pretraining_model(model_name_or_path: str | os.PathLike, report_fresh_heads: bool = True,
                           **config_overrides) -> nn.Module:
    """Load a checkpoint of any family with a masked-LM head (:func:`pretraining_class`) as a CorefBERT
    pretraining model, ``config_overrides`` (e.g. ``mrp_loss_weight=0.0``) set on its config.

    A backbone without an MLM head (a bare ``BertModel``) gets a fresh one, said once in the log (unless
    ``report_fresh_heads`` is off: a resume restores it); one without the MRP head gets ``V`` at its start.
    Raises :class:`CorefBertError` for an unreadable checkpoint, a family without a masked-LM head, or a
    checkpoint that lacks encoder weights.
    """
    path = str(model_name_or_path)
    config = _read_config(path)
    model_class = pretraining_class(config, path)
    for key, value in config_overrides.items():
        setattr(config, key, value)
    ensure_mrp_config(config)

    # Sizes the config gives that the stored tensors do not have: one line naming the first, before allocating.
    if os.path.isdir(path):
        check_sizes_against_weights(lambda: model_class(config), safetensors_files(path), "config.json", path)
    try:
        with _without_load_report():
            model, info = model_class.from_pretrained(path, config=config, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as err:
        reason = " ".join(str(err).split())[:200]
        raise CorefBertError(f"cannot load the weights ({reason}); check the checkpoint", path=path) from None

    missing = set(info["missing_keys"])
    prefix = model.base_model_prefix
    encoder_missing = sorted(k for k in missing if k.startswith(f"{prefix}.") and ".pooler." not in k)
    if encoder_missing:
        raise CorefBertError(f"the checkpoint lacks {len(encoder_missing)} encoder weight(s) (first: "
                             f"{encoder_missing[0]}); it is not a complete {config.model_type} checkpoint",
                             path=path)
    fresh = []
    if any(k.startswith(head_prefixes(model_class)) for k in missing):
        fresh.append("MLM head")
    if any(k.startswith(f"{prefix}.pooler.") for k in missing):
        fresh.append("pooler")
    if fresh and report_fresh_heads:
        logger.warning("%s has no %s: initialized a new one", path, " and no ".join(fresh))
    return model
