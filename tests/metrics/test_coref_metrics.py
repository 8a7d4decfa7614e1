"""corefbert.metrics.coref_metrics: hand-computed cases, the literal reference, scorch, and the alignment."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from corefbert.errors import CorefBertError
from corefbert.metrics.coref_metrics import aligned_total, coref_scores

# Pradhan et al. (2014), figure 1: key {a b c} {d e f g}; response {a b} {c d} {f g h i}.
KEY = [["a", "b", "c"], ["d", "e", "f", "g"]]
RESPONSE = [["a", "b"], ["c", "d"], ["f", "g", "h", "i"]]


def expected_figure_1() -> dict[str, float]:
    """The example worked by hand from the definitions (percent)."""
    muc_r, muc_p = ((3 - 2) + (4 - 3)) / ((3 - 1) + (4 - 1)), ((2 - 1) + (2 - 2) + (4 - 3)) / (1 + 1 + 3)
    b3_r = (2 ** 2 / 3 + 1 / 3 + 1 / 4 + 2 ** 2 / 4) / 7  # a, b | c | d | f, g of the 7 key mentions
    b3_p = (2 ** 2 / 2 + 1 / 2 + 1 / 2 + 2 ** 2 / 4) / 8  # of the 8 response mentions
    aligned = 2 * 2 / (3 + 2) + 2 * 2 / (4 + 4)  # {abc}-{ab} 0.8 and {defg}-{fghi} 0.5
    ceafe_r, ceafe_p = aligned / 2, aligned / 3
    out = {}
    for name, (p, r) in {"muc": (muc_p, muc_r), "b3": (b3_p, b3_r), "ceafe": (ceafe_p, ceafe_r)}.items():
        out |= {f"{name}_p": 100 * p, f"{name}_r": 100 * r, f"{name}_f1": 100 * 2 * p * r / (p + r)}
    out["avg_f1"] = (out["muc_f1"] + out["b3_f1"] + out["ceafe_f1"]) / 3
    return out


@pytest.mark.parametrize("literal", [False, True], ids=["fast", "literal"])
def test_pradhan_2014_figure_1(literal):
    scores = coref_scores([RESPONSE], [KEY], literal=literal)
    expected = expected_figure_1()
    assert scores.keys() == expected.keys()
    for name, value in expected.items():
        assert scores[name] == pytest.approx(value), name
    # The rounded values the worked example gives.
    assert round(scores["muc_f1"], 2) == 40.0 and round(scores["ceafe_r"], 2) == 65.0
    assert round(scores["b3_r"], 2) == 41.67 and round(scores["b3_p"], 2) == 50.0


def test_perfect_and_empty_and_all_singleton_responses():
    perfect = coref_scores([KEY], [KEY])
    assert all(v == pytest.approx(100.0) for v in perfect.values())
    empty = coref_scores([[]], [KEY])
    assert all(v == 0.0 for v in empty.values())
    # Every gold mention found but none linked: MUC 0 (no link), B³ precision 100 (each singleton is pure).
    singletons = coref_scores([[[m] for c in KEY for m in c]], [KEY])
    assert singletons["muc_f1"] == 0.0 and singletons["b3_p"] == pytest.approx(100.0)
    assert singletons["b3_r"] == pytest.approx(100 * (3 * 1 / 3 + 4 * 1 / 4) / 7)  # each mention: 1/|its key cluster|


def test_twinless_mentions_count_against_the_score():
    # Gold {1 2} {3 4}; response {1 2 9}: 9 is a spurious mention, 3-4 missed.
    scores = coref_scores([[[1, 2, 9]]], [[[1, 2], [3, 4]]])
    assert scores["muc_r"] == pytest.approx(50.0) and scores["muc_p"] == pytest.approx(50.0)
    assert scores["b3_r"] == pytest.approx(100 * (1 + 1 + 0 + 0) / 4)  # 1 and 2 perfect, 3 and 4 unfound
    assert scores["b3_p"] == pytest.approx(100 * (2 * (2 / 3)) / 3)
    assert scores["ceafe_r"] == pytest.approx(100 * 0.8 / 2) and scores["ceafe_p"] == pytest.approx(100 * 0.8)


def test_documents_are_summed_not_averaged():
    one = coref_scores([RESPONSE], [KEY])
    two = coref_scores([RESPONSE, [[("x", 1), ("x", 2)]]], [KEY, [[("x", 1), ("x", 2)]]])
    # Summing adds MUC numerator 1 and denominator 1 on both sides: (2+1)/(5+1).
    assert two["muc_r"] == pytest.approx(100 * 3 / 6) and two["muc_r"] != one["muc_r"]
    assert two["ceafe_r"] == pytest.approx(100 * (1.3 + 1) / 3)


def test_singletons_option_drops_single_mention_clusters():
    key, response = [["a", "b"], ["c"]], [["a", "b"], ["d"]]
    assert coref_scores([response], [key])["b3_f1"] < 100
    assert coref_scores([response], [key], keep_singletons=False)["b3_f1"] == pytest.approx(100.0)


def test_mentions_may_be_lists_and_errors_are_one_line():
    assert coref_scores([[[[0, 1], [3, 3]]]], [[[(0, 1), (3, 3)]]])["avg_f1"] == pytest.approx(100.0)
    with pytest.raises(CorefBertError, match="in clusters 0 and 1"):
        coref_scores([[["a", "b"], ["b", "c"]]], [KEY])
    with pytest.raises(CorefBertError, match="1 predicted documents for 2 gold"):
        coref_scores([RESPONSE], [KEY, KEY])


def random_clustering(rng: random.Random, mentions: list[int]) -> list[list[int]]:
    chosen = [m for m in mentions if rng.random() < 0.8]
    clusters: list[list[int]] = []
    for mention in chosen:
        if clusters and rng.random() < 0.6:
            rng.choice(clusters).append(mention)
        else:
            clusters.append([mention])
    return clusters


def random_corpus(seed: int, documents: int = 4) -> tuple[list, list]:
    rng = random.Random(seed)
    gold, predicted = [], []
    for _ in range(documents):
        mentions = list(range(rng.randint(0, 9)))
        gold.append(random_clustering(rng, mentions))
        predicted.append(random_clustering(rng, mentions + [100, 101]))
    return predicted, gold


@pytest.mark.parametrize("seed", range(30))
def test_fast_path_equals_the_literal_definitions(seed):
    predicted, gold = random_corpus(seed)
    for keep in (True, False):
        fast = coref_scores(predicted, gold, keep_singletons=keep)
        literal = coref_scores(predicted, gold, keep_singletons=keep, literal=True)
        assert fast == pytest.approx(literal)


@pytest.mark.parametrize("seed", range(30))
def test_agrees_with_scorch(seed):
    scores_module = pytest.importorskip("scorch.scores")
    predicted, gold = random_corpus(seed)
    # scorch scores one clustering; documents joined with document-tagged mentions give the scorer's sums
    # (MUC and B³ sum over clusters, CEAF's alignment never crosses documents: similarity 0).
    key = [{(d, m) for m in c} for d, doc in enumerate(gold) for c in doc]
    response = [{(d, m) for m in c} for d, doc in enumerate(predicted) for c in doc]
    ours = coref_scores(predicted, gold)
    for name, function in [("muc", scores_module.muc), ("b3", scores_module.b_cubed),
                           ("ceafe", scores_module.ceaf_e)]:
        recall, precision, f = function(key, response)
        assert (ours[f"{name}_r"], ours[f"{name}_p"], ours[f"{name}_f1"]) == pytest.approx(
            (100 * recall, 100 * precision, 100 * f)), name


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (4, 6), (6, 4), (5, 1), (0, 3)])
def test_aligned_total_matches_brute_force(shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(5):
        similarity = rng.integers(0, 9, size=shape).astype(float)
        small, large = sorted(shape)
        matrix = similarity if shape[0] <= shape[1] else similarity.T
        brute = max((sum(matrix[i, j] for i, j in enumerate(p)) for p in
                     itertools.permutations(range(large), small)), default=0.0)
        assert aligned_total(similarity) == pytest.approx(brute)


@pytest.mark.shared_data
def test_shared_litbank_perturbed_against_scorch():
    from helpers import shared_data

    from corefbert.text.conll import read_conll

    scores_module = pytest.importorskip("scorch.scores")
    documents = read_conll(str(shared_data("conll2012", "litbank") / "1*.conll"))
    gold = [d.clusters for d in documents]
    # A plausible system: every third mention lost, the two largest clusters merged, three clusters with
    # wrong spans (twinless mentions).
    predicted = []
    for clusters in gold:
        kept = [[m for i, m in enumerate(c) if i % 3 != 2] for c in clusters]
        kept = sorted((c for c in kept if c), key=len, reverse=True)
        merged = [kept[0] + kept[1]] + [[("wrong", s, e) for s, e in c] for c in kept[2:5]] + kept[5:]
        predicted.append(merged)
    ours = coref_scores(predicted, gold)
    key = [{(d, m) for m in c} for d, doc in enumerate(gold) for c in doc]
    response = [{(d, m) for m in c} for d, doc in enumerate(predicted) for c in doc]
    for name, function in [("muc", scores_module.muc), ("b3", scores_module.b_cubed),
                           ("ceafe", scores_module.ceaf_e)]:
        recall, precision, _ = function(key, response)
        assert (ours[f"{name}_r"], ours[f"{name}_p"]) == pytest.approx((100 * recall, 100 * precision)), name
    assert 0 < ours["avg_f1"] < 100
