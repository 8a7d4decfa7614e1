"""``corefbert_coref``: coreference as a spaCy pipeline component, registered through the package's
``spacy_factories`` entry point, so after ``pip install`` any English pipeline can add it::

    nlp = spacy.blank("en"); nlp.add_pipe("sentencizer")
    nlp.add_pipe("corefbert_coref", config={"model": "out/asl/best"})           # a run_coref_e2e.py folder
    doc = nlp("Anna met Tom. She gave him a letter.")
    doc.spans["coref_clusters_1"]  # [Anna, She]: one span group per cluster, numbered from 1
    doc._.coref_clusters    # [[Anna, She], [Tom, him]]: lists of Spans, in the order of their first mention
    doc[4]._.coref_cluster  # 0: the cluster of the smallest mention holding the token (None: no mention)
    doc._.resolved_text     # "Anna met Tom. Anna gave Tom a letter."
    docs = list(nlp.pipe(texts, batch_size=32))  # the texts of a batch share the model's forward passes

The clusters are span groups ``doc.spans["coref_clusters_<n>"]`` (n = 1, 2, ... in the order of first
mentions: spacy-experimental's convention), which spaCy serializes itself (``n_process``, ``DocBin``,
``pickle``, ``Doc.to_json``); the three extensions are getters of those groups, never stored values, so a
second run (which replaces every group) leaves nothing stale (docs/guides/resolve.md, section 5).

``config={"scorer": "copy", "model": COREFBERT_CKPT}`` resolves third-person pronouns zero-shot with the copy
head instead, a scorer from spaCy's ``misc`` registry (``corefbert.scorer.copy``), so this family never
imports that one. A scorer maps a batch of Docs to each Doc's clusters of token mentions (:data:`Scorer`).
A saved pipeline carries a copy of its model folder (:meth:`CorefComponent.to_disk`).
"""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from spacy.language import Language
from spacy.tokens import Doc, Span, Token
from spacy.util import minibatch, registry

from corefbert.errors import CorefBertError
from corefbert.pronouns import PLURAL_POSSESSIVE, PRONOUNS, REFLEXIVE, is_possessive
from corefbert.tasks.coref_e2e.inference import Resolver, doc_sentences
from corefbert.text.durable import replace_folder
from corefbert.text.spans import Cluster
from corefbert.training.model_folders import check_model_folder

NAME = "corefbert_coref"
MODEL_FOLDER = "model"  # the model's copy inside a saved pipeline: <pipeline>/corefbert_coref/model
CLUSTER_PREFIX = "coref_clusters"  # doc.spans["coref_clusters_1"], ...: spacy-experimental's default prefix
Scorer = Callable[[list[Doc]], list[list[Cluster]]]  # each Doc's clusters of token mentions, ends inclusive

LOWER_FIRST = {"the", "a", "an", "this", "that", "these", "those"}  # capitalised only as a sentence's first word


def cluster_keys(doc: Doc) -> list[str]:
    """The keys of ``doc.spans`` that hold coreference clusters, ``coref_clusters_<n>``, in the order of n (as
    numbers: ``_10`` after ``_9``)."""
    numbered = []
    for key in doc.spans:
        prefix, _, number = key.rpartition("_")
        if prefix == CLUSTER_PREFIX and number.isascii() and number.isdigit():
            numbered.append((int(number), key))
    return [key for _, key in sorted(numbered)]


def doc_clusters(doc: Doc) -> list[list[Span]]:
    """``Doc._.coref_clusters``: the clusters of ``doc.spans`` as lists of Spans (empty groups left out)."""
    return [list(doc.spans[key]) for key in cluster_keys(doc) if len(doc.spans[key])]


def token_clusters(clusters: list[list[Span]], length: int) -> list[int | None]:
    """For each of ``length`` tokens, the index in ``clusters`` of the smallest mention holding it (the first
    such cluster on a tie), or None."""
    number: list[int | None] = [None] * length
    width = [0] * length
    for index, cluster in enumerate(clusters):
        for span in cluster:
            for i in range(span.start, span.end):
                if number[i] is None or len(span) < width[i]:
                    number[i], width[i] = index, len(span)
    return number


# Doc -> (its number of span groups, token_clusters of its clusters): Token._.coref_cluster is asked per token,
# and each answer would otherwise walk every mention. Held weakly (never outlives its Doc, never serialized);
# write_clusters drops a Doc's entry, and a change in the number of span groups has it computed again.
_TOKEN_CLUSTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def token_cluster(token: Token) -> int | None:
    """``Token._.coref_cluster``: the index in ``doc._.coref_clusters`` of the smallest mention holding the
    token, or None (a mention appended to a group by hand is seen after :func:`forget_token_clusters`)."""
    doc = token.doc
    groups = len(doc.spans)
    cached = _TOKEN_CLUSTERS.get(doc)
    if cached is None or cached[0] != groups:
        cached = (groups, token_clusters(doc_clusters(doc), len(doc)))
        _TOKEN_CLUSTERS[doc] = cached
    return cached[1][token.i]


