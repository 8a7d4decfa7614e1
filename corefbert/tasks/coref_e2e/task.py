"""End-to-end coreference (Lee et al. 2017) on CoNLL-2012 files, on the shared loop (``finetune/run_coref_e2e.py``).

``--encoder bilstm|lsl|asl`` trains from scratch (Luo & Glass 2018's baseline, LSL, ASL) over a vocabulary of
the training files; ``--encoder bert`` fine-tunes any encoder checkpoint (CorefBERT included) over overlapping
windows. One document is one batch; training documents are cut at random offsets (drawn from the torch RNG,
which checkpoints carry: a resumed run draws the same offsets), and memory is bounded by the flags, not by the
longest document (:mod:`corefbert.tasks.coref_e2e.documents`). Metrics: MUC, B³, CEAF-φ4 and their average
(``avg_f1``, the CoNLL F1), in percent; predictions are CoNLL files.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields
from itertools import accumulate

import torch
from accelerate.utils import gather_object

from corefbert.argparser import peek_argument
from corefbert.errors import CorefBertError
from corefbert.metrics.coref_metrics import coref_scores
from corefbert.tasks.base import (
    FinetuningArguments,
    FinetuningTask,
    HeldOutArguments,
    check_data_flags,
    held_out_split,
)
from corefbert.tasks.coref_e2e.config import (
    MODEL_FLAG_DEFAULTS,
    CorefE2EConfig,
    apply_model_settings,
    model_flag,
)
from corefbert.tasks.coref_e2e.documents import (
    build_vocabulary,
    crop_document,
    crop_words,
    embedding_matrix,
    featurize,
    segment_sentences,
    split_long_sentences,
)
from corefbert.tasks.coref_e2e.encoders import (
    ASL_VARIANTS,
    ENCODERS,
    RECURRENT_ENCODERS,
    TRANSFORMER_ENCODERS,
    WINDOW_BATCH_SIZE,
)
from corefbert.tasks.coref_e2e.model import TASK, build_model, load_model, load_weights_into, save_model
from corefbert.tasks.coref_e2e.span_ranking import SpanRankingConfig, predict_clusters
from corefbert.tasks.heads import read_head_config
from corefbert.text.conll import ConllDocument, read_conll, write_conll
from corefbert.text.tokenizers import load_tokenizer
from corefbert.text.word_vocab import read_word_vectors

logger = logging.getLogger(__name__)


@dataclass
class CorefE2EArguments(HeldOutArguments):
    """Data and model options of ``finetune/run_coref_e2e.py`` (Lee et al. 2017 / Luo & Glass 2018 sizes)."""

    encoder: str = field(default="bilstm", metadata={
        "help": "bilstm (per-sentence BiLSTM, the baseline), lsl (linear sentence linking), asl (attentional "
                "sentence linking), or bert (the transformer at --model_name_or_path, CorefBERT included)."})
    train_file: list[str] | None = field(default=None, metadata={"help": "CoNLL-2012 files or globs to train on."})
    validation_file: list[str] | None = field(default=None, metadata={"help": "CoNLL-2012 files or globs to evaluate."})
    test_file: list[str] | None = field(default=None, metadata={"help": "CoNLL-2012 files or globs to predict."})
    embeddings_file: str | None = field(default=None, metadata={
        "help": "GloVe-format text file of word vectors (kept fixed, as in the paper); default: learned embeddings."})
    embedding_dim: int | None = model_flag("embedding_dim", "Size of learned word embeddings.")
    char_filters: int | None = model_flag("char_filters", "Character CNN filters per window (3, 4, 5); 0: none.")
    lstm_size: int | None = model_flag("lstm_size", "LSTM units per direction.")
    attention_size: int | None = model_flag("attention_size", "ASL: hidden units of the attention MLP f_c.")
    asl_variant: str | None = model_flag(
        "asl_variant", "ASL: recurrent (the paper's eqs. 1-6: attention and gate read the LSTM's previous state) or "
                       "static (the earlier reconstruction: attention and gate on the word alone, computed before the "
                       "LSTM).")
    max_span_width: int | None = model_flag("max_span_width", "Longest span considered, in words (L).")
    top_span_ratio: float | None = model_flag(
        "top_span_ratio", "Spans kept per word after pruning (λ; a value of --max_span_width or more keeps every span).")
    max_antecedents: int | None = model_flag("max_antecedents", "Antecedents considered per span (K).")
    ffnn_size: int | None = model_flag("ffnn_size", "Hidden units of the scoring FFNNs.")
    ffnn_depth: int | None = model_flag("ffnn_depth", "Hidden layers of the scoring FFNNs.")
    head_ffnn_depth: int | None = model_flag(
        "head_ffnn_depth", "Hidden layers of the head-attention FFNN_α (paper: an FFNN like the others; authors' "
                           "code: 0).")
    allow_crossing_spans: bool = field(default=False, metadata={
        "help": "Prune to the top spans without suppressing spans that cross a kept one (the paper suppresses). A "
                "saved model keeps its own."})
    feature_size: int | None = model_flag("feature_size", "Width, distance, speaker and genre embedding size.")
    dropout: float | None = model_flag("dropout", "Dropout of hidden layers and features.")
    lexical_dropout: float | None = model_flag("lexical_dropout", "Dropout of the word representations.")
    drop_singletons: bool = field(default=False, metadata={
        "help": "Remove one-mention gold clusters from every file (OntoNotes annotates none; LitBank does, and "
                "the model never predicts one, so they only lower B3 and CEAF recall)."})
    max_training_sentences: int = field(default=40, metadata={
        "help": "Training documents are cut to this many consecutive sentences at a random offset."})
    max_training_words: int = field(default=3000, metadata={
        "help": "Training crops holding more words than this (after --max_training_sentences) are cut to this many "
                "consecutive words at a random offset: one step's memory grows with its words."})
    max_sentence_words: int = field(default=250, metadata={
        "help": "Sentences longer than this are read as pieces of at most this many words (training, evaluation, "
                "prediction, resolve): a text without sentence breaks stays bounded (ASL's attention grows with "
                "the square of a sentence's length). Saved with the model."})
    max_segment_words: int = field(default=5000, metadata={
        "help": "Evaluation and prediction run a longer document as consecutive segments of whole sentences of at "
                "most this many words; mentions are linked within a segment only. Saved with the model (resolve's "
                "default)."})
    max_seq_length: int | None = model_flag("max_seq_length", "bert: tokens per window, special tokens included.")
    task_learning_rate: float = field(default=2e-4, metadata={
        "help": "bert: learning rate of everything but the encoder (span, mention and antecedent scorers), which "
                "trains at --learning_rate (Joshi et al. 2019: 1e-5 / 2e-4)."})
    window_batch_size: int = field(default=WINDOW_BATCH_SIZE, metadata={
        "help": "bert: windows per encoder call; in training each group is recomputed in the backward pass, so a "
                "long crop holds one group's activations (about 1 GB a window for BERT-base in fp32). Memory only: "
                "not saved with the model."})
    window_stride: int | None = field(default=None, metadata={
        "help": "bert: content tokens between window starts; default: half a window's content. A saved model keeps "
                "its own."})

    def __post_init__(self):
        super().__post_init__()
        if self.encoder not in ENCODERS:
            raise CorefBertError(f"--encoder {self.encoder!r} is not one of {', '.join(ENCODERS)}")
        for name in ("max_span_width", "max_antecedents", "max_training_sentences", "max_training_words",
                     "max_sentence_words", "max_segment_words", "lstm_size", "ffnn_size", "window_batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:  # None: the default or the saved value
                raise CorefBertError(f"--{name} must be at least 1 (got {getattr(self, name)})")
        if self.asl_variant is not None and self.asl_variant not in ASL_VARIANTS:
            raise CorefBertError(f"--asl_variant {self.asl_variant!r} is not one of {', '.join(ASL_VARIANTS)}")
        if self.top_span_ratio is not None and self.top_span_ratio <= 0:
            raise CorefBertError(f"--top_span_ratio must be > 0 (got {self.top_span_ratio})")
        if self.max_seq_length is not None and self.max_seq_length < 8:
            raise CorefBertError(f"--max_seq_length must be at least 8 (got {self.max_seq_length})")
        stride, length = self.window_stride, self.max_seq_length or MODEL_FLAG_DEFAULTS["max_seq_length"]
        if stride is not None and not 1 <= stride <= length - 2:
            raise CorefBertError(f"--window_stride must be within [1, {length - 2}] (got {stride})")


class CroppedDocuments(torch.utils.data.Dataset):
    """Training documents (long sentences split), each cut to ``max_sentences`` consecutive sentences at a
    random offset per access, and then to ``max_words`` consecutive words where it holds more."""

    def __init__(self, documents: list[ConllDocument], max_sentences: int, max_words: int, featurize):
        self.documents, self.featurize = documents, featurize
        self.max_sentences, self.max_words = max_sentences, max_words

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, index: int) -> dict:
        document = self.documents[index]
        extra = len(document.sentences) - self.max_sentences
        if extra > 0:
            first = int(torch.randint(0, extra + 1, ()))
            document = crop_document(document, first, first + self.max_sentences)
        extra = sum(len(s) for s in document.sentences) - self.max_words
        if extra > 0:  # drawn only here, so a crop within the budget draws what it drew before this bound
            first = int(torch.randint(0, extra + 1, ()))
            document = crop_words(document, first, first + self.max_words)
        return {"doc_index": torch.tensor(index), **self.featurize(document)}


class DocumentSegments(torch.utils.data.Dataset):
    """Evaluation documents as segments of whole sentences of at most ``max_words`` words (one without words
    is left out), each with its ``doc_index``, ``segment_index`` and first word (``word_offset``)."""

    def __init__(self, documents: list[ConllDocument], max_words: int, featurize):
        self.documents, self.featurize = documents, featurize
        self.segments: list[tuple[int, int, int]] = []  # (document, first word, end word)
        for index, document in enumerate(documents):
            segments = segment_sentences(document.sentences, max_words)
            bounds = [0, *accumulate(sum(len(s) for s in segment) for segment in segments)]
            self.segments += [(index, first, end) for first, end in zip(bounds, bounds[1:])]

    def __len__(self) -> int:
        return len(self.segments)

    def __getitem__(self, position: int) -> dict:
        index, first, end = self.segments[position]
        document = self.documents[index]
        if first > 0 or end < sum(len(s) for s in document.sentences):
            document = crop_words(document, first, end)
        return {"doc_index": torch.tensor(index), "segment_index": torch.tensor(position),
                "word_offset": torch.tensor(first), **self.featurize(document)}


# Both recipes: one document is one batch (checked in CorefE2ETask.__init__), no weight decay, gradients clipped
# at 5 (Lee et al. 2017).
ONE_DOCUMENT_PER_STEP = {"per_device_train_batch_size": 1, "per_device_eval_batch_size": 1, "weight_decay": 0.0,
                         "max_grad_norm": 5.0}


class CorefE2ETask(FinetuningTask):
    """Lee et al. (2017) with the encoder ``--encoder``; ``avg_f1`` (the CoNLL F1) picks the best model. The family
    of two recipes, :class:`RecurrentCorefE2ETask` and :class:`TransformerCorefE2ETask` (each defines
    ``_check_model_path`` and ``_prepare_inputs``); :meth:`variant_for` picks one from ``--encoder``."""

    name = TASK
    main_metric = "avg_f1"
    args_class = CorefE2EArguments
    uses_model_folder = False
    #: The ``--encoder`` values this variant runs.
    encoders: tuple[str, ...] = ()

    @classmethod
    def variant_for(cls, argv: list[str]) -> type[CorefE2ETask]:
        encoder = peek_argument(argv, "encoder") or CorefE2EArguments.encoder  # an unknown one: __post_init__
        return TransformerCorefE2ETask if encoder in TRANSFORMER_ENCODERS else RecurrentCorefE2ETask

    def __init__(self, task_args: CorefE2EArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        a, path = task_args, training_args.model_name_or_path
        if a.encoder not in self.encoders:  # a variant built by hand with another variant's arguments
            raise CorefBertError(f"--encoder {a.encoder} is not run by {type(self).__name__} "
                                 f"({', '.join(self.encoders)}); build the task with CorefE2ETask.variant_for")
        check_data_flags(training_args, task_args, kind="CoNLL-2012 files")
        if training_args.per_device_train_batch_size != 1 or training_args.per_device_eval_batch_size != 1:
            raise CorefBertError("one document is one batch: --per_device_train_batch_size and "
                                 "--per_device_eval_batch_size must be 1 (use --gradient_accumulation_steps)")
        self.saved = read_head_config(path, TASK) if path and os.path.isdir(path) else None
        if self.saved is not None and self.saved["encoder"] != a.encoder:
            raise CorefBertError(f"this model was trained with --encoder {self.saved['encoder']}; pass that",
                                 path=path)
        # The model's own settings from here on: the defaults for a new model, a saved model's (a flag given
        # with another value is refused), so every message below names the value in use.
        apply_model_settings(a, CorefE2EConfig.from_dict(self.saved, os.path.join(path, f"{TASK}_head.json"))
                             if self.saved is not None else None, path)
        self._check_model_path(path)
        read = lambda files: read_conll(files) if files else None  # noqa: E731
        self.train_docs, self.eval_docs, self.test_docs = read(a.train_file), read(a.validation_file), read(a.test_file)
        if a.validation_split_percentage and self.train_docs and self.eval_docs is None:
            self.train_docs, self.eval_docs = held_out_split(self.train_docs, a.validation_split_percentage,
                                                             a.split_seed)
        if a.drop_singletons:
            for doc in (d for docs in (self.train_docs, self.eval_docs, self.test_docs) if docs for d in docs):
                doc.clusters = [cluster for cluster in doc.clusters if len(cluster) > 1]
        for docs, what in ((self.train_docs, "--train_file"), (self.eval_docs, "--validation_file"),
                           (self.test_docs, "--test_file")):
            if docs is not None:
                self._summarise(docs, what)
        self.vocab, self.pretrained, self.model = None, None, None
        if self.saved is not None:
            self.model, self.vocab, self.tokenizer = load_model(path)
        else:
            self._prepare_inputs(path)
        self.stride = a.window_stride or (a.max_seq_length - 2) // 2

    def _summarise(self, documents: list[ConllDocument], what: str) -> None:
        """Log what a split holds and what the model cannot reach; a split without words is an error."""
        mentions = [e - s + 1 for doc in documents for cluster in doc.clusters for s, e in cluster]
        empty = sum(not doc.sentences for doc in documents)
        if empty == len(documents):
            raise CorefBertError(f"{what} holds no document with words")
        width = self.task_args.max_span_width
        too_wide = sum(w > width for w in mentions)
        logger.info("%s: %d documents (%d without words, skipped), %d words, %d gold mentions, %d of them wider "
                    "than the model's max_span_width %d (%s; never predicted)", what, len(documents), empty,
                    sum(len(doc.words) for doc in documents), len(mentions), too_wide, width,
                    "saved with it" if self.saved is not None else "--max_span_width")

    def memory_advice(self, split: str) -> str:
        """A step's memory grows with the words of its training crop, an evaluation's with a segment's."""
        a = self.task_args
        if split == "train":
            windows = f" (or --window_batch_size, now {a.window_batch_size})" if a.encoder == "bert" else ""
            return (f"a training step reads a crop of up to --max_training_words {a.max_training_words} words: lower "
                    f"--max_training_words{windows}")
        return (f"{split} reads documents in segments of up to --max_segment_words {a.max_segment_words} words: "
                "lower --max_segment_words")

    def model_config(self) -> CorefE2EConfig:
        """A new model's config: a field that is also an argument takes its value, the rest come from the data."""
        a = self.task_args

        def from_args(cls, **values):
            given = {f.name: getattr(a, f.name) for f in fields(cls) if hasattr(a, f.name)}
            return cls(**{**given, **values})

        genres = sorted({d.genre for d in self.train_docs or []}) or [""]
        embedding_dim = self.pretrained.shape[1] if self.pretrained is not None else a.embedding_dim
        ranker = from_args(SpanRankingConfig, context_dim=0, head_dim=0, num_genres=len(genres))
        return from_args(CorefE2EConfig, ranker=ranker, genres=genres, embedding_dim=embedding_dim,
                         fixed_embeddings=self.pretrained is not None, window_stride=self.stride)

    def featurize(self, document: ConllDocument) -> dict[str, torch.Tensor]:
        config = self.model.config if self.model is not None else self.model_config()
        return featurize(document, config, self.vocab, self.tokenizer)

    def train_dataset(self):
        a = self.task_args
        docs = [split_long_sentences(d, a.max_sentence_words) for d in self.train_docs or [] if d.sentences]
        return CroppedDocuments(docs, a.max_training_sentences, a.max_training_words, self.featurize) if docs \
            else None

    def _segments(self, documents: list[ConllDocument] | None) -> DocumentSegments | None:
        """``documents`` as segments, sentences longer than ``--max_sentence_words`` or a segment split first
        (the flat word indices, which the clusters and the prediction files use, stay)."""
        if not documents:
            return None
        a = self.task_args
        limit = min(a.max_sentence_words, a.max_segment_words)
        return DocumentSegments([split_long_sentences(d, limit) for d in documents], a.max_segment_words,
                                self.featurize)

    def eval_dataset(self):
        return self._segments(self.eval_docs)

    def predict_dataset(self):
        return self._segments(self.test_docs)

    def collate(self, features: list) -> dict[str, torch.Tensor]:
        return features[0]  # one document per batch (checked in __init__)

    def build_model(self):
        if self.model is None:
            self.model = build_model(self.model_config(), self.vocab, self.pretrained, self.args.model_name_or_path)
        self.model.window_batch_size = self.task_args.window_batch_size
        return self.model

    def evaluate(self, model, dataloader, accelerator, split):
        documents = self.eval_docs if split == "eval" else self.test_docs
        by_segment: dict[int, tuple[int, list]] = {}  # segment -> (document, clusters in document word indices)
        for batch in dataloader:
            out = model(**batch)
            offset = int(batch["word_offset"])
            clusters = predict_clusters(out.top_starts, out.top_ends, out.antecedents, out.scores)
            by_segment[int(batch["segment_index"])] = (
                int(batch["doc_index"]), [[(s + offset, e + offset) for s, e in cluster] for cluster in clusters])
        if accelerator.num_processes > 1:  # each process saw a shard of the segments (a padded shard repeats one)
            by_segment = {i: c for part in gather_object([by_segment]) for i, c in part.items()}
        predicted: dict[int, list] = {}
        for segment in sorted(by_segment):  # a document's segments in order: clusters by first mention
            index, clusters = by_segment[segment]
            predicted.setdefault(index, []).extend(clusters)
        order = sorted(predicted)
        metrics = coref_scores([predicted[i] for i in order], [documents[i].clusters for i in order])
        return metrics, (documents, predicted)

    def write_predictions(self, predictions, output_dir: str, split: str) -> list[str]:
        documents, predicted = predictions
        path = os.path.join(output_dir, f"{split}_predictions.conll")
        write_conll(documents, path, [predicted.get(i, []) for i in range(len(documents))])
        return [path]

    def save_pretrained(self, model, output_dir: str, state_dict: dict | None = None) -> None:
        save_model(model, output_dir, self.vocab, self.tokenizer, state_dict)

    def load_weights(self, model, directory: str) -> None:
        load_weights_into(model, directory)


