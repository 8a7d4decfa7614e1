"""The whole end-to-end coreference model (word encoder + :class:`SpanRanker`), and its folder on disk.

A folder holds ``coref_e2e_head.json`` (what rebuilds the model: encoder kind, sizes, genres) and:

- recurrent encoders: ``model.safetensors`` (every weight) and ``coref_e2e_vocab.json`` (words, characters),
  saved and loaded as every model trained from scratch is (:data:`RECURRENT_FOLDER`,
  :mod:`corefbert.tasks.scratch`);
- ``bert``: the transformer as an ordinary Hugging Face checkpoint at the top level (``AutoModel`` loads it
  with no missing key) with its tokenizer, and the span ranker in ``coref_e2e_head.safetensors``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch
from torch import nn
from transformers import AutoConfig

from corefbert.errors import CorefBertError
from corefbert.tasks.coref_e2e.config import CorefE2EConfig
from corefbert.tasks.coref_e2e.documents import VOCAB_FILE
from corefbert.tasks.coref_e2e.encoders import WordRepresentation, sentence_encoder, window_word_states
from corefbert.tasks.coref_e2e.span_ranking import SpanRanker
from corefbert.tasks.heads import (
    head_config_file,
    head_weights_file,
    load_encoder,
    load_encoder_and_head,
    load_weights,
    read_head_config,
    save_encoder_and_head,
)
from corefbert.tasks.scratch import ScratchFolder
from corefbert.text.tokenizers import load_tokenizer
from corefbert.text.vocabulary import Vocabulary
from corefbert.training.model_folders import check_sizes_against_weights

TASK = "coref_e2e"


@dataclass
class CorefOutput:
    """What :class:`E2ECorefModel` returns for one document."""

    loss: torch.Tensor | None  # [] summed eq. 7, None without gold clusters
    top_starts: torch.Tensor  # [k]
    top_ends: torch.Tensor  # [k]
    antecedents: torch.Tensor  # [k, K]
    scores: torch.Tensor  # [k, K + 1]


class E2ECorefModel(nn.Module):
    """Word encoder (``words`` + ``encoder``; for ``bert`` the transformer alone) and span ranker."""

    def __init__(self, config: CorefE2EConfig, encoder: nn.Module, words: WordRepresentation | None = None):
        super().__init__()
        self.config, self.kind = config, config.encoder
        self.words, self.encoder = words, encoder
        self.dropout = nn.Dropout(config.lexical_dropout)
        self.ranker = SpanRanker(config.ranker)
        self.window_batch_size: int | None = None  # bert: windows per encoder call (None: the default; not saved)

    def word_vectors(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(x*_t [words, Dc], x_t [words, Dx]) of one document."""
        if self.config.reads_subwords:
            states = self.dropout(window_word_states(self.encoder, batch["input_ids"], batch["attention_mask"],
                                                     batch["word_positions"], self.window_batch_size))
            return states, states
        lengths = batch["sentence_lengths"]
        inputs = self.words(batch["word_ids"], batch["char_ids"])  # [sentences, len, Dx]
        context = self.encoder(inputs, lengths)  # [sentences, len, Dc]
        present = torch.arange(inputs.shape[1], device=lengths.device)[None, :] < lengths[:, None]
        return context[present], inputs[present]

    def forward(self, sentence_of_word, speaker_ids, genre, gold_starts=None, gold_ends=None,
                gold_cluster_ids=None, doc_index=None, **inputs) -> CorefOutput:
        context, head_inputs = self.word_vectors(inputs)
        out = self.ranker(context, head_inputs, sentence_of_word, speaker_ids, genre, gold_starts, gold_ends,
                          gold_cluster_ids)
        return CorefOutput(out.get("loss"), out["top_starts"], out["top_ends"], out["antecedents"], out["scores"])


def _with_ranker_inputs(config: CorefE2EConfig, context_dim: int, head_dim: int) -> CorefE2EConfig:
    """``config`` with the span ranker's input sizes (x*_t, x_t), which only the built encoder knows."""
    return replace(config, ranker=replace(config.ranker, context_dim=context_dim, head_dim=head_dim))


