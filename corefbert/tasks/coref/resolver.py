"""Zero-shot pronoun resolution with CorefBERT's copy head, as a Python API (beyond the paper).

The scoring (mask the pronoun, score each candidate by ``log Σ_occurrences Pr(start) · Pr(end)`` under the
MRP copy head) lives in :mod:`corefbert.tasks.coref.copy_scoring`, which ``finetune/run_coref.py --zero_shot copy``
uses too; this module only turns a text, a pronoun span and candidates into that task's example.

    from corefbert.tasks.coref.resolver import CopyResolver
    resolver = CopyResolver("path/to/corefbert-checkpoint")
    resolver.resolve("The bee landed on the flower because it had pollen.", (37, 39), ["The bee", "the flower"])
    html = resolver.render_html(text, (37, 39), ["The bee", "the flower"])
"""

from __future__ import annotations

from corefbert.errors import CorefBertError
from corefbert.tasks.coref.copy_scoring import CopyHeadScorer, CopyView, copy_view, render_copy_html
from corefbert.tasks.coref.readers import PronounExample, match_candidates
from corefbert.text.tokenizers import load_tokenizer


class CopyResolver:
    """The copy-head resolver as a Python API: load once, then :meth:`resolve` or :meth:`render_html`."""

    def __init__(self, model_name_or_path: str, allow_untrained: bool = False, copy_span: str = "last_word",
                 max_length: int = 512, model: CopyHeadScorer | None = None, tokenizer=None):
        self.tokenizer = tokenizer or load_tokenizer(model_name_or_path)
        self.model = (model or CopyHeadScorer.from_pretrained(model_name_or_path, allow_untrained)).eval()
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
        """``{candidate: log Pr(copy)}`` for candidates given as strings (every occurrence in the text, found as
        :func:`corefbert.tasks.coref.readers.candidate_spans` says: case-, determiner- and possessive-tolerant,
        head-word fallback) or as ``(start, end)`` character spans. Higher is more likely the referent;
        ``-inf`` means the candidate does not occur in the text in any form."""
        view = self.view(text, pronoun_span, candidates)
        return dict(zip(view.example.candidates, view.scores))

    def render_html(self, text: str, pronoun_span: tuple[int, int], candidates=()) -> str:
        """A self-contained HTML page: the text shaded by the copy distribution of the masked pronoun."""
        return render_copy_html(self.view(text, pronoun_span, candidates))


def resolve(text: str, pronoun_span: tuple[int, int], candidates, model_name_or_path: str,
            **kwargs) -> dict[str, float]:
    """One-shot :meth:`CopyResolver.resolve` (loads the checkpoint each call; keep a CopyResolver for many)."""
    return CopyResolver(model_name_or_path, **kwargs).resolve(text, pronoun_span, candidates)