def forget_token_clusters(doc: Doc) -> None:
    """Make ``Token._.coref_cluster`` read ``doc``'s cluster groups afresh (after editing them by hand)."""
    _TOKEN_CLUSTERS.pop(doc, None)


def doc_resolved_text(doc: Doc) -> str:
    """``Doc._.resolved_text``: :func:`resolved_text` of the Doc's clusters (its text where it has none)."""
    return resolved_text(doc, doc_clusters(doc))


EXTENSIONS = ((Doc, "coref_clusters", doc_clusters), (Doc, "resolved_text", doc_resolved_text),
              (Token, "coref_cluster", token_cluster))


def set_extensions() -> None:
    """Register ``Doc._.coref_clusters``, ``Doc._.resolved_text`` and ``Token._.coref_cluster`` as getters of
    the Doc's ``coref_clusters_<n>`` span groups (again where another package registered those names)."""
    for owner, name, getter in EXTENSIONS:
        if not owner.has_extension(name) or owner.get_extension(name)[2] is not getter:
            owner.set_extension(name, getter=getter, force=True)


class E2EScorer:
    """A ``run_coref_e2e.py`` model folder as a scorer: spaCy's sentences and words through :class:`Resolver`."""

    def __init__(self, model: str, max_segment_words: int | None = None, overlap_words: int | None = None):
        check_model_folder(model)  # weights kept only as a pickle: one line before anything is read
        self.resolver = Resolver(model, max_segment_words=max_segment_words, overlap_words=overlap_words)

    def __call__(self, docs: list[Doc]) -> list[list[Cluster]]:
        texts = [doc_sentences(doc) for doc in docs]
        tokens = [[w[3] for s in sentences for w in s] for sentences in texts]  # word index -> token index
        return [[[(token[s], token[e]) for s, e in cluster] for cluster in found]
                for token, found in zip(tokens, self.resolver.clusters(texts))]


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


# What each whole-number setting means, for the line that refuses a value: (least value, meaning, example).
WHOLE_NUMBERS = {
    "batch_size": (1, "Docs per model call", 32),
    "max_segment_words": (1, "words per window of a long text; leave it out for the model's own setting", 1000),
    "overlap_words": (0, "words consecutive windows share; 0 for windows that only touch, left out a quarter "
                         "window", 250),
}


