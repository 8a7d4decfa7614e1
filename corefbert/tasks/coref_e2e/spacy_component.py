"""``corefbert_coref``: coreference as a spaCy pipeline component, registered through the package's
``spacy_factories`` entry point, so after ``pip install`` any English pipeline can add it::

    nlp = spacy.blank("en"); nlp.add_pipe("sentencizer")
    nlp.add_pipe("corefbert_coref", config={"model": "out/asl/best"})           # a run_coref_e2e.py folder
    doc = nlp("Anna met Tom. She gave him a letter.")
    doc._.coref_clusters    # [[Anna, She], [Tom, him]]: lists of Spans, in the order of their first mention
    doc[4]._.coref_cluster  # 0: the cluster of the smallest mention holding the token (None: no mention)
    doc._.resolved_text     # "Anna met Tom. Anna gave Tom a letter."
    docs = list(nlp.pipe(texts, batch_size=32))  # the texts of a batch share the model's forward passes

``config={"scorer": "copy", "model": COREFBERT_CKPT}`` resolves third-person pronouns zero-shot with the copy
head of any CorefBERT (or converted) checkpoint instead: the scorer comes from spaCy's ``misc`` registry as
``corefbert.scorer.copy`` (``corefbert.tasks.coref.resolver.spacy_copy_scorer``, the coreference family's
entry point), so this family never imports that one. A scorer maps a batch of Docs to each Doc's clusters as
``(first token, end token)`` spans (end exclusive).

``resolved_text`` replaces each pronoun that is a mention of a cluster by the cluster's first mention that is
not a lone pronoun (possessives stay possessive: "his" -> "Tom's"); reflexives ("himself") and pronouns of a
cluster of pronouns only are kept as written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from spacy.language import Language
from spacy.tokens import Doc, Span, Token
from spacy.util import minibatch, registry

from corefbert.errors import CorefBertError
from corefbert.tasks.coref_e2e.inference import Resolver, doc_sentences

NAME = "corefbert_coref"
TokenSpans = list[list[tuple[int, int]]]  # one Doc's clusters: (first token, end token), end exclusive
Scorer = Callable[[list[Doc]], list[TokenSpans]]

PERSONAL = {"i", "me", "we", "us", "you", "he", "him", "she", "her", "it", "they", "them"}
POSSESSIVE = {"my", "mine", "our", "ours", "your", "yours", "his", "hers", "its", "their", "theirs"}
REFLEXIVE = {"myself", "ourselves", "yourself", "yourselves", "himself", "herself", "itself", "themselves"}
PRONOUNS = PERSONAL | POSSESSIVE | REFLEXIVE
LOWER_FIRST = {"the", "a", "an", "this", "that", "these", "those"}  # capitalised only as a sentence's first word


def set_extensions() -> None:
    """Register ``Doc._.coref_clusters``, ``Doc._.resolved_text`` and ``Token._.coref_cluster`` (once)."""
    if not Doc.has_extension("coref_clusters"):
        Doc.set_extension("coref_clusters", default=None)
        Doc.set_extension("resolved_text", default=None)
        Token.set_extension("coref_cluster", default=None)


class E2EScorer:
    """A ``run_coref_e2e.py`` model folder as a scorer: spaCy's sentences and words through :class:`Resolver`."""

    def __init__(self, model: str, max_segment_words: int | None = None, overlap_words: int | None = None):
        self.resolver = Resolver(model, max_segment_words=max_segment_words, overlap_words=overlap_words)

    def __call__(self, docs: list[Doc]) -> list[TokenSpans]:
        texts = [doc_sentences(doc) for doc in docs]
        clusters = self.resolver.clusters(texts)
        out = []
        for sentences, found in zip(texts, clusters):
            token = [w[3] for s in sentences for w in s]  # word index -> token index
            out.append([[(token[s], token[e] + 1) for s, e in cluster] for cluster in found])
        return out


def build_scorer(scorer: str, model: str, max_segment_words: int | None, overlap_words: int | None) -> Scorer:
    """The scorer ``scorer`` names: ``e2e`` here, any other from spaCy's ``misc`` registry as
    ``corefbert.scorer.<name>`` (an entry point of the package)."""
    if scorer == "e2e":
        return E2EScorer(model, max_segment_words, overlap_words)
    key = f"corefbert.scorer.{scorer}"
    try:
        make = registry.misc.get(key)
    except Exception:  # catalogue's RegistryError; absent when the package's entry points are not installed
        raise CorefBertError(f"no coreference scorer {scorer!r} (spaCy registry misc: {key}); use 'e2e' or 'copy', "
                             "and install the package (pip install -e .) so its entry points are found") from None
    return make(model=model)


