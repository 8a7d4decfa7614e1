"""Pronoun-resolution accuracy (DPR/WSCR, WSC273, PDP, WinoGender, WikiCREM) as an offline ``evaluate``
module: ``load_metric("coref_accuracy")``, a thin wrapper of :func:`corefbert.metrics.gap.accuracy`."""

import datasets
import evaluate

from corefbert.metrics.gap import accuracy

_DESCRIPTION = "Accuracy (0-100) of picking the referent among a pronoun's candidates."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of int, the index of the chosen candidate.
    references: list of int, the index of the referent (-1: none of them).
Returns: {"accuracy": float}.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class CorefAccuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="Ye et al., CorefBERT, EMNLP 2020 (table 5)",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"),
                                        "references": datasets.Value("int64")}))

    def _compute(self, predictions, references):
        return accuracy(predictions, [None if r < 0 else r for r in references])
