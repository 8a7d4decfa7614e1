"""Beyond the paper: bAbI clusters whose pronouns a CorefBERT checkpoint's copy head resolves.

Names and nouns are linked by exact match (the paper's setting, :func:`.data.entity_mentions`); each
pronoun (he, she, they, ...) joins the entity of its top-scoring earlier entity mention under the MRP copy
head (the pronoun masked, every earlier mention a candidate; the scoring of
:func:`corefbert.tasks.coref.copy_scoring.copy_view`). Nouns keep exact match: linking each to its top
earlier mention would chain a whole story into one cluster. One encoder pass per pronoun (tasks 11, 13).
"""

from __future__ import annotations

from corefbert.pronouns import REFLEXIVE, THIRD_PERSON, gender
from corefbert.tasks.babi.data import entity_mentions, groups_to_ids
from corefbert.tasks.coref.copy_scoring import CopyHeadScorer, copy_view
from corefbert.tasks.coref.readers import PronounExample
from corefbert.text.tokenizers import load_tokenizer

#: The pronouns the copy head links: third person of people (bAbI's stories say "it" of no one), not reflexive.
PRONOUNS = frozenset(w for w in THIRD_PERSON if gender(w) != "neuter") - REFLEXIVE


class CopyHeadLinker:
    """A CorefBERT checkpoint's encoder, copy vector and tokenizer, loaded once."""

    def __init__(self, model_name_or_path: str, max_length: int = 512):
        self.model = CopyHeadScorer.from_pretrained(model_name_or_path).eval()
        self.tokenizer = load_tokenizer(model_name_or_path)
        self.max_length = max_length

    def scores(self, text: str, pronoun: tuple[int, int], candidates: list[tuple[int, int]]) -> list[float]:
        """log Pr(copy) of each candidate span for the masked pronoun span (higher: more likely the referent)."""
        names = [text[s:e] for s, e in candidates]
        example = PronounExample("babi", text, pronoun[0], pronoun[1], names, None, [[span] for span in candidates],
                                 candidate_match=["exact"] * len(candidates))
        return copy_view(self.model, self.tokenizer, example, self.max_length).scores


def copy_head_clusters(linker: CopyHeadLinker, text: str, tokens: list[tuple[str, int, int]],
                       max_clusters: int) -> list[int]:
    """Cluster id per token of ``text`` (``tokens`` from :func:`corefbert.tasks.babi.data.tokenize`), 0: none."""
    originals = [text[s:e] for _, s, e in tokens]
    groups = entity_mentions(tokens, originals)
    mention_entity = {i: word for word, positions in groups.items() for i in positions}
    for i, (token, start, end) in enumerate(tokens):
        earlier = sorted(p for p in mention_entity if p < i)
        if token not in PRONOUNS or not earlier:
            continue
        scores = linker.scores(text, (start, end), [(tokens[p][1], tokens[p][2]) for p in earlier])
        best = max(range(len(earlier)), key=lambda k: scores[k])  # ties: the first (earliest) mention
        groups[mention_entity[earlier[best]]].append(i)
    return groups_to_ids(list(groups.values()), len(tokens), max_clusters)
