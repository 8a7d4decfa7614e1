"""GLUE: readers of the official TSV files, sentence(-pair) features, and the fine-tuning task.

Each task's files keep the column layout of GLUE's ``download_glue_data.py``; columns are found by header
name, except CoLA's headerless train/dev files. Classification (regression for STS-B) is on the first token,
as in BERT: ``AutoModelForSequenceClassification``. Test predictions go to the GLUE submission files
(``<TASK>.tsv``: ``index<TAB>prediction`` with label names).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch

from corefbert.errors import CorefBertError
from corefbert.metrics.glue import GLUE_MAIN_METRIC, canonical_task_name, glue_metrics
from corefbert.tasks.base import FinetuningArguments, FinetuningTask
from corefbert.text.durable import replace_file
from corefbert.text.tokenizers import load_tokenizer


@dataclass(frozen=True)
class GlueTaskSpec:
    """Where a task's text and label live, its label names, and its submission file name."""

    text_columns: tuple[str, ...]
    label_column: str  # STS-B: its score column
    labels: tuple[str, ...] | None  # None for regression
    submission: str
    index_column: str = "index"
    headerless_columns: tuple[str, ...] | None = None  # CoLA train/dev
    # MNLI: the annotator labels ``label1``.. sit between sentence2 and gold_label, and a row may hold up to
    # five of them whatever the header says (the validated training pairs of MultiNLI have five under a
    # header naming one). Named here is the first annotator column; None: every row has the header's width.
    annotator_labels: str | None = None


GLUE_TASKS: dict[str, GlueTaskSpec] = {
    "cola": GlueTaskSpec(("sentence",), "label", ("0", "1"), "CoLA",
                         headerless_columns=("source", "label", "orig_label", "sentence")),
    "sst2": GlueTaskSpec(("sentence",), "label", ("0", "1"), "SST-2"),
    "mrpc": GlueTaskSpec(("#1 String", "#2 String"), "Quality", ("0", "1"), "MRPC"),
    "qqp": GlueTaskSpec(("question1", "question2"), "is_duplicate", ("0", "1"), "QQP", index_column="id"),
    "stsb": GlueTaskSpec(("sentence1", "sentence2"), "score", None, "STS-B"),
    "mnli": GlueTaskSpec(("sentence1", "sentence2"), "gold_label", ("contradiction", "entailment", "neutral"),
                         "MNLI-m", annotator_labels="label1"),
    "qnli": GlueTaskSpec(("question", "sentence"), "label", ("entailment", "not_entailment"), "QNLI"),
    "rte": GlueTaskSpec(("sentence1", "sentence2"), "label", ("entailment", "not_entailment"), "RTE"),
    "wnli": GlueTaskSpec(("sentence1", "sentence2"), "label", ("0", "1"), "WNLI"),
}

# Default file names under --data_dir: split -> list of (file, subset) (MNLI has two halves).
_DEFAULT_FILES = {"train": [("train.tsv", "")], "eval": [("dev.tsv", "")], "predict": [("test.tsv", "")]}
_MNLI_FILES = {"train": [("train.tsv", "")], "eval": [("dev_matched.tsv", ""), ("dev_mismatched.tsv", "mm_")],
               "predict": [("test_matched.tsv", ""), ("test_mismatched.tsv", "mm_")]}


@dataclass
class GlueExample:
    """One row: its text fields, gold label (class id, a float for STS-B, None on test), id and subset."""

    texts: tuple[str, ...]
    label: int | float | None
    index: str
    subset: str = ""  # "" or "mm_" (MNLI mismatched)


