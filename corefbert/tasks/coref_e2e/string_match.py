"""A rule baseline beside every end-to-end coreference figure: identical pronouns and identical capitalised
names linked, nothing learned (docs/guides/coref_e2e.md, "A rule to beat": a model that does not clear it has
learned little beyond it). Scored as ``--drop_singletons`` scores the model::

    python -c "from corefbert.tasks.coref_e2e.string_match import string_match_scores as s; print(s(['doc.conll']))"
"""

from __future__ import annotations

from collections import defaultdict

from corefbert.metrics.coref_metrics import coref_scores
from corefbert.pronouns import PRONOUNS
from corefbert.text.conll import ConllDocument, read_conll
from corefbert.text.spans import Cluster


def rule_mentions(document: ConllDocument) -> list[tuple[int, int]]:
    """Every pronoun (:data:`corefbert.pronouns.PRONOUNS`) and every maximal run of capitalised words of
    ``document`` (runs stop at a sentence's end and at a pronoun: "Mr. Darcy", "The Flying U"), as ``(first,
    last)`` word indices into its flat word list, in text order."""
    mentions, offset = [], 0
    for sentence in document.sentences:
        run_start = None
        for i, word in enumerate([*sentence, ""]):  # "" closes a run at the sentence's end
            pronoun = word.lower() in PRONOUNS
            capitalised = word[:1].isupper() and not pronoun
            if run_start is not None and not capitalised:
                mentions.append((offset + run_start, offset + i - 1))
                run_start = None
            if capitalised and run_start is None:
                run_start = i
            if pronoun:
                mentions.append((offset + i, offset + i))
        offset += len(sentence)
    return sorted(mentions)


def string_match_clusters(document: ConllDocument) -> list[Cluster]:
    """:func:`rule_mentions` grouped by their lower-cased words, groups of at least two mentions (the model
    never predicts singletons either), in the order of their first mention."""
    words = document.words
    groups: dict[tuple[str, ...], Cluster] = defaultdict(list)
    for first, last in rule_mentions(document):
        groups[tuple(w.lower() for w in words[first:last + 1])].append((first, last))
    return [cluster for cluster in groups.values() if len(cluster) > 1]


def string_match_scores(documents: list[ConllDocument] | str | list[str]) -> dict[str, float]:
    """MUC, B³, CEAF-φ4 and their average F1 (percent) of the rule on ``documents`` (or CoNLL files and globs)
    against their gold clusters of at least two mentions, as ``--drop_singletons`` scores the model."""
    if isinstance(documents, str) or documents and isinstance(documents[0], str):
        documents = read_conll(documents)
    gold = [[cluster for cluster in d.clusters if len(cluster) > 1] for d in documents]
    return coref_scores([string_match_clusters(d) for d in documents], gold)
