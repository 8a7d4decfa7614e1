"""The fine-tuning task shared by QUOREF and MRQA/SQuAD: files -> windows -> model -> answers -> metrics.

Subclasses (:mod:`corefbert.tasks.qa.quoref`, :mod:`corefbert.tasks.qa.mrqa`) choose the model, the loss and
the answer shape (one span, or a bag of spans) and the metric; everything else is here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import partialmethod

import numpy as np
import torch
from transformers import AutoConfig

from corefbert.errors import CorefBertError
from corefbert.tasks.base import (
    FinetuningArguments,
    FinetuningTask,
    HeldOutArguments,
    check_data_flags,
    held_out_split,
)
from corefbert.tasks.qa.data import QAExample, read_qa_file
from corefbert.tasks.qa.windows import build_windows, collate_windows, decode_answers
from corefbert.text.durable import replace_file
from corefbert.text.positions import max_positions
from corefbert.text.tokenizers import load_tokenizer


@dataclass
class QADataArguments(HeldOutArguments):
    """Data and windowing settings, named as in Hugging Face's ``run_qa.py``; the paper's windows: 512 tokens,
    stride 128. Without ``--validation_file``, ``--validation_split_percentage`` holds out training contexts."""

    train_file: str | None = field(default=None, metadata={"help": "Training file (official format)."})
    validation_file: str | None = field(default=None, metadata={"help": "Dev file, scored after training."})
    test_file: str | None = field(default=None, metadata={"help": "File to write predictions for (--do_predict)."})
    data_format: str = field(default="auto", metadata={"help": "auto | squad (JSON) | mrqa (JSONL)."})
    max_seq_length: int = field(default=512, metadata={"help": "Tokens per window, special tokens included."})
    doc_stride: int = field(default=128, metadata={"help": "Tokens between the starts of consecutive windows."})
    max_query_length: int = field(default=64, metadata={"help": "Questions are cut to this many tokens."})
    n_best_size: int = field(default=20, metadata={"help": "Best starts x best ends considered per window."})
    max_answer_length: int = field(default=30, metadata={"help": "Longest answer span in tokens."})


class ExtractiveQATask(FinetuningTask):
    """Windows over SQuAD-style / MRQA files, the model's logits decoded back to answers, scored."""

    main_metric = "f1"
    multi_span = False
    max_answers: int | None = None
    max_count: int | None = None
    args_class = QADataArguments

    def __init__(self, task_args: QADataArguments, training_args: FinetuningArguments):
        super().__init__(task_args, training_args)
        self.data_args = task_args  # self.args: the training arguments
        check_data_flags(training_args, task_args)
        model = training_args.model_name_or_path
        self.tokenizer = load_tokenizer(model)
        self._splits: dict[str, tuple[list[QAExample], list[dict]]] = {}
        positions = max_positions(AutoConfig.from_pretrained(model))
        if positions is not None and task_args.max_seq_length > positions:
            raise CorefBertError(f"--max_seq_length {task_args.max_seq_length} exceeds the model's "
                                 f"{positions} positions; lower it", path=model)

    def _examples(self, split: str) -> list[QAExample] | None:
        d = self.data_args
        if split == "predict":
            return read_qa_file(d.test_file, d.data_format, keep_unanswered=True) if d.test_file else None
        if split == "eval" and d.validation_file:
            return read_qa_file(d.validation_file, d.data_format)
        if not d.train_file or (split == "eval" and not d.validation_split_percentage):
            return None
        train = read_qa_file(d.train_file, d.data_format)
        if not d.validation_split_percentage or d.validation_file:
            return train
        # Split by context so no passage is on both sides.
        kept, held_out = held_out_split(train, d.validation_split_percentage, d.split_seed,
                                        group=lambda example: example.context)
        return held_out if split == "eval" else kept

    def _windows(self, split: str):
        if split not in self._splits:
            if (examples := self._examples(split)) is None:
                return None
            d = self.data_args
            windows = build_windows(examples, self.tokenizer, d.max_seq_length, d.doc_stride,
                                    d.max_query_length, self.max_answers, self.max_count, split == "train")
            for index, window in enumerate(windows):
                window["feature_index"] = index
            self._splits[split] = (examples, windows)
        return self._splits[split][1]

    train_dataset = partialmethod(_windows, "train")
    eval_dataset = partialmethod(_windows, "eval")
    predict_dataset = partialmethod(_windows, "predict")

    def num_examples(self, dataset) -> int:
        """Questions, not windows: a long context gives one question several windows."""
        return len({window["example_index"] for window in dataset})

    def collate(self, features: list) -> dict[str, torch.Tensor]:
        return collate_windows(features, self.tokenizer.pad_token_id)

    def score(self, predictions: dict, references: dict) -> dict[str, float]:
        """The benchmark's metric of ``predictions`` against ``references`` ``{qid: [gold texts]}``."""
        raise NotImplementedError

    def evaluate(self, model, dataloader, accelerator, split: str):
        examples, windows = self._splits[split]
        d = self.data_args
        floor = torch.finfo(torch.float32).min
        indices, starts, ends, counts, losses = [], [], [], [], []
        for batch in dataloader:
            outputs = model(**batch)
            pad = d.max_seq_length - outputs.start_logits.shape[1]
            # Windows differ in length per batch; pad to one width so batches gather and stack.
            start = torch.nn.functional.pad(outputs.start_logits.float(), (0, pad), value=floor)  # [batch, seq]
            end = torch.nn.functional.pad(outputs.end_logits.float(), (0, pad), value=floor)  # [batch, seq]
            counted = () if outputs.count_logits is None else (outputs.count_logits.float(),)
            gathered = accelerator.gather_for_metrics((batch["feature_index"], start, end) + counted)
            for store, value in zip((indices, starts, ends, counts), gathered):
                store.append(value.cpu())
            if outputs.loss is not None:
                losses.append(float(outputs.loss))
        order = torch.cat(indices).numpy()
        seen = [windows[i] for i in order]
        count_logits = torch.cat(counts).numpy() if counts else None
        predictions = decode_answers(examples, seen, torch.cat(starts).numpy(), torch.cat(ends).numpy(),
                                     count_logits, d.n_best_size, d.max_answer_length, self.multi_span)
        references = {examples[w["example_index"]].qid: examples[w["example_index"]].gold_texts for w in seen}
        references = {qid: golds for qid, golds in references.items() if golds}
        metrics = self.score(predictions, references) if references else {}
        if losses:
            metrics["loss"] = float(np.mean(losses))
        return metrics, predictions

    def write_predictions(self, predictions, output_dir: str, split: str) -> list[str]:
        path = os.path.join(output_dir, f"{split}_predictions.json")
        replace_file(path, json.dumps(predictions, indent=1, ensure_ascii=False), "the predictions")
        return [path]

    def load_weights(self, model, directory: str) -> None:
        model.load_weights(directory)
