"""GAP's official scorer as an offline ``evaluate`` module: ``corefbert.metrics.load_metric("gap")``, a
thin wrapper of :func:`corefbert.metrics.gap.gap_metrics` (its module says how each example counts)."""

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
        text, flag = datasets.Value("string"), datasets.Value("bool")
        decisions = {"id": text, "a_coref": flag, "b_coref": flag}
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="Webster et al., Mind the GAP, TACL 2018",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": decisions,
                                        "references": {**decisions, "pronoun": text}}))

    def _compute(self, predictions, references):
        gold = {r["id"]: (r["a_coref"], r["b_coref"], r["pronoun"]) for r in references}
        system = {p["id"]: (p["a_coref"], p["b_coref"]) for p in predictions}
        return gap_metrics(gold, system)
