"""QUOREF (Dasigi et al., 2019) as in the CorefBERT paper: multi-span answers, count head, reasoning layer.

The model is :class:`~corefbert.tasks.qa.models.QuorefQAModel`; answers are bags of spans decoded with
the predicted count and scored by the DROP-style EM/F1 of the official Quoref evaluator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corefbert.metrics.drop import quoref_metrics
from corefbert.tasks.qa.models import QuorefQAModel
from corefbert.tasks.qa.task import ExtractiveQATask, QADataArguments


@dataclass
class QuorefArguments(QADataArguments):
    """QUOREF data settings plus the two switches that turn the paper's model into plain BERT QA."""

    no_reasoning_layer: bool = field(default=False, metadata={"help": "Drop the extra Transformer layer."})
    no_count_head: bool = field(default=False, metadata={"help": "Drop the answer-count head (one span per answer)."})


class QuorefTask(ExtractiveQATask):
    """QUOREF: ``{question_id: [answer strings]}`` predictions, DROP-style EM/F1."""

    name = "quoref"
    args_class = QuorefArguments
    # The paper's settings (appendix): LR 2e-5, 6 epochs, batch 32 (windows: QADataArguments' defaults).
    training_defaults = {"learning_rate": 2e-5, "num_train_epochs": 6.0, "per_device_train_batch_size": 32}
    multi_span = True
    max_count = 2  # the count head predicts 0, 1 or 2 spans per window (the paper's setting)

    def build_model(self):
        return QuorefQAModel.from_pretrained(self.args.model_name_or_path,
                                             reasoning_layer=not self.data_args.no_reasoning_layer,
                                             count_head=not self.data_args.no_count_head)

    def score(self, predictions, references):
        return quoref_metrics(predictions, references)