class RecurrentCorefE2ETask(CorefE2ETask):
    """``--encoder bilstm|lsl|asl``: trained from scratch over a vocabulary of the training files (Luo & Glass
    2018, section 4.1: Adam, LR 0.001 × 0.999 every 100 steps, the reading of its "decays 0.001%" that
    docs/guides/coref_e2e.md's paper ↔ code table gives; one document a step; Lee et al.'s clipping at 5)."""

    encoders = RECURRENT_ENCODERS
    training_defaults = {**ONE_DOCUMENT_PER_STEP, "learning_rate": 1e-3, "warmup_ratio": 0.0,
                         "lr_scheduler_type": "step", "lr_decay_steps": 100, "lr_decay_factor": 0.999,
                         "num_train_epochs": 150.0}

    def _check_model_path(self, path: str | None) -> None:
        if path and self.saved is None:
            raise CorefBertError(f"not a folder written by run_coref_e2e.py (no {TASK}_head.json)", path=path)

    def _prepare_inputs(self, path: str | None) -> None:
        """The vocabulary (and GloVe vectors) of a new model."""
        a = self.task_args
        if not self.train_docs:
            raise CorefBertError("a recurrent model is trained from scratch: pass --do_train with --train_file, "
                                 "or --model_name_or_path with a folder run_coref_e2e.py wrote")
        if a.embeddings_file is None:
            self.vocab = build_vocabulary(self.train_docs)
            return
        every = [d for docs in (self.train_docs, self.eval_docs, self.test_docs) if docs for d in docs]
        words = {w for doc in every for w in doc.words}
        vectors, dim = read_word_vectors(a.embeddings_file, words | {w.lower() for w in words}, lowercase=False)
        logger.info("%s: vectors for %d of the %d distinct words", a.embeddings_file, len(vectors), len(words))
        # Words of the evaluation files enter the vocabulary only with a GloVe vector (the paper's fixed GloVe).
        known = [w for w in words if w in vectors or w.lower() in vectors]
        self.vocab = build_vocabulary(self.train_docs, known)
        self.pretrained = embedding_matrix(self.vocab, vectors, dim)


