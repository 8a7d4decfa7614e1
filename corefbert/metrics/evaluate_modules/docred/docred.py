"""DocRED F1 / Ign F1 as an offline ``evaluate`` module: ``corefbert.metrics.load_metric("docred")``, one
example per document; a thin wrapper of :func:`corefbert.metrics.docred.docred_scores`."""

import datasets
import evaluate

from corefbert.metrics.docred import docred_scores

_DESCRIPTION = "DocRED relation extraction F1 and Ign F1 (official evaluation.py definitions), offline."
_KWARGS_DESCRIPTION = """
Args:
    predictions: per document {"title": str, "h_idx": list[int], "t_idx": list[int], "r": list[str]}.
    references: per document {"title": str, "entity_names": list[list[str]] (mention names per entity),
        "h": list[int], "t": list[int], "r": list[str]} (the gold facts).
    train_facts: optional list of [head mention name, tail mention name, relation id] from the training
        annotations (corefbert.metrics.docred.training_facts); facts among them are ignored by Ign F1.
Returns: precision, recall, f1, ign_precision, ign_f1 (0-100) and the counts.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Docred(evaluate.Metric):
    def _info(self):
        text, ints = datasets.Value("string"), datasets.Sequence(datasets.Value("int32"))
        texts = datasets.Sequence(datasets.Value("string"))
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="Yao et al., DocRED, ACL 2019",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": {"title": text, "h_idx": ints, "t_idx": ints, "r": texts},
                "references": {"title": text, "entity_names": datasets.Sequence(texts), "h": ints, "t": ints,
                               "r": texts}}))

    def _compute(self, predictions, references, train_facts=None):
        submitted = [{"title": p["title"], "h_idx": h, "t_idx": t, "r": r}
                     for p in predictions for h, t, r in zip(p["h_idx"], p["t_idx"], p["r"])]
        gold = [{"title": ref["title"], "vertexSet": [[{"name": n} for n in names] for names in ref["entity_names"]],
                 "labels": [{"h": h, "t": t, "r": r} for h, t, r in zip(ref["h"], ref["t"], ref["r"])]}
                for ref in references]
        return docred_scores(submitted, gold, {tuple(f) for f in train_facts or []})
