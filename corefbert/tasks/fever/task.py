"""FEVER fact verification: readers for the three input forms, features, and the task (BERT-concat or KGAT).

Inputs, recognized from a file's first line (docs/guides/docred_fever.md): the official FEVER JSONL (gold
evidence sets of ``[annotation_id, evidence_id, page, sentence]``, their text from a ``wiki-pages``
directory, an oracle setting, or from a retrieved-evidence file); a retrieved-evidence file (``evidence:
[[page, sentence, text, score], ...]``, the form KGAT consumes), alone or matched by ``id`` to an official
file; claim/evidence-text pairs (``id``, ``claim``, ``evidence``, ``gold_label``: FEVER-Symmetric). The
predicted evidence of a claim is its first ``max_evidence`` candidate sentences (retrieval order), as
in KGAT; the FEVER score is reported when the gold evidence sets are known.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field
from functools import partialmethod

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from corefbert.argparser import peek_argument
from corefbert.errors import CorefBertError
from corefbert.metrics.fever import LABELS, fever_score, label_scores
from corefbert.tasks.base import (
    FinetuningArguments,
    FinetuningTask,
    HeldOutArguments,
    check_data_flags,
    held_out_split,
)
from corefbert.tasks.fever.kgat import KgatModel
from corefbert.tasks.heads import (
    check_head_weights,
    load_encoder,
    load_encoder_and_head,
    read_head_config,
    save_encoder_and_head,
    write_head_config,
)
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import read_jsonl
from corefbert.text.positions import max_positions
from corefbert.text.tokenizers import load_tokenizer

HEAD = "fever"  # fever_head.json (the model type) + fever_head.safetensors (KGAT's head)
MODEL_TYPES = ("concat", "kgat")
_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "-COLON-": ":"}


@dataclass
class FeverArguments(HeldOutArguments):
    """Data and model options of ``finetune/run_fever.py`` (KGAT's setup: 5 sentences of 130 tokens)."""

    train_file: str | None = field(default=None, metadata={"help": "FEVER JSONL, retrieved-evidence or pairs file."})
    validation_file: str | None = field(default=None, metadata={"help": "Dev file (same forms)."})
    test_file: str | None = field(default=None, metadata={"help": "Test file (same forms; labels optional)."})
    train_evidence_file: str | None = field(default=None, metadata={"help": "Retrieved evidence for train_file."})
    validation_evidence_file: str | None = field(default=None, metadata={"help": "Retrieved evidence for dev."})
    test_evidence_file: str | None = field(default=None, metadata={"help": "Retrieved evidence for test."})
    wiki_pages_dir: str | None = field(default=None, metadata={
        "help": "FEVER wiki-pages directory: gold evidence text for official JSONL files."})
    model_type: str = field(default="concat", metadata={"help": "concat (BERT-concat) or kgat."})
    max_evidence: int = field(default=5, metadata={"help": "Evidence sentences per claim."})
    max_seq_length: int = field(default=130, metadata={"help": "Tokens per claim-evidence pair (KGAT)."})
    max_concat_length: int = field(default=512, metadata={
        "help": "Tokens of claim + all evidence (BERT-concat); capped by the encoder."})
    num_kernels: int = field(default=21, metadata={"help": "KGAT Gaussian kernels (exact match + evenly spaced)."})


@dataclass
class Evidence:
    """One candidate evidence sentence; ``page``/``sentence`` are None for text-only evidence."""

    text: str
    page: str | None = None
    sentence: int | None = None
    score: float = 0.0


@dataclass
class Claim:
    id: object
    claim: str
    label: str | None
    evidence_sets: list | None = None  # official gold sets, when known
    candidates: list[Evidence] = field(default_factory=list)


def clean_text(text: str) -> str:
    """FEVER's PTB escapes back to characters; a page title's underscores to spaces."""
    for escape, char in _BRACKETS.items():
        text = text.replace(escape, char)
    return re.sub(r"\s+", " ", text.replace("_", " ")).strip()


def read_claims_jsonl(path: str) -> list[tuple[int, dict]]:
    """``(line number, claim object)`` for each claim of a FEVER JSONL file."""
    rows = []
    for number, row in read_jsonl(path, expected="one claim object per line expected"):
        if not isinstance(row, dict) or not isinstance(row.get("claim"), str):
            raise CorefBertError("a line must be an object with a 'claim' string", path=path, position=number)
        rows.append((number, row))
    if not rows:
        raise CorefBertError("no claims in the file", path=path)
    return rows


def read_claims(path: str) -> tuple[list[Claim], str]:
    """Read any of the three forms; returns the claims and the form: "fever", "retrieved" or "pairs"."""
    rows = read_claims_jsonl(path)
    first = rows[0][1]
    evidence = first.get("evidence")
    gold_sets = (isinstance(evidence, list) and evidence and isinstance(evidence[0], list) and evidence[0]
                 and isinstance(evidence[0][0], list))
    if isinstance(evidence, str):
        form = "pairs"
    elif isinstance(evidence, list) and not gold_sets and "verifiable" not in first:
        form = "retrieved"
    else:
        form = "fever"
    claims = []
    for number, row in rows:
        label = row.get("gold_label", row.get("label"))
        if label is not None and label not in LABELS:
            raise CorefBertError(f"label {label!r} is not one of {', '.join(LABELS)}", path=path,
                                 position=number)
        claim = Claim(row.get("id", number), row["claim"], label)
        if form == "pairs":
            claim.candidates = [Evidence(str(row.get("evidence", "")))]
        elif form == "retrieved":
            claim.candidates = _retrieved(row, path, number)
        else:
            claim.evidence_sets = _gold_sets(row.get("evidence") or [], path, number)
        claims.append(claim)
    return claims, form


def _gold_sets(sets: object, path: str, number: int) -> list:
    """Official evidence: a list of sets, each a list of ``[annotation, evidence, page, sentence]``."""
    def item_ok(item) -> bool:
        return (isinstance(item, list) and len(item) == 4 and (item[2] is None or isinstance(item[2], str))
                and (item[3] is None or (isinstance(item[3], int) and not isinstance(item[3], bool))))

    if not (isinstance(sets, list) and all(isinstance(s, list) and all(map(item_ok, s)) for s in sets)):
        raise CorefBertError("'evidence' must be a list of sets of [annotation, evidence, page, sentence]",
                             path=path, position=number)
    return sets


def _retrieved(row: dict, path: str, number: int) -> list[Evidence]:
    candidates = []
    items = row.get("evidence") or []
    if not isinstance(items, list):
        raise CorefBertError("retrieved 'evidence' must be a list of [page, sentence, text, score]",
                             path=path, position=number)
    for item in items:
        if not isinstance(item, list) or len(item) < 3:
            raise CorefBertError("retrieved evidence items must be [page, sentence, text, score]",
                                 path=path, position=number)
        try:
            score = float(item[3]) if len(item) > 3 else 0.0
            candidates.append(Evidence(str(item[2]), str(item[0]), int(item[1]), score))
        except (TypeError, ValueError):
            raise CorefBertError(f"retrieved evidence item {item!r}: sentence must be an integer and score a "
                                 "number", path=path, position=number) from None
    return candidates


def attach_retrieved(claims: list[Claim], path: str) -> None:
    """Give each claim the candidates of the retrieved-evidence file line with the same ``id``."""
    by_id = {str(row.get("id")): _retrieved(row, path, number) for number, row in read_claims_jsonl(path)}
    if missing := [c.id for c in claims if str(c.id) not in by_id]:
        raise CorefBertError(f"{len(missing)} claim ids have no line in the evidence file (first: {missing[0]})",
                             path=path)
    for claim in claims:
        claim.candidates = by_id[str(claim.id)]


def load_wiki_sentences(wiki_dir: str, pages: set[str]) -> dict[str, dict[int, str]]:
    """Sentences ``{page: {index: text}}`` of the wanted ``pages`` from a FEVER wiki-pages directory."""
    if not (files := sorted(glob.glob(os.path.join(wiki_dir, "*.jsonl")))):
        raise CorefBertError("no *.jsonl files; pass the FEVER wiki-pages directory", path=wiki_dir)
    found: dict[str, dict[int, str]] = {}
    for name in files:
        for number, page in read_jsonl(name, expected="a wiki-pages file has one page object per line"):
            if not (isinstance(page, dict) and isinstance(page.get("id"), str)
                    and isinstance(page.get("lines", ""), str)):
                raise CorefBertError("a wiki page must be an object with an 'id' and a 'lines' string",
                                     path=name, position=number)
            if page["id"] in pages:
                parts = [entry.split("\t") for entry in page.get("lines", "").split("\n")]
                found[page["id"]] = {int(p[0]): p[1] for p in parts
                                     if len(p) > 1 and p[0].isdigit() and p[1].strip()}
    return found


def attach_wiki_evidence(claims: list[Claim], wiki_dir: str, path: str) -> int:
    """Candidates = the gold evidence sentences (all sets, in order, once). References to a page or
    sentence missing from ``wiki_dir`` are skipped; returns how many, and says so on stderr."""
    wanted = {item[2] for c in claims for s in c.evidence_sets or [] for item in s if item[2] is not None}
    sentences = load_wiki_sentences(wiki_dir, wanted)
    skipped, first = 0, None
    for claim in claims:
        seen = set()
        for evidence_set in claim.evidence_sets or []:
            for item in evidence_set:
                page, index = item[2], item[3]
                if page is None or (page, index) in seen:
                    continue
                seen.add((page, index))
                text = sentences.get(page, {}).get(index)
                if text is None:
                    skipped += 1
                    first = first or f"claim {claim.id}: {page} sentence {index}"
                    continue
                claim.candidates.append(Evidence(text, page, index, 1.0))
    if skipped:
        print(f"warning: {path}: skipped {skipped} evidence references missing from {wiki_dir} ({first})",
              file=sys.stderr)
    return skipped


def _evidence_text(evidence: Evidence) -> str:
    text = clean_text(evidence.text)
    return f"{clean_text(evidence.page)} : {text}" if evidence.page else text


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    longest = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (longest - len(r)) for r in rows])  # [rows, longest]


