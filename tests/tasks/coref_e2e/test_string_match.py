"""The string-match rule baseline (``corefbert/tasks/coref_e2e/string_match.py``): identical pronouns and identical
capitalised names linked, scored as the end-to-end figures are."""

from __future__ import annotations

import pytest
import yaml
from helpers import FIXTURES, ROOT, shared_data

from corefbert.metrics.coref_metrics import coref_scores
from corefbert.tasks.base import held_out_split
from corefbert.tasks.coref_e2e.string_match import rule_mentions, string_match_clusters, string_match_scores
from corefbert.text.conll import ConllDocument, read_conll


def _document(*sentences: str) -> ConllDocument:
    words = [sentence.split() for sentence in sentences]
    return ConllDocument("d_0", "d", "0", words, [["-"] * len(s) for s in words], "", [])


def test_pronouns_and_maximal_capitalised_runs_are_the_mentions():
    document = _document('" Mr. Darcy is here , " she said .', "She saw Mr. Darcy and Elizabeth Bennet .",
                         "Elizabeth saw him . He left her .")
    words = document.words
    assert [" ".join(words[a:b + 1]) for a, b in rule_mentions(document)] == [
        "Mr. Darcy", "she", "She", "Mr. Darcy", "Elizabeth Bennet", "Elizabeth", "him", "He", "her"]
    clusters = [[" ".join(words[a:b + 1]) for a, b in c] for c in string_match_clusters(document)]
    # Same words once lower-cased: "she"/"She" and the two "Mr. Darcy"; "Elizabeth" is not "Elizabeth Bennet",
    # and a mention with no twin (him, He, her) is no cluster.
    assert clusters == [["Mr. Darcy", "Mr. Darcy"], ["she", "She"]]


def test_the_rule_is_scored_against_gold_of_at_least_two_mentions():
    (document,) = [d for d in read_conll(str(FIXTURES / "coref_e2e" / "two_docs.conll")) if d.name == "anna_and_tom"]
    gold = [[c for c in document.clusters if len(c) > 1]]
    assert string_match_scores([document]) == coref_scores([string_match_clusters(document)], gold)
    assert string_match_scores(str(FIXTURES / "coref_e2e" / "two_docs.conll")) == coref_scores(
        [string_match_clusters(d) for d in read_conll(str(FIXTURES / "coref_e2e" / "two_docs.conll"))],
        [[c for c in d.clusters if len(c) > 1] for d in read_conll(str(FIXTURES / "coref_e2e" / "two_docs.conll"))])


@pytest.mark.shared_data
def test_the_rule_scores_the_docs_quote_on_both_litbank_splits():
    """The figures beside every end-to-end result (README, docs/guides/coref_e2e.md and resolve.md)."""
    litbank = str(shared_data("conll2012", "litbank") / "*.conll")
    shared_data("litbank_more")
    quick = held_out_split(read_conll(litbank), 15, 42)[1]  # the README's quick command: 15%, --split_seed 42
    assert sorted(d.name for d in quick) == ["113_the_secret_garden_brat", "1342_pride_and_prejudice_brat",
                                             "158_emma_brat"]
    config = yaml.safe_load((ROOT / "docs" / "guides" / "coref_e2e_litbank90.yaml").read_text(encoding="utf-8"))
    for documents, avg in ((quick, 38.6), (read_conll([str(ROOT / f) for f in config["test_file"]]), 38.4)):
        assert round(string_match_scores(documents)["avg_f1"], 1) == avg
