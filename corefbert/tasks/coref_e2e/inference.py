"""A trained end-to-end coreference model on spaCy's words and sentences: batches of texts, long texts in
overlapping windows, clusters merged across windows.

What a forward pass holds is bounded by the model's settings, never by the text (docs/guides/coref_e2e.md, "Long
documents"): sentences longer than ``max_sentence_words`` are read as pieces; a text is read in **windows** of
whole sentences of at most ``max_segment_words`` words, consecutive windows sharing ``overlap_words`` words
(whole sentences; 0: they only touch); the windows of a batch of texts go through the model in groups of at
most ``max_segment_words`` words, so a batch of short texts costs one encoder call.

Across windows, clusters are merged through the mentions they share (a union-find over spans): the merge can
only join clusters, never split one. Batching is exact (:meth:`Resolver._word_vectors`;
``test_spacy_component.py`` checks that batched and one-at-a-time give the same clusters).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import accumulate

import torch

from corefbert.errors import CorefBertError, out_of_memory_as_error
from corefbert.tasks.coref_e2e.documents import featurize, sentence_pieces
from corefbert.tasks.coref_e2e.encoders import window_word_states
from corefbert.tasks.coref_e2e.model import load_model
from corefbert.tasks.coref_e2e.span_ranking import predict_clusters
from corefbert.text.conll import ConllDocument
from corefbert.text.spans import Cluster, Mention

Word = tuple  # (text, start character, end character, token index): only the text is read here
# Encoders whose windows can share one call exactly; LSL and ASL read the previous sentence, which in a stack
# of windows would be another window's.
BATCHED_ENCODERS = ("bilstm", "bert")


def doc_sentences(doc, offset: int = 0) -> list[list[Word]]:
    """spaCy's sentences of ``doc`` as words ``(text, start, end, token index)``, character offsets plus
    ``offset`` (end exclusive); whitespace tokens are no words, and a sentence of whitespace is left out."""
    if len(doc) and not doc.has_annotation("SENT_START"):
        raise CorefBertError("the Doc has no sentence boundaries: put a sentence splitter before corefbert_coref "
                             "(nlp.add_pipe('sentencizer'), or a pipeline with a parser or senter)")
    sentences = [[(t.text, t.idx + offset, t.idx + len(t) + offset, t.i) for t in sentence if not t.is_space]
                 for sentence in (doc.sents if len(doc) else ())]
    return [words for words in sentences if words]


def sentence_windows(lengths: Sequence[int], max_words: int, overlap_words: int) -> list[tuple[int, int]]:
    """``(first sentence, end sentence)`` of each window over sentences of ``lengths`` words: each window takes
    whole sentences up to ``max_words`` words (at least one sentence), and the next one starts as far back as
    keeps at most ``overlap_words`` words of it shared, always at least one sentence further on."""
    windows: list[tuple[int, int]] = []
    first = 0
    while first < len(lengths):
        end, size = first, 0
        while end < len(lengths) and (end == first or size + lengths[end] <= max_words):
            size += lengths[end]
            end += 1
        windows.append((first, end))
        if end == len(lengths):
            break
        start, shared = end, 0
        while start - 1 > first and shared + lengths[start - 1] <= overlap_words:
            shared += lengths[start - 1]
            start -= 1
        first = start
    return windows


class ClusterMerger:
    """Clusters of several windows of one text joined through their shared mentions (union-find on spans)."""

    def __init__(self):
        self.parent: dict[Mention, Mention] = {}

    def _root(self, span: Mention) -> Mention:
        root = self.parent.setdefault(span, span)
        while root != self.parent[root]:
            root = self.parent[root]
        while span != root:  # path compression: later finds are one hop
            self.parent[span], span = root, self.parent[span]
        return root

    def add(self, clusters: Iterable[Cluster]) -> None:
        """Clusters of one window in the text's word indices."""
        for cluster in clusters:
            first = self._root(tuple(cluster[0]))
            for span in cluster[1:]:
                root = self._root(tuple(span))
                if root != first:
                    self.parent[root] = first

    def clusters(self) -> list[Cluster]:
        """Every cluster, mentions sorted, clusters in the order of their first mention."""
        groups: dict[Mention, Cluster] = {}
        for span in self.parent:
            groups.setdefault(self._root(span), []).append(span)
        return sorted((sorted(group) for group in groups.values()), key=lambda c: c[0])