def read_glue_tsv(path: str, task_name: str, with_labels: bool, subset: str = "") -> list[GlueExample]:
    """Read one official GLUE TSV of ``task_name``; labels are required when ``with_labels``. Missing columns,
    rows wider or narrower than the header (or CoLA's headerless layout): a tab or a line break inside a text,
    unknown labels and non-numeric STS-B scores raise one clear :class:`CorefBertError` naming the file and
    line. The one width that may vary is MNLI's annotator labels (1 to 5 of them before ``gold_label``, each a
    label name or empty)."""
    task = canonical_task_name(task_name)
    spec = GLUE_TASKS[task]
    if not os.path.isfile(path):
        raise CorefBertError(f"GLUE {task} file not found; check --data_dir or the file argument", path=path)
    try:
        with open(path, encoding="utf-8-sig") as handle:  # MRPC's files start with a byte-order mark
            lines = handle.read().split("\n")
    except UnicodeDecodeError as err:
        raise CorefBertError(f"not UTF-8 text ({err.reason} at byte {err.start}); re-encode it as UTF-8",
                             path=path) from None
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise CorefBertError("empty GLUE file", path=path)
    first = lines[0].rstrip("\r").split("\t")
    wanted = list(spec.text_columns) + ([spec.label_column] if with_labels else [])
    if spec.headerless_columns is not None and not set(spec.text_columns) <= set(first):
        columns, body_start = list(spec.headerless_columns), 0
    else:
        columns, body_start = first, 1
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise CorefBertError(
            f"missing column(s) {', '.join(missing)} for GLUE {task} (header has {', '.join(columns)}); "
            f"is this the right file and --task_name?", path=path, position=1)
    positions = [columns.index(c) for c in wanted]
    index_position = columns.index(spec.index_column) if spec.index_column in columns else None
    label_ids = {name: i for i, name in enumerate(spec.labels)} if spec.labels else None
    layout = "layout (no header)" if body_start == 0 else "header"
    block = _annotator_block(columns, spec)
    examples = []
    for number, line in enumerate(lines[body_start:], start=body_start + 1):
        fields = line.rstrip("\r").split("\t")
        if len(fields) != len(columns):
            # Only MNLI's annotator labels may change a row's width; the columns after them move along.
            extra = _annotator_labels_extra(fields, columns, block, spec, task, layout, path, number)
            end = block[1] + extra  # where the row's gold_label is
            fields = fields[:min(block[1], end)] + [""] * -extra + fields[end:]
        texts = tuple(fields[p] for p in positions[: len(spec.text_columns)])
        label = None
        if with_labels:
            raw = fields[positions[-1]].strip()
            if label_ids is None:
                try:
                    label = float(raw)
                except ValueError:
                    raise CorefBertError(f"STS-B score {raw!r} is not a number", path=path, position=number) from None
            elif raw in label_ids:
                label = label_ids[raw]
            else:
                raise CorefBertError(f"unknown label {raw!r} for GLUE {task}; expected one of {', '.join(spec.labels)}",
                                     path=path, position=number)
        index = fields[index_position] if index_position is not None else str(number - body_start - 1)
        examples.append(GlueExample(texts, label, index, subset))
    return examples


_MAX_ANNOTATOR_LABELS = 5  # MultiNLI: the writer's label and four validators


def _annotator_block(columns: list[str], spec: GlueTaskSpec) -> tuple[int | None, int | None]:
    """``[start, end)`` of the annotator label columns in ``columns`` (MNLI train/dev), else ``(None, None)``."""
    if spec.annotator_labels in columns and spec.label_column in columns:
        start, end = columns.index(spec.annotator_labels), columns.index(spec.label_column)
        if start < end:
            return start, end
    return None, None


def _annotator_labels_extra(fields: list[str], columns: list[str], block: tuple, spec: GlueTaskSpec,
                            task: str, layout: str, path: str, number: int) -> int:
    """How many more annotator labels than the header names this row holds (negative: fewer). Any other
    difference between a row's width and the header's is one error line: GLUE's TSVs are written without
    quoting, so a tab inside a sentence splits it and every later column would be misread."""
    start, end = block
    extra = len(fields) - len(columns)
    allowed = set(spec.labels or ()) | {""}
    if start is not None and 1 <= end - start + extra <= _MAX_ANNOTATOR_LABELS \
            and all(f.strip() in allowed for f in fields[start:end + extra]):
        return extra
    expected = str(len(columns))
    if start is not None:
        fixed = len(columns) - (end - start)
        expected = f"{fixed + 1} to {fixed + _MAX_ANNOTATOR_LABELS} (1 to {_MAX_ANNOTATOR_LABELS} annotator labels)"
    hint = ("a tab inside a text field? GLUE TSVs have no quoting: replace it with a space" if extra > 0 else
            "a missing field, or a line break inside a text field? join or complete the row")
    raise CorefBertError(f"row has {len(fields)} columns, the GLUE {task} {layout} has {expected}; {hint}",
                         path=path, position=number)


class _EncodedExamples(torch.utils.data.Dataset):
    """Examples tokenized on first access: ``--max_train_samples`` on SST-2/QQP/MNLI then costs only
    what it uses, and a full run pays the tokenizer once (cached)."""

    def __init__(self, examples: list[GlueExample], encode):
        self.examples, self.encode, self.cache = examples, encode, {}

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict:
        if i not in self.cache:
            self.cache[i] = self.encode(self.examples[i])
        return self.cache[i]


