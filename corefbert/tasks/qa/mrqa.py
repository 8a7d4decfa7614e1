"""MRQA 2019 / SQuAD v1.1 extractive QA: the standard start/end head, n-best decoding, SQuAD EM/F1.

Reads MRQA JSONL (``detected_answers`` character spans) or SQuAD v1.1 JSON; up to four gold spans per
window train the head (their probabilities are marginalized: any occurrence of the answer is right).
"""

from __future__ import annotations

from corefbert.metrics.squad import squad_metrics
from corefbert.tasks.qa.models import SpanQAModel
from corefbert.tasks.qa.task import ExtractiveQATask


class MRQATask(ExtractiveQATask):
    """MRQA / SQuAD: ``{qid: answer}`` predictions, SQuAD EM/F1 (max over gold answers)."""

    name = "mrqa"
    # The paper's settings for MRQA: LR 3e-5, 2 epochs, batch 32 (windows: QADataArguments' defaults).
    training_defaults = {"learning_rate": 3e-5, "num_train_epochs": 2.0, "per_device_train_batch_size": 32}
    max_answers = 4

    def build_model(self):
        return SpanQAModel.from_pretrained(self.args.model_name_or_path)

    def score(self, predictions, references):
        return squad_metrics(predictions, references)
