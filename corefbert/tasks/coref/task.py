"""The pronoun-coreference fine-tuning task on the shared loop (``finetune/run_coref.py``).

Train on any mix of GAP, DPR/WSCR and WikiCREM files; evaluate on any of GAP, DPR, WSC273 (blocks or XML),
PDP, WinoGender (blocks or sentence TSV), WikiCREM. Several evaluation files form one evaluation set; each
is scored on its own (``<file stem>_accuracy`` or GAP's ``<file stem>_f1`` etc.) and ``score``, the mean of
their main figures, picks the best checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field

import torch

from corefbert.errors import CorefBertError
from corefbert.metrics.gap import accuracy, gap_metrics
from corefbert.tasks.base import FinetuningArguments, FinetuningTask
from corefbert.tasks.coref.copy_scoring import COPY_SPANS
from corefbert.tasks.coref.mlm_scoring import LOSS_VARIANTS, REDUCTIONS
from corefbert.tasks.coref.readers import (
    FORMATS,
    WSC_SCHEMAS,
    PronounExample,
    detect_format,
    read_pronoun_file,
)
from corefbert.tasks.coref.scorers import SCORERS
from corefbert.tasks.heads import load_weights, saved_pooler, with_pooler
from corefbert.text.durable import output_file
from corefbert.text.tokenizers import load_tokenizer

logger = logging.getLogger(__name__)

ZERO_SHOT = tuple(name for name in SCORERS if name)  # mlm, copy, copy_untrained


@dataclass
class CorefArguments:
    """Data and scoring settings of the pronoun-coreference CLI."""

    train_file: list[str] | None = field(default=None, metadata={
        "help": "Training files, any mix of GAP TSV, DPR/WSCR and WikiCREM 4-line blocks."})
    validation_file: list[str] | None = field(default=None, metadata={
        "help": "Evaluation files (GAP, DPR, WSC273 .txt/.xml, PDP, WinoGender .txt/.tsv, WikiCREM)."})
    test_file: list[str] | None = field(default=None, metadata={"help": "Files to write predictions for."})
    data_format: str | None = field(default=None, metadata={
        "help": f"Force one format ({', '.join(FORMATS)}) for every file; default: detect per file."})
    wsc_schemas: str = field(default="auto", metadata={
        "help": "WSC XML: wsc273 (the first 273 schemas), all (285 in WSCollection.xml), or auto: wsc273 for a "
                "file named WSCollection*.xml, all for any other."})
    strict: bool = field(default=False, metadata={
        "help": "Stop at the first unusable problem instead of skipping and counting it."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per masked sequence (paper: 128)."})
    score_reduction: str = field(default="mean", metadata={
        "help": "How a candidate's token log-probabilities combine: mean (Kocijan et al.) or sum."})
    margin_alpha: float = field(default=10.0, metadata={"help": "Eq. 5 alpha (weight of the margin term)."})
    margin_beta: float = field(default=0.2, metadata={"help": "Eq. 5 beta (the margin)."})
    loss_variant: str = field(default="paper", metadata={
        "help": "paper: eq. 5 per example; wikicrem: the wrong-candidate score averaged over the batch."})
    zero_shot: str | None = field(default=None, metadata={
        "help": "Evaluate without training: mlm (masked-LM candidate scoring), copy (the MRP copy head) or "
                "copy_untrained (the copy head with V at its initial 1/hidden: the copy scorer's control)."})
    copy_span: str = field(default="last_word", metadata={
        "help": "Copy scoring: score a candidate by its last word (last_word; pretraining mentions are single "
                "nouns) or by its whole span (full)."})
    allow_untrained_copy_head: bool = field(default=False, metadata={
        "help": "Copy scoring from a checkpoint without mrp.copy_vector: V at its initial value 1/hidden."})
    copy_html_examples: int = field(default=0, metadata={
        "help": "With --zero_shot copy: write the HTML copy view of the first N examples of each file."})

    def __post_init__(self):
        for name, value, allowed in (("score_reduction", self.score_reduction, REDUCTIONS),
                                     ("loss_variant", self.loss_variant, LOSS_VARIANTS),
                                     ("copy_span", self.copy_span, COPY_SPANS),
                                     ("wsc_schemas", self.wsc_schemas, WSC_SCHEMAS)):
            if value not in allowed:
                raise CorefBertError(f"--{name} {value!r} is not one of {', '.join(allowed)}")
        if self.zero_shot is not None and self.zero_shot not in ZERO_SHOT:
            raise CorefBertError(f"--zero_shot {self.zero_shot!r} is not one of {', '.join(ZERO_SHOT)}")


class CorefTask(FinetuningTask):
    """Pronoun resolution by candidate scoring; predictions per evaluation file."""

    name = "coref"
    main_metric = "score"
    args_class = CorefArguments
    # Paper appendix (table 5 setup): LR 3e-5, batch 64, 10 epochs (max length 128: CorefArguments).
    training_defaults = {"learning_rate": 3e-5, "per_device_train_batch_size": 64, "num_train_epochs": 10.0}

    def __init__(self, task_args: CorefArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        self.data_args = task_args  # self.args: the training arguments
        path = training_args.model_name_or_path
        if task_args.zero_shot and training_args.do_train:
            raise CorefBertError("--zero_shot evaluates a checkpoint as it is; drop --do_train or --zero_shot")
        self.tokenizer = load_tokenizer(path)
        if self.tokenizer.mask_token_id is None:
            raise CorefBertError("the tokenizer has no mask token; candidate scoring needs a masked-LM tokenizer",
                                 path=path)
        # The scoring strategy, chosen once: everything below asks it, never --zero_shot.
        self.scorer = SCORERS[task_args.zero_shot](task_args, self.tokenizer, path)
        self.sources: dict[str, list[tuple[str, str, list[PronounExample]]]] = {}
        self.skipped: dict[tuple[str, str], Counter] = {}  # (split, path) -> reasons

    def _read(self, split: str, files: list[str] | None, training: bool) -> list[tuple[str, str, list]]:
        if split in self.sources:
            return self.sources[split]
        out = []
        for path in files or []:
            fmt = self.data_args.data_format or (detect_format(path) if os.path.isfile(path) else None)
            examples, skipped = read_pronoun_file(path, fmt, self.data_args.strict, self.data_args.wsc_schemas)
            if training:
                # Eq. 5 needs a referent and exactly one wrong candidate.
                kept = [e for e in examples if e.label is not None and len(e.candidates) == 2]
                skipped["no_referent_or_not_two_candidates"] += len(examples) - len(kept)
                examples = kept
            skipped = +skipped  # only reasons that happened: no "skipped {'…': 0}" warning
            if skipped:
                logger.warning("%s: skipped %s", path, dict(skipped))
            self.skipped[(split, path)] = skipped
            out.append((path, fmt, examples))
        self.sources[split] = out
        return out

    def _features(self, split: str, files: list[str] | None, training: bool = False) -> _EncodedExamples | None:
        sources = self._read(split, files, training)
        return _EncodedExamples([e for _, _, examples in sources for e in examples], self.scorer.encode) \
            if sources else None

    def train_dataset(self):
        return self._features("train", self.data_args.train_file, training=True)

    def eval_dataset(self):
        return self._features("eval", self.data_args.validation_file)

    def predict_dataset(self):
        return self._features("predict", self.data_args.test_file)

    def collate(self, features: list) -> dict[str, torch.Tensor]:
        return self.scorer.collate(features)

    def build_model(self):
        return self.scorer.build_model()

    def save_pretrained(self, model, output_dir: str, state_dict: dict | None = None) -> None:
        inner = getattr(model, "mlm", model)
        if inner is not model:  # the eq. 5 model: the masked LM plus its frozen pooler, as one encoder checkpoint
            state_dict = with_pooler(model.state_dict() if state_dict is None else state_dict, "pooler",
                                     inner.base_model_prefix)
            state_dict = {k[len("mlm."):] if k.startswith("mlm.") else k: v for k, v in state_dict.items()}
        inner.save_pretrained(output_dir, state_dict=state_dict)
        self.tokenizer.save_pretrained(output_dir)

    def load_weights(self, model, directory: str) -> None:
        inner = getattr(model, "mlm", model)
        if inner is model:
            load_weights(model, directory)
            return
        load_weights(inner, directory, extra_prefixes=(f"{inner.base_model_prefix}.pooler.",))
        pooler = saved_pooler(directory)
        if pooler is not None and model.pooler is not None:
            model.pooler.load_state_dict(pooler)

    def evaluate(self, model, dataloader, accelerator, split: str):
        source_split = "eval" if split == "eval" else "predict"
        sources = self.sources[source_split]
        width = max(len(e.candidates) for _, _, examples in sources for e in examples)
        by_index: dict[int, list[float]] = {}
        for batch in dataloader:
            out = model(**{k: v for k, v in batch.items() if k != "labels"})
            padded = torch.full((out.scores.shape[0], width), float("-inf"), device=out.scores.device)
            padded[:, :out.scores.shape[1]] = out.scores.float()  # [B, width]: same shape on every process
            index, padded = accelerator.gather_for_metrics((batch["example_index"], padded))
            by_index.update(zip(index.tolist(), padded.tolist()))
        predictions, metrics, main = [], {}, []
        offset = 0
        for path, fmt, examples in sources:
            rows = []
            for i, example in enumerate(examples):
                row = by_index.get(offset + i)
                if row is None:  # --max_eval_samples cut it off
                    continue
                row = row[:len(example.candidates)]
                best = max(range(len(row)), key=row.__getitem__)
                # A candidate the model could not score (copy mode: no occurrence in the text or the window)
                # leaves the problem undecided, counted wrong: absence must not pick the other candidate.
                rows.append((example, row, best if min(row) > float("-inf") else -1))
            offset += len(examples)
            predictions.append((path, fmt, rows))
            if not rows:
                continue
            stem = _stem(path)
            if fmt == "gap":
                gold = {e.id: (e.gold[0], e.gold[1], e.pronoun) for e, _, _ in rows}
                system = {e.id: (pick == 0, pick == 1) for e, _, pick in rows}
                values = gap_metrics(gold, system)
                main.append(values["f1"])
            else:
                if fmt == "winogender":
                    logger.info("%s: no per-gender accuracy: both scorings mask the pronoun, the only word that "
                                "differs between a sentence's male and female versions, so their accuracies are "
                                "equal by construction", path)
                values = accuracy([p for _, _, p in rows], [e.label for e, _, _ in rows])
                main.append(values["accuracy"])
            values.update(self.scorer.file_metrics(path, rows))
            metrics.update({f"{stem}_{k}": v for k, v in values.items()})
            metrics[f"{stem}_examples"] = len(rows)
            metrics[f"{stem}_skipped"] = sum(self.skipped.get((source_split, path), Counter()).values())
        metrics["score"] = sum(main) / len(main) if main else 0.0
        if accelerator.is_main_process:
            files = [(_stem(path), examples) for path, _, examples in sources]
            self.scorer.write_views(accelerator.unwrap_model(model), files, self.args.output_dir, split)
        return metrics, predictions

    def write_predictions(self, predictions, output_dir: str, split: str) -> list[str]:
        os.makedirs(output_dir, exist_ok=True)
        paths = []
        for path, fmt, rows in predictions:
            stem = _stem(path)
            scores_path = os.path.join(output_dir, f"{split}_{stem}_predictions.jsonl")
            with output_file(scores_path, what="the predictions") as handle:
                for example, row, pick in rows:
                    scores = [s if s > float("-inf") else None for s in row]  # JSON has no -inf
                    handle.write(json.dumps({"id": example.id, "candidates": example.candidates, "scores": scores,
                                             "prediction": example.candidates[pick] if pick >= 0 else None,
                                             "label": example.label}) + "\n")
            paths.append(scores_path)
            if fmt == "gap":
                # The GAP scorer's system format: ID, A-coref, B-coref, no header.
                gap_path = os.path.join(output_dir, f"{split}_{stem}_gap.tsv")
                with output_file(gap_path, what="the predictions") as handle:
                    for example, _, pick in rows:
                        handle.write(f"{example.id}\t{str(pick == 0).upper()}\t{str(pick == 1).upper()}\n")
                paths.append(gap_path)
        return paths


class _EncodedExamples(torch.utils.data.Dataset):
    """Examples encoded on first access: ``--max_train_samples`` on WikiCREM does not tokenize all 10,000."""

    def __init__(self, examples: list[PronounExample], encode):
        self.examples, self.encode, self.cache = examples, encode, {}

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict:
        if index not in self.cache:
            example = self.examples[index]
            self.cache[index] = {**self.encode(example), "index": index,
                                 "label": -1 if example.label is None else example.label}
        return self.cache[index]


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0].replace(".", "_")