@dataclass
class GlueArguments:
    """The GLUE task and its files (``--data_dir`` with the official names, or each file given)."""

    task_name: str = field(metadata={"help": "cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte or wnli."})
    data_dir: str | None = field(
        default=None, metadata={"help": "Directory with the official train.tsv/dev.tsv/test.tsv "
                                        "(MNLI: dev_matched.tsv, dev_mismatched.tsv, test_matched.tsv, ...)."})
    train_file: str | None = field(default=None, metadata={"help": "Training TSV (overrides --data_dir)."})
    validation_file: str | None = field(
        default=None, metadata={"help": "Dev TSV (MNLI: the matched one; overrides --data_dir)."})
    validation_mismatched_file: str | None = field(default=None, metadata={"help": "MNLI dev_mismatched TSV."})
    test_file: str | None = field(default=None, metadata={"help": "Test TSV (MNLI: the matched one)."})
    test_mismatched_file: str | None = field(default=None, metadata={"help": "MNLI test_mismatched TSV."})
    max_seq_length: int = field(default=128, metadata={"help": "Longer pairs are truncated (longest first)."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})


class GlueTask(FinetuningTask):
    """One GLUE task; its files come from :func:`glue_files` (``self.files``: split -> ``[(path, subset)]``).
    BERT's recipe, the :class:`FinetuningArguments` defaults, is the paper's."""

    args_class = GlueArguments

    def __init__(self, task_args: GlueArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        a = task_args
        self.name = self.task = canonical_task_name(a.task_name)
        self.spec = GLUE_TASKS[self.task]
        self.main_metric = GLUE_MAIN_METRIC[self.task]
        self.model_name_or_path = training_args.model_name_or_path
        self.files = glue_files(
            self.task, a.data_dir,
            {"train": [a.train_file], "eval": [a.validation_file, a.validation_mismatched_file],
             "predict": [a.test_file, a.test_mismatched_file]},
            wanted={"train": training_args.do_train, "eval": training_args.do_eval,
                    "predict": training_args.do_predict})
        self.max_seq_length = a.max_seq_length
        advice = "give a checkpoint directory with tokenizer files or --tokenizer_name"
        self.tokenizer = load_tokenizer(a.tokenizer_name or self.model_name_or_path, advice=advice)
        self._examples: dict[str, list[GlueExample]] = {}

    @property
    def is_regression(self) -> bool:
        return self.spec.labels is None

    def build_model(self):
        """A sequence classifier (1 output, MSE loss for STS-B) on the first token of the checkpoint. A
        corefbert pretraining checkpoint loads too: its ``cls.*``/``mrp.*`` weights are left out."""
        from transformers import AutoModelForSequenceClassification

        if self.is_regression:
            options = dict(num_labels=1, problem_type="regression")
        else:
            labels = self.spec.labels
            options = dict(num_labels=len(labels), problem_type="single_label_classification",
                           id2label=dict(enumerate(labels)), label2id={name: i for i, name in enumerate(labels)})
        try:
            return AutoModelForSequenceClassification.from_pretrained(self.model_name_or_path, **options)
        except OSError as err:
            raise CorefBertError(f"cannot load the model ({err}); give a Hugging Face checkpoint directory",
                                 path=self.model_name_or_path) from None

    def examples(self, split: str) -> list[GlueExample]:
        """The examples of ``split`` ("train", "eval", "predict"), read once."""
        if split not in self._examples:
            rows = []
            for path, subset in self.files.get(split, []):
                rows.extend(read_glue_tsv(path, self.task, with_labels=split != "predict", subset=subset))
            self._examples[split] = rows
        return self._examples[split]

    def encode(self, example: GlueExample) -> dict:
        """Token ids (truncated to ``max_seq_length``, longest text first) and the label, if known."""
        feature = dict(self.tokenizer(*example.texts, truncation=True, max_length=self.max_seq_length))
        if example.label is not None:
            feature["labels"] = example.label
        return feature

    def _features(self, split: str) -> _EncodedExamples | None:
        if not self.files.get(split):
            return None
        return _EncodedExamples(self.examples(split), self.encode)

    def train_dataset(self):
        return self._features("train")

    def eval_dataset(self):
        return self._features("eval")

    def predict_dataset(self):
        return self._features("predict")

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        """Pad to the longest row of the batch; ``labels`` long (float for STS-B) when present."""
        longest = max(len(f["input_ids"]) for f in features)
        pad_values = {"input_ids": self.tokenizer.pad_token_id, "attention_mask": 0, "token_type_ids": 0}
        batch = {}
        for key, pad in pad_values.items():
            if key in features[0]:
                batch[key] = torch.tensor([f[key] + [pad] * (longest - len(f[key])) for f in features])  # [B, L]
        if "labels" in features[0]:
            dtype = torch.float if self.is_regression else torch.long
            batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=dtype)  # [B]
        return batch

    def evaluate(self, model, dataloader, accelerator, split):
        """Predict every row (in dataset order: no shuffling, ``gather_for_metrics`` drops the padding
        duplicates); metrics per subset (MNLI: ``accuracy``, ``mm_accuracy``) when labels are known."""
        outputs = []
        for batch in dataloader:
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            logits = model(**inputs).logits.float()  # [B, num_labels]
            scores = logits[:, 0] if self.is_regression else logits.argmax(-1)  # [B]
            outputs.append(accelerator.gather_for_metrics(scores).cpu())
        examples = self.examples(split)
        predictions = torch.cat(outputs).numpy()[: len(examples)]  # --max_eval_samples cuts only the dataset
        metrics: dict[str, float] = {}
        if split == "eval":
            subsets = np.array([e.subset for e in examples[: len(predictions)]])
            references = np.array([e.label for e in examples[: len(predictions)]])
            for subset in dict.fromkeys(subsets):
                chosen = subsets == subset
                for name, value in glue_metrics(self.task, predictions[chosen], references[chosen]).items():
                    metrics[subset + name] = value
        return metrics, predictions

    def label_name(self, prediction) -> str:
        if self.is_regression:
            return f"{min(max(float(prediction), 0.0), 5.0):.3f}"  # the STS-B range
        return self.spec.labels[int(prediction)]

    def write_predictions(self, predictions, output_dir: str, split: str) -> list[str]:
        """Test: the GLUE submission files ``<TASK>.tsv`` (MNLI: ``MNLI-m.tsv`` and ``MNLI-mm.tsv``).
        Dev: ``eval_predictions_<task>.tsv`` with ``index, prediction, label``."""
        examples = self.examples(split)[: len(predictions)]
        by_file: dict[str, list[str]] = {}
        for example, prediction in zip(examples, predictions):
            if split == "eval":
                name = f"eval_predictions_{self.task}{'_' + example.subset.strip('_') if example.subset else ''}.tsv"
                gold = "" if example.label is None else self.label_name(example.label)
                row = f"{example.index}\t{self.label_name(prediction)}\t{gold}"
            else:
                name = self.spec.submission + ("m.tsv" if example.subset else ".tsv")  # MNLI-m / MNLI-mm
                row = f"{example.index}\t{self.label_name(prediction)}"
            by_file.setdefault(name, []).append(row)
        paths = []
        for name, rows in by_file.items():
            path = os.path.join(output_dir, name)
            header = "index\tprediction\tlabel" if split == "eval" else "index\tprediction"
            replace_file(path, "\n".join([header, *rows]) + "\n", "the predictions")
            paths.append(path)
        return paths


def glue_files(task_name: str, data_dir: str | None, explicit: dict[str, list[str | None]],
               wanted: dict[str, bool]) -> dict[str, list[tuple[str, str]]]:
    """``split -> [(path, subset)]`` from explicit paths (``explicit[split]``: matched, then MNLI's
    mismatched; None falls back to ``data_dir``'s official names); a ``wanted`` split must have its files."""
    task = canonical_task_name(task_name)
    defaults = _MNLI_FILES if task == "mnli" else _DEFAULT_FILES
    files: dict[str, list[tuple[str, str]]] = {}
    for split, needed in wanted.items():
        given = explicit.get(split) or [None] * len(defaults[split])
        chosen = []
        for path, (name, subset) in zip(given, defaults[split]):
            if path is None and data_dir is not None:
                path = os.path.join(data_dir, name)
            if path is not None and (needed or os.path.isfile(path)):
                chosen.append((path, subset))
        if needed and not chosen:
            raise CorefBertError(f"no {split} file for GLUE {task}: give --data_dir or the {split} file argument")
        for path, _ in chosen:
            if not os.path.isfile(path):
                raise CorefBertError(f"GLUE {task} {split} file not found", path=path)
        files[split] = chosen
    return files
