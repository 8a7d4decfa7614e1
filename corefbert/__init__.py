"""corefbert: CorefBERT (Ye et al., EMNLP 2020) pretraining and fine-tuning on Hugging Face.

Public API (imported lazily, so ``import corefbert`` stays cheap):

    CorefBertError                              the one user-facing error type
    MentionExtractor, load_spacy_pipeline       spaCy noun mentions and groups        (corpus/mentions.py)
    PrepareArguments, prepare_corpus            raw text -> packed Arrow sequences    (corpus/prepare.py)
    DataCollatorForMentionReferencePrediction   dynamic MLM + MRP masking, WWM        (pretraining/collator.py)
    CorefBertForPreTraining,                    copy-based MRP head on BERT / RoBERTa (pretraining/modeling.py)
    CorefRobertaForPreTraining, mrp_loss,
    CorefModernBertForPreTraining, ...          the same on ModernBERT, DeBERTa-v2/v3, ELECTRA, DistilBERT (pretraining/families.py)
    load_pretraining_model                      picks the class from a checkpoint's model_type
    TrainingArguments, TrainingJob, train       the one training loop every CLI runs  (training/loop/core.py)
    FinetuningArguments, FinetuningTask,        the fine-tuning protocol on that loop (tasks/base.py)
    run_finetuning
    load_metric                                 offline `evaluate` modules (metrics/)
    CopyResolver                                zero-shot pronoun resolution with the copy head (tasks/coref/resolver.py)
"""

from __future__ import annotations

import importlib

from corefbert import known_warnings as _known_warnings
from corefbert.pretraining.auto_classes import install as _install_auto_classes

__version__ = "0.1.0"
_known_warnings.install()  # before any library below can print them
# ``import corefbert`` alone makes AutoModelForPreTraining give the CorefBERT class of a CorefBERT checkpoint,
# without importing torch or transformers here (the registration runs when transformers' Auto module loads).
_install_auto_classes()

_EXPORTS = {
    "CorefBertError": "corefbert.errors",
    "MentionExtractor": "corefbert.corpus.mentions",
    "load_spacy_pipeline": "corefbert.corpus.mentions",
    "PrepareArguments": "corefbert.corpus.prepare",
    "prepare_corpus": "corefbert.corpus.prepare",
    "DataCollatorForMentionReferencePrediction": "corefbert.pretraining.collator",
    "CorefBertForPreTraining": "corefbert.pretraining.modeling",
    "CorefRobertaForPreTraining": "corefbert.pretraining.modeling",
    "CorefBertPreTrainingOutput": "corefbert.pretraining.modeling",
    "mrp_loss": "corefbert.pretraining.modeling",
    "CorefModernBertForPreTraining": "corefbert.pretraining.families",
    "CorefDebertaV2ForPreTraining": "corefbert.pretraining.families",
    "CorefElectraForPreTraining": "corefbert.pretraining.families",
    "CorefDistilBertForPreTraining": "corefbert.pretraining.families",
    "load_pretraining_model": "corefbert.pretraining.families",
    "TrainingArguments": "corefbert.training.training_args",
    "TrainingJob": "corefbert.training.loop.core",
    "train": "corefbert.training.loop.core",
    "FinetuningArguments": "corefbert.tasks.base",
    "FinetuningTask": "corefbert.tasks.base",
    "run_finetuning": "corefbert.tasks.base",
    "load_metric": "corefbert.metrics",
    "CopyResolver": "corefbert.tasks.coref.resolver",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'corefbert' has no attribute {name!r}")
