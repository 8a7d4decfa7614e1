"""SQuAD v1.1 EM/F1 as an offline ``evaluate`` module: ``corefbert.metrics.load_metric("squad")``, a thin
wrapper of :func:`corefbert.metrics.squad.squad_metrics` with the hub ``squad`` metric's inputs."""

import datasets
import evaluate

from corefbert.metrics.squad import squad_metrics

_DESCRIPTION = "SQuAD v1.1 exact match and F1 (official normalization, max over gold answers), offline."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"id": str, "prediction_text": str}.
    references: list of {"id": str, "answers": {"text": list[str], "answer_start": list[int]}}.
Returns: {"exact_match": float, "f1": float} on a 0-100 scale.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Squad(evaluate.Metric):
    def _info(self):
        text, qid = datasets.Value("string"), datasets.Value("string")
        answers = datasets.features.Sequence({"text": text, "answer_start": datasets.Value("int32")})
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="Rajpurkar et al., SQuAD, EMNLP 2016",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": {"id": qid, "prediction_text": text},
                                        "references": {"id": qid, "answers": answers}}))

    def _compute(self, predictions, references):
        scores = squad_metrics({p["id"]: p["prediction_text"] for p in predictions},
                               {r["id"]: list(r["answers"]["text"]) for r in references})
        return {"exact_match": scores["exact_match"], "f1": scores["f1"]}