class TransformerCorefE2ETask(CorefE2ETask):
    """``--encoder bert``: any encoder checkpoint (CorefBERT included) over overlapping windows, with BERT for
    coreference's recipe (Joshi et al. 2019): a small LR with warm-up and linear decay, 20 epochs."""

    encoders = TRANSFORMER_ENCODERS
    uses_model_folder = True
    training_defaults = {**ONE_DOCUMENT_PER_STEP, "learning_rate": 2e-5, "warmup_ratio": 0.1,
                         "lr_scheduler_type": "linear", "num_train_epochs": 20.0}

    def learning_rates(self, model) -> dict[str, float] | None:
        """The layers on top train at ``--task_learning_rate``: one small rate for both left the randomly
        initialised scorers untrained on LitBank while the encoder collapsed."""
        return {"": self.task_args.task_learning_rate, "encoder.": self.args.learning_rate}

    def _check_model_path(self, path: str | None) -> None:
        if not path:
            raise CorefBertError("--encoder bert starts from a checkpoint: pass --model_name_or_path (an encoder "
                                 "checkpoint folder: BERT, RoBERTa, ModernBERT, DeBERTa, ELECTRA, DistilBERT, CorefBERT)")

    def _prepare_inputs(self, path: str | None) -> None:
        self.tokenizer = load_tokenizer(path)