class Resolver:
    """A trained end-to-end coreference model folder, loaded once: :meth:`clusters` turns texts given as
    sentences of words (spaCy's, from the component or ``resolve``) into clusters of word spans.
    ``overlap_words`` defaults to a quarter of a window."""

    def __init__(self, model_dir: str, max_sentence_words: int | None = None, max_segment_words: int | None = None,
                 overlap_words: int | None = None):
        self.model, self.vocab, self.tokenizer = load_model(model_dir)  # in eval mode
        config = self.model.config
        # None means the model's setting; 0 is refused below, never read as "not given"
        self.max_sentence_words = config.max_sentence_words if max_sentence_words is None else max_sentence_words
        self.max_segment_words = config.max_segment_words if max_segment_words is None else max_segment_words
        self.overlap_words = self.max_segment_words // 4 if overlap_words is None else overlap_words
        for name, least in (("max_sentence_words", 1), ("max_segment_words", 1), ("overlap_words", 0)):
            if getattr(self, name) < least:
                raise CorefBertError(f"{name} must be at least {least} (got {getattr(self, name)})")

    def clusters(self, texts: Sequence[Sequence[Sequence[Word]]]) -> list[list[Cluster]]:
        """``texts``: each a list of sentences, each a list of words (tuples whose first item is the word) ->
        each text's clusters as ``(first word, last word)`` spans over its words in order (inclusive)."""
        windows: list[tuple[int, int, list]] = []  # (text, first word, sentences)
        for index, sentences in enumerate(texts):
            pieces = [p for p in sentence_pieces(sentences, min(self.max_sentence_words, self.max_segment_words))
                      if p]
            starts = [0, *accumulate(len(p) for p in pieces)]  # each piece's first word
            for first, end in sentence_windows([len(p) for p in pieces], self.max_segment_words,
                                               self.overlap_words):
                windows.append((index, starts[first], pieces[first:end]))
        merged = [ClusterMerger() for _ in texts]
        group, size = [], 0
        for window in windows + [None]:  # None flushes the last group
            words = sum(len(s) for s in window[2]) if window else 0
            if group and (window is None or size + words > self.max_segment_words):
                with out_of_memory_as_error(
                        f"resolving a window of up to {self.max_segment_words} words",
                        f"lower --max_segment_words (resolve; the spaCy component's max_segment_words), now "
                        f"{self.max_segment_words}"):
                    predicted = self._predict([w[2] for w in group])
                for (index, offset, _), clusters in zip(group, predicted):
                    merged[index].add([[(s + offset, e + offset) for s, e in c] for c in clusters])
                group, size = [], 0
            if window:
                group.append(window)
                size += words
        return [m.clusters() for m in merged]

    def _predict(self, windows: list[list]) -> list[list[Cluster]]:
        """The clusters of each window (sentences of words) in its own word indices, the encoder batched."""
        features = []
        for sentences in windows:
            words = [[w[0] for w in s] for s in sentences]
            document = ConllDocument("text_0", "text", "0", words, [["-"] * len(s) for s in words], "", [])
            features.append(featurize(document, self.model.config, self.vocab, self.tokenizer))
        with torch.no_grad():  # the ranker's output without gold: exactly predict_clusters' arguments
            return [predict_clusters(**self.model.ranker(context, head_inputs, f["sentence_of_word"],
                                                         f["speaker_ids"], f["genre"]))
                    for f, (context, head_inputs) in zip(features, self._word_vectors(features))]

    def _word_vectors(self, features: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(x*_t [words, Dc], x_t [words, Dx]) of each window, as ``E2ECorefModel.word_vectors`` gives them one
        window at a time (eval mode: dropout is the identity): the transformer reads every window in one call,
        the per-sentence BiLSTM every sentence; LSL and ASL (:data:`BATCHED_ENCODERS`) window by window."""
        model = self.model
        if model.kind not in BATCHED_ENCODERS or len(features) == 1 and not model.config.reads_subwords:
            return [model.word_vectors(f) for f in features]
        if model.config.reads_subwords:
            # Windows are padded to max_seq_length; the stack is cut to its longest window (padding is masked
            # out of attention, so the states are the same), which a short text would otherwise pay for.
            width = features[0]["input_ids"].shape[1]
            used = max(int(f["attention_mask"].sum(dim=1).max()) for f in features)
            positions, shift = [], 0
            for f in features:  # each window's word positions index the stacked, cut windows
                window, offset = f["word_positions"] // width, f["word_positions"] % width
                positions.append((window + shift) * used + offset)
                shift += f["input_ids"].shape[0]
            # One call (shift: every window): without autograd nothing is kept per window, and the group is
            # bounded by max_segment_words.
            states = window_word_states(model.encoder, torch.cat([f["input_ids"][:, :used] for f in features]),
                                        torch.cat([f["attention_mask"][:, :used] for f in features]),
                                        torch.cat(positions), shift)  # [words of every window, hidden]
            return [(p, p) for p in states.split([len(p) for p in positions])]
        # bilstm: word representations per window (the character CNN pads to a window's longest word, so
        # they are computed where that width is the same as one at a time), the BiLSTM over every sentence.
        inputs = [model.words(f["word_ids"], f["char_ids"]) for f in features]  # each [sentences, len, Dx]
        longest = max(x.shape[1] for x in inputs)
        stacked = torch.cat([torch.nn.functional.pad(x, (0, 0, 0, longest - x.shape[1])) for x in inputs])
        lengths = torch.cat([f["sentence_lengths"] for f in features])
        context = model.encoder(stacked, lengths)  # [all sentences, longest, Dc]
        present = torch.arange(longest)[None, :] < lengths[:, None]
        rows = [x.shape[0] for x in inputs]
        parts = zip(context.split(rows), stacked.split(rows), present.split(rows))
        return [(c[p], x[p]) for c, x, p in parts]