def check_whole_number(name: str, value: object) -> int:
    """``value`` if it is a whole number of at least ``WHOLE_NUMBERS[name]``'s least value, else one line."""
    least, meaning, example = WHOLE_NUMBERS[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise CorefBertError(f"{NAME} config {name} must be a whole number of at least {least} (got {value!r}): "
                             f"{meaning}; e.g. config={{{name!r}: {example}}}")
    return value


def check_config(model: object, scorer: object, batch_size: object, max_segment_words: object,
                 overlap_words: object) -> str:
    """The model path of a valid config; one CorefBertError line for the first value the component cannot use,
    before any model loads."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not model or not isinstance(model, str):
        raise CorefBertError(f"{NAME} needs a model (got {model!r}): "
                             f"nlp.add_pipe({NAME!r}, config={{'model': 'out/asl/best'}})")
    if not scorer or not isinstance(scorer, str):
        raise CorefBertError(f"{NAME} config scorer must name a scorer (got {scorer!r}): 'e2e' for a folder "
                             "run_coref_e2e.py wrote, 'copy' for a CorefBERT checkpoint")
    check_whole_number("batch_size", batch_size)
    for name, value in (("max_segment_words", max_segment_words), ("overlap_words", overlap_words)):
        if value is None:
            continue
        if scorer != "e2e":
            raise CorefBertError(f"{NAME} config {name} applies to scorer 'e2e' only (got {value!r} with scorer "
                                 f"{scorer!r}, which reads each pronoun's sentence and the two before); leave it out")
        check_whole_number(name, value)
    return model


class CorefComponent:
    """The pipeline component: runs a scorer over batches of Docs and writes the clusters onto them. ``model``
    is the folder the scorer reads; ``scorer`` None defers building it: from the saved copy when spaCy loads
    the pipeline folder (:meth:`from_disk`), else from ``model`` at the first Doc."""

    def __init__(self, nlp: Language, name: str, scorer: Scorer | None, batch_size: int = 32,
                 model: str | None = None, kind: str = "e2e", max_segment_words: int | None = None,
                 overlap_words: int | None = None):
        self.name, self._scorer, self.model = name, scorer, model
        self.kind, self.windows = kind, (max_segment_words, overlap_words)
        self.batch_size = check_whole_number("batch_size", batch_size)
        set_extensions()

    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:
            self._scorer = build_scorer(self.kind, self.model, *self.windows)
        return self._scorer

    def __call__(self, doc: Doc) -> Doc:
        return next(iter(self.pipe([doc], batch_size=1)))

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        size = self.batch_size if batch_size is None else check_whole_number("batch_size", batch_size)
        for batch in minibatch(docs, size=size):
            for doc, clusters in zip(batch, self.scorer(batch), strict=True):
                write_clusters(doc, clusters)
                yield doc

    def to_disk(self, path: str | os.PathLike, *, exclude: Iterable[str] = ()) -> None:
        """Copy the model folder into ``path/model`` (``nlp.to_disk`` passes ``<pipeline>/corefbert_coref``); a
        scorer without a local folder (a function, a Hub id) saves nothing and is rebuilt from the config."""
        target = Path(path) / MODEL_FOLDER
        Path(path).mkdir(parents=True, exist_ok=True)
        if self.model is None or not os.path.isdir(self.model) or "model" in exclude:
            return
        if target.exists() and os.path.samefile(self.model, target):
            return  # saved back into the folder it was loaded from
        partial = target.with_name(MODEL_FOLDER + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(self.model, partial)
        replace_folder(partial, target)

    def from_disk(self, path: str | os.PathLike, *, exclude: Iterable[str] = ()) -> CorefComponent:
        """Read the model from the copy :meth:`to_disk` saved in ``path``, where there is one."""
        saved = Path(path) / MODEL_FOLDER
        if saved.is_dir() and "model" not in exclude:
            self.model = str(saved)
            self._scorer = build_scorer(self.kind, self.model, *self.windows)
        return self


@Language.factory(NAME, default_config={"model": None, "scorer": "e2e", "batch_size": 32,
                                        "max_segment_words": None, "overlap_words": None})
def make_coref_component(nlp: Language, name: str, model: str | None, scorer: str, batch_size: int,
                         max_segment_words: int | None, overlap_words: int | None) -> CorefComponent:
    """``nlp.add_pipe("corefbert_coref", config={"model": DIR, "scorer": "e2e" | "copy"})``, every value
    checked before the model loads (docs/guides/resolve.md, section 5)."""
    model = check_config(model, scorer, batch_size, max_segment_words, overlap_words)
    # spacy.load(pipeline folder) builds the component from the saved config, whose model path (often relative)
    # may not exist where it runs: the saved copy comes in from_disk right after, so a missing one waits.
    built = build_scorer(scorer, model, max_segment_words, overlap_words) if os.path.exists(model) else None
    return CorefComponent(nlp, name, built, batch_size, model, scorer, max_segment_words, overlap_words)


def write_clusters(doc: Doc, clusters: list[Cluster]) -> None:
    """Write ``doc``'s clusters (``(first token, last token)`` mentions) as the span groups
    ``coref_clusters_1``, ... by first mention, replacing every ``coref_clusters_<n>`` an earlier run left."""
    set_extensions()  # the getters that read the groups back, also where no component was built
    # The one place a mention becomes a spaCy span, whose end is exclusive.
    spans = [[Span(doc, first, last + 1) for first, last in sorted(set(cluster))] for cluster in clusters if cluster]
    spans.sort(key=lambda c: (c[0].start, c[0].end))
    for key in cluster_keys(doc):
        del doc.spans[key]
    for number, cluster in enumerate(spans, 1):
        doc.spans[f"{CLUSTER_PREFIX}_{number}"] = cluster
    forget_token_clusters(doc)


def possessive(name: str, pronoun: Token, last: Token) -> str:
    """``name`` standing for the possessive ``pronoun``: a bare apostrophe after an s-final plural ("the dogs'"
    for "their": the pronoun is plural, or the tagger says the name's last word, ``last``, is), else "'s"."""
    if name.endswith(("'s", "’s")):
        return name
    plural = pronoun.lower_ in PLURAL_POSSESSIVE or last.tag_ in ("NNS", "NNPS")
    return name + ("'" if name.endswith("s") and plural else "'s")


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
            if len(span) != 1 or token.lower_ not in PRONOUNS - REFLEXIVE or token.i in replacement:
                continue
            follower = token.nbor(1).text if token.i + 1 < len(doc) else None  # decides where untagged
            owned = is_possessive(token.text, follower, token.tag_ or None)
            word = possessive(text, token, name[-1]) if owned else text
            if token.is_sent_start or token.text.isupper() and len(token.text) > 1:
                word = word[0].upper() + word[1:]
            replacement[token.i] = word
    return "".join(replacement.get(t.i, t.text) + t.whitespace_ for t in doc)
