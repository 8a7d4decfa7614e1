"""GAP's official scoring (``gap_scorer.py`` of google-research-datasets/gap-coreference) and accuracy.

GAP scores two binary decisions per example, "is name A coreferent with the pronoun" and "is name B", as one
pool of decisions: a TRUE decision on a TRUE gold is a true positive, TRUE on FALSE a false positive, FALSE on
TRUE a false negative, FALSE on FALSE a true negative; a missing system decision counts as a false negative.
F1 (in percent, as the official scorecard) is computed overall and per gold gender of the pronoun
(masculine: he/him/his; feminine: she/her/hers), and ``bias`` = feminine F1 / masculine F1.

**Examples where neither name is the referent** (about 10% of GAP) are scored as the official scorer does:
their two gold decisions are FALSE, so every TRUE a system predicts on them is a false positive and FALSE for
both is two true negatives (which F1 ignores): a system that always picks a name pays one false positive each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from corefbert.errors import CorefBertError
from corefbert.pronouns import forms_of

GENDERS = ("masculine", "feminine")
_PRONOUN_GENDER = {w: g for g in GENDERS for w in forms_of(g)}  # the official scorer's: he, him, his; she, her, hers


@dataclass
class DecisionCounts:
    """Tallies of the A/B coreference decisions."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    def add(self, gold: bool, system: bool | None) -> None:
        if system is None:
            self.fn += 1  # the official scorer counts a missing output as a false negative
        elif gold and system:
            self.tp += 1
        elif system:
            self.fp += 1
        elif gold:
            self.fn += 1
        else:
            self.tn += 1

    @property
    def precision(self) -> float:
        return 100.0 * self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def gap_counts(gold: Mapping[str, tuple[bool, bool, str]],
               system: Mapping[str, tuple[bool | None, bool | None]]) -> dict[str, DecisionCounts]:
    """Decision counts overall (key ``overall``) and per gender. ``gold`` maps an example id to
    ``(A-coref, B-coref, pronoun)``; ``system`` maps ids to the predicted ``(A-coref, B-coref)``. Ids missing
    from ``system`` count as two false negatives (official behaviour)."""
    counts = {"overall": DecisionCounts(), **{g: DecisionCounts() for g in GENDERS}}
    for example_id, (gold_a, gold_b, pronoun) in gold.items():
        sys_a, sys_b = system.get(example_id, (None, None))
        gender = _PRONOUN_GENDER.get(pronoun.lower())
        if gender is None:
            raise CorefBertError(f"{pronoun!r} is not a GAP pronoun; the scorer knows "
                                 f"{', '.join(_PRONOUN_GENDER)}")
        for key in ("overall", gender):
            counts[key].add(gold_a, sys_a)
            counts[key].add(gold_b, sys_b)
    return counts


def gap_metrics(gold: Mapping[str, tuple[bool, bool, str]],
                system: Mapping[str, tuple[bool | None, bool | None]]) -> dict[str, float]:
    """The official scorecard as a flat dict: ``f1``, ``precision``, ``recall``, ``masculine_f1``,
    ``feminine_f1``, ``bias`` (F/M; left out when either F1 is 0, where the official scorer prints ``-``),
    and the overall ``tp``/``fp``/``fn``/``tn``."""
    counts = gap_counts(gold, system)
    overall = counts["overall"]
    result = {"f1": overall.f1, "precision": overall.precision, "recall": overall.recall,
              "tp": overall.tp, "fp": overall.fp, "fn": overall.fn, "tn": overall.tn}
    for gender in GENDERS:
        result[f"{gender}_f1"] = counts[gender].f1
    if result["masculine_f1"] and result["feminine_f1"]:
        result["bias"] = result["feminine_f1"] / result["masculine_f1"]
    return result


def accuracy(predictions: Sequence[int], labels: Sequence[int | None],
             groups: Iterable[str | None] | None = None) -> dict[str, float]:
    """Accuracy in percent (``accuracy``), plus ``accuracy_<group>`` per group (e.g. WinoGender's pronoun
    gender) when ``groups`` is given. A label of ``None`` (no candidate is the referent) is always wrong for a
    system that must pick one, so it counts as an error rather than being dropped."""
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    result = {"accuracy": _percent(predictions, labels)}
    if groups is not None:
        groups = list(groups)
        for group in sorted({g for g in groups if g is not None}):
            picked = [i for i, g in enumerate(groups) if g == group]
            result[f"accuracy_{group}"] = _percent([predictions[i] for i in picked], [labels[i] for i in picked])
    return result


def _percent(predictions: Sequence[int], labels: Sequence[int | None]) -> float:
    if not labels:
        return 0.0
    return 100.0 * sum(int(p == y) for p, y in zip(predictions, labels)) / len(labels)


def read_gap_system_tsv(path: str) -> dict[str, tuple[bool, bool]]:
    """Read a GAP submission (``ID<TAB>A-coref<TAB>B-coref``, no header) as written by the coref CLI."""
    system = {}
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3 or any(f.upper() not in ("TRUE", "FALSE") for f in fields[1:]):
                raise CorefBertError("expected ID<TAB>TRUE|FALSE<TAB>TRUE|FALSE", path=path, position=line_no)
            system[fields[0]] = (fields[1].upper() == "TRUE", fields[2].upper() == "TRUE")
    return system