class FeverTask(FinetuningTask):
    """FEVER / FEVER-Symmetric, scored by label accuracy. The family: claims, evaluation and predictions;
    each ``--model_type`` a variant with its paper settings (concat, kgat)."""

    name = "fever"
    main_metric = "accuracy"
    args_class = FeverArguments
    #: The ``--model_type`` this variant runs.
    model_type: str | None = None
    training_defaults: dict = {}  # each variant has the paper's own (see ConcatFeverTask.training_defaults)

    @classmethod
    def variant_for(cls, argv: list[str]) -> type[FeverTask]:
        """The class of ``--model_type`` in ``argv`` or its ``--config`` file (default concat); a model fine-tuned
        here (``--model_name_or_path`` with a ``fever_head.json``) decides its own."""
        path = peek_argument(argv, "model_name_or_path")
        head = read_head_config(path, HEAD) if path else None
        model_type = head["model_type"] if head is not None else \
            peek_argument(argv, "model_type") or FeverArguments.model_type
        if model_type not in MODEL_TYPES:
            raise CorefBertError(f"--model_type {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
        return {"concat": ConcatFeverTask, "kgat": KgatFeverTask}[model_type]

    def __init__(self, task_args: FeverArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        check_data_flags(training_args, task_args)
        args = task_args
        self.model_name_or_path = model_name_or_path = training_args.model_name_or_path
        self.head = read_head_config(model_name_or_path, HEAD)
        if self.head is not None and self.head["model_type"] != self.model_type:
            raise CorefBertError(f"this folder holds a {self.head['model_type']} model, not a {self.model_type} "
                                 "one", path=model_name_or_path)
        args.model_type = self.model_type  # the class decides; the flag only chose the class
        self.tokenizer = load_tokenizer(model_name_or_path)
        self.claims = {split: self._load(getattr(args, f"{f}_file"), getattr(args, f"{f}_evidence_file"))
                       for split, f in (("train", "train"), ("eval", "validation"), ("predict", "test"))}
        if args.validation_split_percentage and self.claims["train"] and not self.claims["eval"]:
            self.claims["train"], self.claims["eval"] = held_out_split(
                self.claims["train"], args.validation_split_percentage, args.split_seed)

    def _load(self, path: str | None, evidence_path: str | None) -> list[Claim] | None:
        if path is None:
            return None
        claims, form = read_claims(path)
        if evidence_path is not None:
            attach_retrieved(claims, evidence_path)
        elif form == "fever":
            if self.task_args.wiki_pages_dir is None:
                raise CorefBertError("official FEVER JSONL holds no evidence text; pass --wiki_pages_dir or the "
                                     "split's retrieved --*_evidence_file", path=path)
            attach_wiki_evidence(claims, self.task_args.wiki_pages_dir, path)
        return claims

    def _features(self, split: str) -> list[dict] | None:
        if not (claims := self.claims[split]):
            return None
        return [row | {"label": None if claim.label is None else LABELS.index(claim.label)}
                for claim, row in zip(claims, self.encode(claims))]

    def encode(self, claims: list[Claim]) -> list[dict]:
        """One feature row per claim (its label added by the caller)."""
        raise NotImplementedError

    train_dataset = partialmethod(_features, "train")
    eval_dataset = partialmethod(_features, "eval")
    predict_dataset = partialmethod(_features, "predict")

    def collate(self, features):
        pad = self.tokenizer.pad_token_id
        rows = self.model_rows(features)
        batch = {key: _pad(rows[key], pad if key == "input_ids" else 0) for key in rows}
        if all(f["label"] is not None for f in features):
            batch["labels"] = torch.tensor([f["label"] for f in features])
        return batch

    def model_rows(self, features: list[dict]) -> dict[str, list[list[int]]]:
        """The token rows of a batch by input name, before padding."""
        raise NotImplementedError

    def evaluate(self, model, dataloader, accelerator, split):
        predicted = []
        for batch in dataloader:
            logits = model(**batch).logits
            predicted.extend(accelerator.gather_for_metrics(logits.argmax(-1)).tolist())
        claims = self.claims["eval" if split == "eval" else "predict"][:len(predicted)]
        predictions = [{"id": c.id, "predicted_label": LABELS[p],
                        "predicted_evidence": [[e.page, e.sentence] for e in c.candidates[:self.task_args.max_evidence]
                                               if e.page is not None]}
                       for c, p in zip(claims, predicted)]
        metrics: dict[str, float] = {}
        if claims and all(c.label is not None for c in claims):
            metrics = label_scores([p["predicted_label"] for p in predictions], [c.label for c in claims])
            if all(c.evidence_sets is not None for c in claims):
                metrics["fever_score"] = fever_score([
                    {"label": c.label, "evidence": c.evidence_sets, **p} for c, p in zip(claims, predictions)])
        return metrics, predictions

    def write_predictions(self, predictions, output_dir, split):
        path = os.path.join(output_dir, "predictions.jsonl" if split == "predict" else f"{split}_predictions.jsonl")
        replace_file(path, "".join(json.dumps(row) + "\n" for row in predictions), "the predictions")
        return [path]


class ConcatFeverTask(FeverTask):
    """BERT-concat: the claim and its evidence sentences joined into one sequence-pair classifier input, saved
    as a standard ``AutoModelForSequenceClassification`` checkpoint."""

    model_type = "concat"
    # Paper settings (KGAT setup): 3 epochs, LR 2e-5 for BERT-concat.
    training_defaults = {"learning_rate": 2e-5, "num_train_epochs": 3.0}

    def __init__(self, task_args: FeverArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        positions = max_positions(AutoConfig.from_pretrained(self.model_name_or_path))
        self.concat_length = min(task_args.max_concat_length, positions or task_args.max_concat_length)

    def encode(self, claims):
        k = self.task_args.max_evidence
        texts = [" ".join(_evidence_text(e) for e in c.candidates[:k]) for c in claims]
        encoded = self.tokenizer([c.claim for c in claims], texts, truncation="longest_first",
                                 max_length=self.concat_length)
        return [{key: encoded[key][i] for key in encoded} for i in range(len(claims))]

    def model_rows(self, features):
        return {key: [f[key] for f in features] for key in features[0] if key != "label"}

    def build_model(self):
        return AutoModelForSequenceClassification.from_pretrained(
            self.model_name_or_path, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
            label2id={label: i for i, label in enumerate(LABELS)})

    def save_pretrained(self, model, output_dir, state_dict=None):
        super().save_pretrained(model, output_dir, state_dict=state_dict)  # a standard classification checkpoint
        write_head_config(output_dir, HEAD, {"model_type": "concat"})


class KgatFeverTask(FeverTask):
    """KGAT (Liu et al. 2020): one claim-evidence pair per node, kernel attention over the nodes; the encoder is
    saved as an ordinary checkpoint, the KGAT head in ``fever_head.safetensors``."""

    model_type = "kgat"
    # Paper settings (KGAT setup): 3 epochs, LR 5e-5, batch 32 as 8 x 4 accumulated.
    training_defaults = {"learning_rate": 5e-5, "num_train_epochs": 3.0, "per_device_train_batch_size": 8,
                         "gradient_accumulation_steps": 4, "per_device_eval_batch_size": 16}

    def __init__(self, task_args: FeverArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        if self.head is not None:
            check_head_weights(self.model_name_or_path, HEAD)

    def encode(self, claims):
        rows = []
        for claim in claims:
            # No evidence: the claim alone.
            nodes = [_evidence_text(e) for e in claim.candidates[:self.task_args.max_evidence]] or [""]
            encoded = self.tokenizer([claim.claim] * len(nodes), nodes, truncation="longest_first",
                                     max_length=self.task_args.max_seq_length)
            sides = [encoded.sequence_ids(n) for n in range(len(nodes))]
            rows.append({key: encoded[key] for key in encoded} | {
                "claim_mask": [[int(s == 0) for s in side] for side in sides],
                "evidence_mask": [[int(s == 1) for s in side] for side in sides]})
        return rows

    def model_rows(self, features):
        # Every node of every claim is one row: [sum of nodes, length] after padding.
        return {key: [row for f in features for row in f[key]] for key in features[0] if key != "label"}

    def collate(self, features):
        batch = super().collate(features)
        nodes = max(len(f["input_ids"]) for f in features)
        batch["node_index"] = torch.tensor([b * nodes + n for b, f in enumerate(features)
                                            for n in range(len(f["input_ids"]))])
        batch["node_mask"] = torch.tensor([[n < len(f["input_ids"]) for n in range(nodes)] for f in features])
        return batch

    def build_model(self):
        # The pooler is kept frozen (KGAT reads token states) so the saved encoder is a complete checkpoint.
        kernels = self.task_args.num_kernels if self.head is None else self.head["num_kernels"]
        model = KgatModel(load_encoder(self.model_name_or_path), len(LABELS), kernels)
        if self.head is not None:
            load_encoder_and_head(model, self.model_name_or_path, HEAD, with_encoder=False)
        return model

    def save_pretrained(self, model, output_dir, state_dict=None):
        save_encoder_and_head(model, output_dir, HEAD, {"model_type": "kgat", "num_kernels": len(model.mus)},
                              state_dict)
        self.tokenizer.save_pretrained(output_dir)

    def load_weights(self, model, directory):
        load_encoder_and_head(model, directory, HEAD)