class CorefComponent:
    """The pipeline component: runs a scorer over batches of Docs and writes the clusters onto them."""

    def __init__(self, nlp: Language, name: str, scorer: Scorer, batch_size: int = 32):
        self.name, self.scorer, self.batch_size = name, scorer, batch_size
        set_extensions()

    def __call__(self, doc: Doc) -> Doc:
        return next(iter(self.pipe([doc], batch_size=1)))

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        for batch in minibatch(docs, size=batch_size or self.batch_size):
            for doc, clusters in zip(batch, self.scorer(batch)):
                write_clusters(doc, clusters)
                yield doc


@Language.factory(NAME, default_config={"model": None, "scorer": "e2e", "batch_size": 32,
                                        "max_segment_words": None, "overlap_words": None})
def make_coref_component(nlp: Language, name: str, model: str | None, scorer: str, batch_size: int,
                         max_segment_words: int | None, overlap_words: int | None) -> CorefComponent:
    """``nlp.add_pipe("corefbert_coref", config={"model": DIR, "scorer": "e2e" | "copy"})``; ``batch_size``:
    Docs per scorer call when ``nlp.pipe`` gives none; ``max_segment_words``/``overlap_words``: the windows
    of a long text (default: the model's setting, a quarter of it)."""
    if not model:
        raise CorefBertError(f"{NAME} needs a model: nlp.add_pipe({NAME!r}, config={{'model': 'out/asl/best'}})")
    return CorefComponent(nlp, name, build_scorer(scorer, model, max_segment_words, overlap_words), batch_size)


def write_clusters(doc: Doc, clusters: TokenSpans) -> None:
    """Set the extensions of ``doc`` from its clusters (token spans, end exclusive)."""
    spans = [[Span(doc, s, e) for s, e in sorted(cluster)] for cluster in clusters if cluster]
    spans.sort(key=lambda c: (c[0].start, c[0].end))
    doc._.coref_clusters = spans
    width: dict[int, int] = {}
    for number, cluster in enumerate(spans):
        for span in cluster:
            for token in span:  # the smallest mention holding the token names its cluster
                if token.i not in width or len(span) < width[token.i]:
                    width[token.i] = len(span)
                    token._.coref_cluster = number
    doc._.resolved_text = resolved_text(doc, spans)


def is_possessive(token: Token) -> bool:
    """``his``, ``its``, ``their`` ...; ``her`` when tagged ``PRP$``, or without tags when a word follows it."""
    lower = token.lower_
    if lower != "her":
        return lower in POSSESSIVE
    if token.tag_:
        return token.tag_ == "PRP$"
    follower = token.nbor(1) if token.i + 1 < len(token.doc) else None
    return follower is not None and follower.is_alpha and follower.lower_ not in PRONOUNS | LOWER_FIRST | {
        "to", "and", "or", "but", "in", "on", "at", "with", "for", "from", "of", "by", "as", "about", "into"}


def resolved_text(doc: Doc, clusters: list[list[Span]]) -> str:
    """The text of ``doc`` with each pronoun mention replaced by its cluster's first mention that is not a lone
    pronoun ("Tom's" for a possessive); everything else, whitespace included, as written."""
    replacement: dict[int, str] = {}
    for cluster in clusters:
        name = next((span for span in cluster if not (len(span) == 1 and span[0].lower_ in PRONOUNS)), None)
        if name is None:
            continue
        text = name.text
        if name[0].is_sent_start and name[0].lower_ in LOWER_FIRST:
            text = text[0].lower() + text[1:]
        for span in cluster:
            token = span[0]
            if len(span) != 1 or token.lower_ not in PERSONAL | POSSESSIVE or token.i in replacement:
                continue
            word = text
            if is_possessive(token) and not word.endswith(("'s", "’s")):
                word += "'" if word.endswith("s") and name[-1].tag_ in ("NNS", "NNPS") else "'s"
            if token.is_sent_start or token.text.isupper() and len(token.text) > 1:
                word = word[0].upper() + word[1:]
            replacement[token.i] = word
    return "".join(replacement.get(t.i, t.text) + t.whitespace_ for t in doc)
