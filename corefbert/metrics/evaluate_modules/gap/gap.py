"""GAP's official scorer as an offline ``evaluate`` module: ``corefbert.metrics.load_metric("gap")``.

Predictions ``{"id", "a_coref", "b_coref"}`` (bools); references ``{"id", "a_coref", "b_coref", "pronoun"}``.
A thin wrapper of :func:`corefbert.metrics.gap.gap_metrics`: F1 over the A and B decisions (0-100), overall,
masculine and feminine, and ``bias`` = feminine / masculine F1. A reference without a prediction counts as
two false negatives; an example where neither name is the referent only ever adds false positives (see
:mod:`corefbert.metrics.gap`).
"""

import datasets
import evaluate

from corefbert.metrics.gap import gap_metrics

_DESCRIPTION = "GAP coreference F1 (official scorer), overall and by pronoun gender, with the F/M bias ratio."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"id": str, "a_coref": bool, "b_coref": bool}.
    references: list of {"id": str, "a_coref": bool, "b_coref": bool, "pronoun": str}.
Returns: {"f1", "precision", "recall", "masculine_f1", "feminine_f1", "bias" (when defined), "tp", "fp", "fn", "tn"}.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Gap(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Webster et al., Mind the GAP, TACL 2018",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": {"id": datasets.Value("string"), "a_coref": datasets.Value("bool"),
                                "b_coref": datasets.Value("bool")},
                "references": {"id": datasets.Value("string"), "a_coref": datasets.Value("bool"),
                               "b_coref": datasets.Value("bool"), "pronoun": datasets.Value("string")},
            }),
        )

    def _compute(self, predictions, references):
        gold = {r["id"]: (r["a_coref"], r["b_coref"], r["pronoun"]) for r in references}
        system = {p["id"]: (p["a_coref"], p["b_coref"]) for p in predictions}
        return gap_metrics(gold, system)
