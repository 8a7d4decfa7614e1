"""GLUE as an offline ``evaluate`` module: ``corefbert.metrics.load_metric("glue", "mrpc")``, a thin wrapper
of :mod:`corefbert.metrics.glue`; the config name is the task (``mnli_matched``/``mnli_mismatched`` too)."""

import datasets
import evaluate

from corefbert.metrics.glue import canonical_task_name, glue_metrics

_DESCRIPTION = "GLUE metrics (accuracy, F1, Matthews correlation, Pearson/Spearman) computed offline."
_KWARGS_DESCRIPTION = """
Args:
    predictions: predicted label ids (int), or scores (float) for stsb.
    references: gold label ids (int), or scores (float) for stsb.
Returns: a dict with the task's metrics, e.g. {"accuracy": ..., "f1": ...} for mrpc.
"""


def _task(config_name):
    name = (config_name or "").replace("_matched", "").replace("_mismatched", "")
    return canonical_task_name(name)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Glue(evaluate.Metric):
    def _info(self):
        value = "float32" if _task(self.config_name) == "stsb" else "int64"
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="Wang et al., GLUE, ICLR 2019",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value(value),
                                        "references": datasets.Value(value)}))

    def _compute(self, predictions, references):
        return glue_metrics(_task(self.config_name), predictions, references)
