"""Pronoun-replacement entailment: does a text with a pronoun (``source``) entail the same text with the
pronoun replaced by a noun phrase (``target``)? Label 1 ("correct": the antecedent), 0 (a wrong noun phrase
from the pronoun's scope, ``in_scope``, or from elsewhere in the document, ``out_of_scope``).

Reads the ``pairs.jsonl`` of :mod:`corefbert.tasks.pronoun_pairs.builder` (one JSON object per line with
``label`` 0|1, ``source``, ``target``, ``type``; other fields are ignored). ``--model`` picks the classifier:
``da``/``lstmn``/``bilstm`` (:mod:`corefbert.tasks.pronoun_pairs.models`, trained from scratch on
whitespace-split words) or ``bert``, a sequence-pair classifier from any encoder checkpoint (a CorefBERT one
included), saved as ``AutoModelForSequenceClassification``. Evaluation reports the metrics of
:mod:`corefbert.metrics.pair_metrics` overall and per pair type.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from functools import partialmethod

import torch

from corefbert.argparser import peek_argument
from corefbert.errors import CorefBertError
from corefbert.metrics.pair_metrics import pair_metrics_by_type
from corefbert.tasks.base import FinetuningArguments, FinetuningTask, check_data_flags
from corefbert.tasks.pronoun_pairs.models import (
    MODEL_TYPES,
    PAIR_FOLDER,
    PairModelConfig,
    build_pair_model,
)
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import read_jsonl
from corefbert.text.tokenizers import load_tokenizer
from corefbert.text.vocabulary import UNK, Vocabulary
from corefbert.text.word_vocab import vocabulary_with_vectors

logger = logging.getLogger(__name__)

PAIR_TYPES = ("correct", "in_scope", "out_of_scope")
LABEL_NAMES = ("not_entailed", "entailed")
# The paper's budget for every classifier trained from scratch (pronoun-entailment paper, table 2: 30 epochs,
# H = 450, 300-d word2vec inputs, best epoch kept by dev accuracy). It names no optimizer, learning rate, batch or
# schedule: those come from the papers whose models it ran (MODEL_DEFAULTS), with no decay or warm-up as there.
# Gradient clipping at 5 is ours (none of the three papers states a norm; it keeps the recurrent models finite).
SCRATCH_DEFAULTS = {"num_train_epochs": 30.0, "hidden_size": 450, "embedding_dim": 300, "weight_decay": 0.0,
                    "warmup_ratio": 0.0, "lr_scheduler_type": "constant", "max_grad_norm": 5.0}
# Per classifier: DA as the paper's section 3.1.3 writes it, with intra-attention (eqs. 17-18), trained as
# Parikh et al. (section 4: Adagrad at 0.05, batch 4) with the 20% dropout of table 2's DA row; the LSTMN and
# the BiLSTM with Adam at 1e-3 (Cheng et al.'s optimizer; no weight decay, so AdamW is Adam), batch 32 (ours:
# none is stated) and no dropout (table 3's rows have none; --dropout 0.2: table 2's "20% dropout" LSTMN row).
MODEL_DEFAULTS = {
    "da": {"optim": "adagrad", "learning_rate": 0.05, "per_device_train_batch_size": 4, "dropout": 0.2,
           "intra_attention": True},
    "lstmn": {"optim": "adamw_torch", "learning_rate": 1e-3, "per_device_train_batch_size": 32, "dropout": 0.0},
    "bilstm": {"optim": "adamw_torch", "learning_rate": 1e-3, "per_device_train_batch_size": 32, "dropout": 0.0},
}


@dataclass
class PronounPairsArguments:
    """The pair files, the classifier and its sizes."""

    model: str = field(default="da", metadata={"help": "da (Decomposable Attention), lstmn (Deep-Attention LSTMN "
                                                       "with deep fusion), bilstm (BiLSTM encoder-decoder) or bert "
                                                       "(sequence-pair classifier from --model_name_or_path)."})
    train_file: str | None = field(default=None, metadata={"help": "Training pairs.jsonl."})
    validation_file: str | None = field(default=None, metadata={"help": "Dev pairs.jsonl."})
    test_file: str | None = field(default=None, metadata={"help": "Test pairs.jsonl (--do_predict)."})
    train_types: str = field(default="correct,in_scope,out_of_scope", metadata={
        "help": "Pair types kept for training, comma-separated (correct,out_of_scope: the ablation the paper "
                "warns about)."})
    eval_types: str = field(default="correct,in_scope,out_of_scope", metadata={
        "help": "Pair types kept for evaluation and prediction (correct,in_scope tests the ablation)."})
    embeddings_file: str | None = field(default=None, metadata={
        "help": "GloVe-format word vectors (da/lstmn/bilstm); unknown words hash to 100 random vectors. "
                "Default: embeddings learned from scratch."})
    freeze_embeddings: bool | None = field(default=None, metadata={
        "help": "Keep the word vectors fixed (default: fixed with --embeddings_file, as Parikh et al.; "
                "learned otherwise)."})
    embedding_dim: int = field(default=300, metadata={"help": "Word vector size without --embeddings_file."})
    hidden_size: int = field(default=450, metadata={"help": "Hidden size of da/lstmn/bilstm (the paper's H, 450)."})
    dropout: float = field(default=0.2, metadata={"help": "Dropout of da/lstmn/bilstm (default per model: da 0.2, "
                                                          "lstmn and bilstm 0, as the paper's tables 2-3)."})
    intra_attention: bool = field(default=False, metadata={
        "help": "da: intra-sentence attention (the paper's eqs. 17-18, Parikh et al.'s section 3.4); on by default "
                "for --model da, --intra_attention false turns it off."})
    da_init_std: float = field(default=0.01, metadata={
        "help": "da: weights drawn from N(0, this), as Parikh et al. (section 4); 0: PyTorch's default init."})
    min_count: int = field(default=1, metadata={"help": "Learned embeddings: rarer training words become <unk>."})
    lowercase: bool = field(default=True, metadata={"help": "Lowercase words (da/lstmn/bilstm)."})
    max_words: int = field(default=150, metadata={
        "help": "Words kept per text, a window around the replaced pronoun (counted when cut; bert too)."})
    max_seq_length: int = field(default=256, metadata={"help": "bert: tokens per pair (longest text cut first)."})
    selection_metric: str = field(default="accuracy", metadata={
        "help": "Dev metric that picks best/: accuracy (the paper's table 2), f1 or kappa (table 3; with a "
                "2:1 majority of wrong replacements, accuracy prefers a model that never says 'correct')."})

    def __post_init__(self):
        if self.model not in (*MODEL_TYPES, "bert"):
            raise CorefBertError(f"--model {self.model!r} is not one of {', '.join((*MODEL_TYPES, 'bert'))}")
        for name in ("train_types", "eval_types"):
            value = getattr(self, name)
            kinds = [k.strip() for k in value.split(",") if k.strip()]
            if not kinds or any(k not in PAIR_TYPES for k in kinds):
                raise CorefBertError(f"--{name} {value!r}: pair types are {', '.join(PAIR_TYPES)} "
                                     "(comma-separated)")
            setattr(self, name, ",".join(kinds))
        if self.intra_attention and self.model != "da":
            raise CorefBertError(f"--intra_attention is an option of --model da, not {self.model}")
        for name in ("embedding_dim", "hidden_size", "max_words", "max_seq_length", "min_count"):
            if getattr(self, name) < 1:
                raise CorefBertError(f"--{name} must be >= 1")
        if self.selection_metric not in ("accuracy", "f1", "kappa"):
            raise CorefBertError(f"--selection_metric {self.selection_metric!r} is not accuracy, f1 or kappa")
        if not 0.0 <= self.dropout < 1.0:
            raise CorefBertError(f"--dropout must be within [0, 1), not {self.dropout}")


@dataclass
class PairExample:
    source: str
    target: str
    label: int
    type: str
    line: int


def read_pairs(path: str, types: list[str] | None = None) -> list[PairExample]:
    """The pairs of ``pairs.jsonl`` whose type is in ``types`` (all when None). Every line is checked; a bad one
    is one :class:`CorefBertError` naming the file and line. No pair of the wanted types is an error too."""
    pairs, skipped = [], Counter()
    expected = "expected pairs.jsonl of python -m corefbert.tasks.pronoun_pairs.builder"
    for number, row in read_jsonl(path, expected):
        if not isinstance(row, dict):
            raise CorefBertError(f"a pair is a JSON object, not {type(row).__name__}; {expected}", path=path,
                                 position=number)
        if missing := [k for k in ("label", "source", "target", "type") if k not in row]:
            raise CorefBertError(f"pair without {', '.join(missing)}; {expected}", path=path, position=number)
        # The integers 0 and 1 only, as pronoun_pairs writes them: 1.0 == 1 in Python, but a float label makes
        # a float target tensor and cross-entropy fails deep in torch; True is 1 too.
        if type(row["label"]) is not int or row["label"] not in (0, 1):
            hint = " (the integer, as pronoun_pairs writes it)" if isinstance(row["label"], float) else ""
            raise CorefBertError(f"label {row['label']!r} is not 0 or 1{hint}", path=path, position=number)
        if row["type"] not in PAIR_TYPES:
            raise CorefBertError(f"type {row['type']!r} is not one of {', '.join(PAIR_TYPES)}", path=path,
                                 position=number)
        if (row["type"] == "correct") != (row["label"] == 1):
            raise CorefBertError(f"a {row['type']} pair with label {row['label']}: only correct pairs are "
                                 "labelled 1", path=path, position=number)
        if not all(isinstance(row[k], str) and row[k].strip() for k in ("source", "target")):
            raise CorefBertError("source and target must be non-empty strings", path=path, position=number)
        if types is not None and row["type"] not in types:
            skipped[row["type"]] += 1
            continue
        pairs.append(PairExample(row["source"], row["target"], row["label"], row["type"], number))
    if not pairs and not skipped:
        raise CorefBertError(f"empty file: no pairs; {expected}", path=path)
    if not pairs:
        raise CorefBertError(f"no pairs of types {','.join(types)} in the file (it has "
                             f"{', '.join(sorted(skipped))}); check --train_types / --eval_types", path=path)
    if skipped:
        logger.info("%s: %d pairs, %d skipped by type (%s)", path, len(pairs), sum(skipped.values()),
                    ", ".join(f"{k} {n}" for k, n in sorted(skipped.items())))
    return pairs


class PronounPairsTask(FinetuningTask):
    """Pronoun-pair entailment. The family: pairs, windows, evaluation and predictions; each ``--model`` is a
    variant with its own recipe: :class:`ScratchPairsTask` (``da|lstmn|bilstm``; ``--model_name_or_path`` may
    name a folder this task saved, to evaluate or continue it) or :class:`BertPairsTask`."""

    name = "pronoun_pairs"
    main_metric = "accuracy"  # the paper's table 2
    args_class = PronounPairsArguments
    #: The ``--model`` values this variant runs.
    models: tuple[str, ...] = ()

    @classmethod
    def variant_for(cls, argv: list[str]) -> type[PronounPairsTask]:
        """The class of the model ``--model`` names in ``argv`` or its ``--config`` file (default da), whose
        ``training_defaults`` are that classifier's recipe."""
        model = peek_argument(argv, "model") or PronounPairsArguments.model
        for variant in (DaPairsTask, LstmnPairsTask, BilstmPairsTask, BertPairsTask):
            if model in variant.models:
                return variant
        raise CorefBertError(f"--model {model!r} is not one of {', '.join((*MODEL_TYPES, 'bert'))}")

    def __init__(self, task_args: PronounPairsArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        if task_args.model not in self.models:
            verb = "fine-tunes" if self.uses_model_folder else "trains"
            raise CorefBertError(f"--model {task_args.model} is not {type(self).__name__}'s, which {verb} "
                                 f"{', '.join(self.models)}; build the class "
                                 "PronounPairsTask.variant_for(argv) picks")
        check_data_flags(training_args, task_args, "pairs.jsonl")
        self.main_metric = task_args.selection_metric
        self.model_dir = training_args.model_name_or_path
        train_types, eval_types = task_args.train_types.split(","), task_args.eval_types.split(",")
        self.examples = {
            "train": read_pairs(task_args.train_file, train_types) if training_args.do_train else [],
            "eval": read_pairs(task_args.validation_file, eval_types) if task_args.validation_file else [],
            "predict": read_pairs(task_args.test_file, eval_types) if training_args.do_predict else [],
        }

    def features(self, source: str, target: str) -> dict:
        """The model inputs of one pair of (windowed) texts."""
        raise NotImplementedError

    def _dataset(self, split: str) -> list[dict] | None:
        if not self.examples[split]:
            return None
        features, cut, max_words = [], Counter(), self.task_args.max_words
        for example in self.examples[split]:
            source, target, was_cut = replacement_window(example.source, example.target, max_words)
            if was_cut:
                cut[example.type] += 1
            features.append({**self.features(source, target), "labels": example.label})
        if cut:
            logger.warning("%s: %d pairs cut to --max_words %d (%s)", split, sum(cut.values()),
                           max_words, ", ".join(f"{k} {n}" for k, n in sorted(cut.items())))
        return features

    train_dataset = partialmethod(_dataset, "train")
    eval_dataset = partialmethod(_dataset, "eval")
    predict_dataset = partialmethod(_dataset, "predict")

    def token_masks(self, batch: dict) -> list[torch.Tensor]:
        return [batch[k] for k in ("attention_mask", "source_mask", "target_mask") if k in batch]

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        return {**self.padded_inputs(features), "labels": torch.tensor([f["labels"] for f in features])}  # [batch]

    def padded_inputs(self, features: list[dict]) -> dict[str, torch.Tensor]:
        """The model inputs of a batch, each padded to the longest text: ``[batch, longest]``."""
        raise NotImplementedError

    def evaluate(self, model, dataloader, accelerator, split):
        """Predict every pair (in dataset order: no shuffling, ``gather_for_metrics`` drops the padding
        duplicates); metrics overall and per type (``<type>_accuracy``, ``<type>_count``)."""
        predictions, probabilities = [], []
        for batch in dataloader:
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            logits = model(**inputs).logits.float()  # [batch, 2]
            predictions.append(accelerator.gather_for_metrics(logits.argmax(-1)).cpu())
            probabilities.append(accelerator.gather_for_metrics(logits.softmax(-1)[:, 1]).cpu())
        examples = self.examples["eval" if split == "eval" else "predict"]
        # --max_eval_samples cuts the dataset, not the examples: zip stops at the shorter
        rows = [(e, int(p), float(q)) for e, p, q in zip(examples, torch.cat(predictions), torch.cat(probabilities))]
        metrics = pair_metrics_by_type([p for _, p, _ in rows], [e.label for e, _, _ in rows],
                                       [e.type for e, _, _ in rows])
        metrics["p_entailed_std"] = spread = probability_spread([q for _, _, q in rows])
        if warning := collapse_warning(split, spread, rows[0][2] if rows else 0.0):
            logger.warning(warning)
        return metrics, rows

    def write_predictions(self, predictions, output_dir: str, split: str) -> list[str]:
        """``<split>_predictions.jsonl``: per pair its input line, type, label, prediction, P(entailed)."""
        path = os.path.join(output_dir, f"{split}_predictions.jsonl")
        rows = [{"line": e.line, "type": e.type, "label": e.label, "prediction": prediction,
                 "p_entailed": round(probability, 6)} for e, prediction, probability in predictions]
        replace_file(path, "".join(json.dumps(row) + "\n" for row in rows), "the predictions")
        return [path]


def probability_spread(probabilities: list[float]) -> float:
    """The standard deviation of P(entailed) over the pairs: 0 when the model answers every pair alike."""
    return float(torch.tensor(probabilities, dtype=torch.float64).std(correction=0)) if probabilities else 0.0


def collapse_warning(split: str, spread: float, probability: float) -> str | None:
    """One line when every pair got the same P(entailed) (``spread`` below 1e-6): the model has collapsed to
    a constant (as Parikh et al.'s Adagrad recipe did at its first steps on the 90 LitBank documents,
    docs/guides/pronoun_pairs.md, results)."""
    if spread >= 1e-6:
        return None
    return (f"{split}: every pair gets P(entailed) {probability:.4f}: the model outputs a constant (collapsed), "
            f"so its figures are one answer's for all pairs; more steps will not move it; retrain with another "
            f"--optim / --learning_rate / --seed (docs/guides/pronoun_pairs.md, results)")


class ScratchPairsTask(PronounPairsTask):
    """``--model da|lstmn|bilstm`` (:mod:`corefbert.tasks.pronoun_pairs.models`), trained from scratch."""

    uses_model_folder = False
    models = MODEL_TYPES
    training_defaults = SCRATCH_DEFAULTS

    def __init__(self, task_args: PronounPairsArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        self.pretrained, self.config = None, None
        self.vocabulary = self._vocabulary()

    def _vocabulary(self) -> Vocabulary:
        """From the model folder when one is given, else built from the training pairs (or the word vectors)."""
        a = self.task_args
        if self.model_dir:
            self.config, vocabulary, _ = PAIR_FOLDER.read(self.model_dir, model_type=a.model)
            return vocabulary
        if not self.examples["train"]:
            raise CorefBertError(f"--model {a.model} without --model_name_or_path trains from scratch: it needs "
                                 "--do_train and --train_file")
        if a.embeddings_file is None:
            texts = (t.split() for e in self.examples["train"] for t in (e.source, e.target))
            vocabulary = Vocabulary.build(texts, lowercase=a.lowercase, min_count=a.min_count)
            dimension = a.embedding_dim
        else:
            texts = [t for split in self.examples.values() for e in split for t in (e.source, e.target)]
            vocabulary, self.pretrained, hashed = vocabulary_with_vectors(texts, a.embeddings_file, a.lowercase,
                                                                          seed=self.args.seed)
            dimension = self.pretrained.shape[1]
            logger.info("word vectors for %d words; %d words without one hashed to %d random vectors",
                        len(vocabulary) - 2 - vocabulary.oov_buckets, hashed, vocabulary.oov_buckets)
        freeze = a.freeze_embeddings if a.freeze_embeddings is not None else a.embeddings_file is not None
        self.config = PairModelConfig(a.model, len(vocabulary), dimension, a.hidden_size, 2, a.dropout,
                                      freeze_embeddings=freeze, intra_attention=a.intra_attention,
                                      init_std=a.da_init_std)
        return vocabulary

    def build_model(self) -> torch.nn.Module:
        if self.model_dir:
            return PAIR_FOLDER.from_pretrained(self.model_dir).model
        return build_pair_model(self.config, self.pretrained)

    def features(self, source: str, target: str) -> dict:
        return {"source_ids": self.vocabulary.encode(source.split()), "target_ids": self.vocabulary.encode(target.split())}

    def padded_inputs(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = {}
        for side in ("source", "target"):
            rows = [f[f"{side}_ids"] or [self.vocabulary.word_index[UNK]] for f in features]
            batch[f"{side}_ids"] = _pad(rows, 0)  # [batch, len]
            batch[f"{side}_mask"] = _pad([[1] * len(r) for r in rows], 0)  # [batch, len]
        return batch

    def save_pretrained(self, model, output_dir: str, state_dict: dict | None = None) -> None:
        PAIR_FOLDER.save_pretrained(output_dir, model, self.vocabulary, state_dict)


class DaPairsTask(ScratchPairsTask):
    """``--model da``: the Decomposable Attention model, trained as Parikh et al. (:data:`MODEL_DEFAULTS`)."""

    models = ("da",)
    training_defaults = {**SCRATCH_DEFAULTS, **MODEL_DEFAULTS["da"]}


class LstmnPairsTask(ScratchPairsTask):
    """``--model lstmn``: the Deep-Attention LSTMN with deep fusion, trained with Adam (:data:`MODEL_DEFAULTS`)."""

    models = ("lstmn",)
    training_defaults = {**SCRATCH_DEFAULTS, **MODEL_DEFAULTS["lstmn"]}


class BilstmPairsTask(ScratchPairsTask):
    """``--model bilstm``: the BiLSTM encoder-decoder, trained with Adam (:data:`MODEL_DEFAULTS`)."""

    models = ("bilstm",)
    training_defaults = {**SCRATCH_DEFAULTS, **MODEL_DEFAULTS["bilstm"]}


class BertPairsTask(PronounPairsTask):
    """``--model bert``: a sequence-pair classifier from any encoder checkpoint (a CorefBERT one included),
    saved as ``AutoModelForSequenceClassification``, with the fine-tuning defaults (BERT's recipe)."""

    models = ("bert",)
    training_defaults: dict = {}

    def __init__(self, task_args: PronounPairsArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        if not self.model_dir:
            raise CorefBertError("--model bert fine-tunes a checkpoint: pass --model_name_or_path (an encoder "
                                 "checkpoint folder: BERT, RoBERTa, ModernBERT, DeBERTa, ELECTRA, DistilBERT, CorefBERT)")
        self.tokenizer = load_tokenizer(
            self.model_dir, advice="--model bert needs a checkpoint directory with tokenizer files")

    def build_model(self) -> torch.nn.Module:
        from transformers import AutoModelForSequenceClassification

        try:
            return AutoModelForSequenceClassification.from_pretrained(
                self.model_dir, num_labels=2, id2label=dict(enumerate(LABEL_NAMES)),
                label2id={n: i for i, n in enumerate(LABEL_NAMES)})
        except OSError as err:
            raise CorefBertError(f"cannot load the model ({err}); give a Hugging Face checkpoint directory",
                                 path=self.model_dir) from None

    def features(self, source: str, target: str) -> dict:
        return dict(self.tokenizer(source, target, truncation=True, max_length=self.task_args.max_seq_length))

    def padded_inputs(self, features: list[dict]) -> dict[str, torch.Tensor]:
        pads = {"input_ids": self.tokenizer.pad_token_id, "attention_mask": 0, "token_type_ids": 0}
        return {k: _pad([f[k] for f in features], pad) for k, pad in pads.items() if k in features[0]}


def replacement_window(source: str, target: str, max_words: int) -> tuple[str, str, bool]:
    """``source`` and ``target`` cut to at most ``max_words`` words each, around the first word where they
    differ (the replaced pronoun): the window starts ``max_words // 2`` words before it (or where the text
    ends), so a cut never removes the one thing the pair is about. Returns the texts and whether one was cut."""
    words = [source.split(), target.split()]
    if max(len(w) for w in words) <= max_words:
        return source, target, False
    change = next((i for i, (a, b) in enumerate(zip(*words)) if a != b), min(len(w) for w in words))
    windows = []
    for text in words:
        start = max(0, min(change - max_words // 2, len(text) - max_words))
        windows.append(" ".join(text[start:start + max_words]))
    return windows[0], windows[1], True


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    longest = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (longest - len(r)) for r in rows])  # [batch, longest]