def build_model(config: CorefE2EConfig, vocab: Vocabulary | None = None, pretrained: torch.Tensor | None = None,
                encoder_path: str | None = None) -> E2ECorefModel:
    """A fresh model from ``config``; a transformer encoder loads ``encoder_path``'s weights."""
    if config.reads_subwords:
        encoder = load_encoder(encoder_path)
        hidden = encoder.config.hidden_size
        return E2ECorefModel(_with_ranker_inputs(config, hidden, hidden), encoder)
    words = WordRepresentation(len(vocab.words), config.embedding_dim, len(vocab.chars),
                               char_filters=config.char_filters, dropout=config.lexical_dropout,
                               pretrained=pretrained)
    if config.fixed_embeddings:  # the paper's GloVe vectors stay fixed, also in a saved model loaded again
        words.words.weight.requires_grad_(False)
    encoder = sentence_encoder(config.encoder, words.output_dim, config.lstm_size, config.attention_size,
                               config.ranker.dropout, config.asl_variant)
    return E2ECorefModel(_with_ranker_inputs(config, encoder.output_dim, words.output_dim), encoder, words)


#: A recurrent model's folder (:mod:`corefbert.tasks.scratch`), as the module docstring says.
RECURRENT_FOLDER = ScratchFolder(head_config_file(TASK), CorefE2EConfig, build_model,
                                 "finetune/run_coref_e2e.py --do_train", vocab_file=VOCAB_FILE)


def save_model(model: E2ECorefModel, output_dir: str, vocab: Vocabulary | None, tokenizer=None,
               state_dict: dict | None = None) -> None:
    """Write ``model`` (and its vocabulary or tokenizer) into ``output_dir`` as the module docstring says."""
    if model.config.reads_subwords:
        save_encoder_and_head(model, output_dir, TASK, model.config.to_dict(), state_dict=state_dict)
        tokenizer.save_pretrained(output_dir)
        return
    RECURRENT_FOLDER.save_pretrained(output_dir, model, vocab, state_dict)


def load_model(directory: str) -> tuple[E2ECorefModel, Vocabulary | None, object]:
    """``(model in eval mode, vocabulary or None, tokenizer or None)`` of a :func:`save_model` folder."""
    if not os.path.isdir(directory):
        raise CorefBertError("no such model folder (a relative path is read from the working directory); pass a "
                             "folder finetune/run_coref_e2e.py wrote", path=directory)
    values = read_head_config(directory, TASK)
    if values is None:
        raise CorefBertError(f"not a coreference model folder (no {TASK}_head.json); train one with "
                             "finetune/run_coref_e2e.py --do_train", path=directory)
    config = CorefE2EConfig.from_dict(values, os.path.join(directory, head_config_file(TASK)))
    if not config.reads_subwords:
        loaded = RECURRENT_FOLDER.from_pretrained(directory)
        return loaded.model, loaded.vocabulary, None
    # The ranker's sizes against its sidecar before anything is allocated (the encoder's are checked by
    # load_encoder): the encoder stands in as a module without weights.
    hidden = AutoConfig.from_pretrained(directory).hidden_size
    check_sizes_against_weights(lambda: E2ECorefModel(_with_ranker_inputs(config, hidden, hidden), nn.Module()),
                                [os.path.join(directory, head_weights_file(TASK))], head_config_file(TASK), directory)
    model = build_model(config, encoder_path=directory)
    load_encoder_and_head(model, directory, TASK, with_encoder=False)
    return model.eval(), None, load_tokenizer(directory)


def load_weights_into(model: E2ECorefModel, directory: str) -> None:
    """Load the weights of a folder :func:`save_model` wrote into ``model`` of the same config, in place."""
    if model.config.reads_subwords:
        load_encoder_and_head(model, directory, TASK)
    else:
        load_weights(model, directory)
