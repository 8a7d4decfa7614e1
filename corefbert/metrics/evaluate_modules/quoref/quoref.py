"""QUOREF's DROP-style EM/F1 as an offline ``evaluate`` module: ``corefbert.metrics.load_metric("quoref")``,
a thin wrapper of :func:`corefbert.metrics.drop.quoref_metrics` (a question's spans form one answer)."""

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
        spans, qid = datasets.features.Sequence(datasets.Value("string")), datasets.Value("string")
        return evaluate.MetricInfo(
            description=_DESCRIPTION, inputs_description=_KWARGS_DESCRIPTION,
            citation="Dasigi et al., Quoref, EMNLP 2019; Dua et al., DROP, NAACL 2019",
            features=datasets.Features({"predictions": {"id": qid, "prediction_text": spans},
                                        "references": {"id": qid, "answers": {"text": spans}}}))

    def _compute(self, predictions, references):
        scores = quoref_metrics({p["id"]: list(p["prediction_text"]) for p in predictions},
                                {r["id"]: list(r["answers"]["text"]) for r in references})
        return {"exact_match": scores["exact_match"], "f1": scores["f1"]}
