"""QUOREF's DROP-style EM/F1 as an offline ``evaluate`` module: ``corefbert.metrics.load_metric("quoref")``.

Predictions ``{"id", "prediction_text": [span, ...]}``; references ``{"id", "answers": {"text": [span, ...]}}``
where the spans of one question together form its (possibly multi-span) answer. A thin wrapper of
:func:`corefbert.metrics.drop.quoref_metrics` (scores 0-100).
"""

import datasets
import evaluate

from corefbert.metrics.drop import quoref_metrics

_DESCRIPTION = "QUOREF EM/F1: answers as bags of spans, optimally aligned (the official DROP-style metric)."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"id": str, "prediction_text": list[str]}.
    references: list of {"id": str, "answers": {"text": list[str]}}.
Returns: {"exact_match": float, "f1": float} on a 0-100 scale.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Quoref(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Dasigi et al., Quoref, EMNLP 2019; Dua et al., DROP, NAACL 2019",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": {
                    "id": datasets.Value("string"),
                    "prediction_text": datasets.features.Sequence(datasets.Value("string")),
                },
                "references": {
                    "id": datasets.Value("string"),
                    "answers": {"text": datasets.features.Sequence(datasets.Value("string"))},
                },
            }),
        )

    def _compute(self, predictions, references):
        scores = quoref_metrics(
            {p["id"]: list(p["prediction_text"]) for p in predictions},
            {r["id"]: list(r["answers"]["text"]) for r in references},
        )
        return {"exact_match": scores["exact_match"], "f1": scores["f1"]}
