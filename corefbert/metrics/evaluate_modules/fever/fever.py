"""FEVER label accuracy, macro F1 and FEVER score as an offline ``evaluate`` module:
``corefbert.metrics.load_metric("fever")``, a thin wrapper of :mod:`corefbert.metrics.fever`."""

import datasets
import evaluate

from corefbert.metrics.fever import fever_score, label_scores

_DESCRIPTION = "FEVER label accuracy, macro F1 and FEVER score (label right and a complete gold evidence set " \
               "among the first five predicted sentences), offline."
_KWARGS_DESCRIPTION = """
Args:
    predictions: per claim {"predicted_label": str, "predicted_evidence": list of {"page": str, "sentence": int}}.
    references: per claim {"label": str, "evidence": list of gold sets, each a list of {"page", "sentence"}}.
Returns: {"accuracy", "macro_f1", "fever_score"} on a 0-100 scale.
"""

_SENTENCE = {"page": datasets.Value("string"), "sentence": datasets.Value("int32")}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Fever(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="Thorne et al., FEVER, NAACL 2018",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": {"predicted_label": datasets.Value("string"),
                                "predicted_evidence": datasets.List(_SENTENCE)},
                "references": {"label": datasets.Value("string"),
                               "evidence": datasets.List(datasets.List(_SENTENCE))},
            }))

    def _compute(self, predictions, references):
        def pairs(sentences):  # datasets gives a Sequence of dicts back as a dict of lists
            if isinstance(sentences, dict):
                return [[p, s] for p, s in zip(sentences["page"], sentences["sentence"])]
            return [[x["page"], x["sentence"]] for x in sentences]

        instances = [{"label": ref["label"], "predicted_label": pred["predicted_label"],
                      "evidence": [pairs(s) for s in ref["evidence"]],
                      "predicted_evidence": pairs(pred["predicted_evidence"])}
                     for pred, ref in zip(predictions, references)]
        scores = label_scores([i["predicted_label"] for i in instances], [i["label"] for i in instances])
        return {**scores, "fever_score": fever_score(instances)}
