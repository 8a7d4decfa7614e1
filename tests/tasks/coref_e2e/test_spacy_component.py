"""The ``corefbert_coref`` spaCy component: clusters on the Doc, resolved text, batches that agree with
one text at a time, long texts in overlapping windows, and the copy-head scorer."""

from __future__ import annotations

import random

import pytest
import spacy
from helpers import FIXTURES, load_cli
from spacy.tokens import Doc

from corefbert.errors import CorefBertError
from corefbert.tasks.coref.resolver import CopyResolver, SpacyCopyScorer, noun_phrases
from corefbert.tasks.coref_e2e import spacy_component
from corefbert.tasks.coref_e2e.inference import ClusterMerger, Resolver, sentence_windows
from corefbert.tasks.coref_e2e.spacy_component import resolved_text, write_clusters

FIXTURE = FIXTURES / "coref_e2e" / "two_docs.conll"
TEXT = "Anna met Tom at the station. She gave him a letter.\n\nThe letter was from her mother."
SMALL = ["--embedding_dim", "32", "--lstm_size", "32", "--ffnn_size", "32", "--char_filters", "8",
         "--max_span_width", "3", "--disable_tqdm"]


def _train(out, *argv) -> str:
    from accelerate.state import AcceleratorState, GradientState

    load_cli("finetune/run_coref_e2e.py").main(["--train_file", str(FIXTURE), "--do_train", *SMALL, *argv,
                                                 "--output_dir", str(out)])
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    return str(out / "last")


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_bert_dir):
    """Tiny trained model folders: an LSL that fits the fixture, a BiLSTM and a BERT (batched encoders)."""
    out = tmp_path_factory.mktemp("spacy_models")
    fit = ["--num_train_epochs", "20", "--learning_rate", "1e-2", "--dropout", "0", "--lexical_dropout", "0",
           "--top_span_ratio", "3", "--allow_crossing_spans"]
    return {"lsl": _train(out / "lsl", "--encoder", "lsl", *fit),
            "bilstm": _train(out / "bilstm", "--encoder", "bilstm", *fit),
            "bert": _train(out / "bert", "--encoder", "bert", "--model_name_or_path", str(tiny_bert_dir),
                           "--max_steps", "1", "--max_seq_length", "32")}


def _pipeline(model: str, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("corefbert_coref", config={"model": model, **config})
    return nlp


def _spans(doc) -> list[list[tuple[int, int]]]:
    return [[(span.start, span.end) for span in cluster] for cluster in doc._.coref_clusters]


def test_the_component_sets_clusters_tokens_and_resolved_text(models):
    doc = _pipeline(models["lsl"])(TEXT)
    clusters = doc._.coref_clusters
    assert clusters and all(len(c) >= 2 for c in clusters), "the fitted model links the fixture's pronouns"
    texts = [[span.text for span in cluster] for cluster in clusters]
    assert ["Anna", "She", "her"] in texts and ["Tom", "him"] in texts, texts
    for number, cluster in enumerate(clusters):
        for span in cluster:
            assert span.doc is doc and span[0]._.coref_cluster is not None
            assert TEXT[span.start_char:span.end_char] == span.text
        assert clusters[number][0].start == min(s.start for s in cluster)
    she = next(t for t in doc if t.text == "She")
    assert clusters[she._.coref_cluster][0].text == "Anna"
    assert doc[1]._.coref_cluster is None  # "met"
    assert doc._.resolved_text == ("Anna met Tom at the station. Anna gave Tom a letter.\n\n"
                                   "The letter was from Anna's mother.")


def _texts(count: int, seed: int = 0) -> list[str]:
    words = "Anna Tom she he her him it his the letter station mother gave met saw at from to a".split()
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 12))).capitalize() + "."
                     for _ in range(rng.randint(1, 4))]
        texts.append(" ".join(sentences))
    return texts


@pytest.mark.parametrize("encoder", ["lsl", "bilstm", "bert"])
def test_nlp_pipe_gives_the_clusters_of_one_text_at_a_time(models, encoder):
    nlp = _pipeline(models[encoder])
    texts = _texts(100)
    batched = [_spans(doc) for doc in nlp.pipe(texts, batch_size=32)]
    one_by_one = [_spans(nlp(text)) for text in texts]
    assert batched == one_by_one
    assert sum(map(len, batched)) > 10, "the comparison covers clusters, not only empty results"


@pytest.mark.parametrize("encoder, calls", [("bilstm", 4), ("bert", 4), ("lsl", 100)])
def test_batched_encoders_read_a_batch_in_one_call(models, encoder, calls, monkeypatch):
    nlp = _pipeline(models[encoder])
    encoder_module = nlp.get_pipe("corefbert_coref").scorer.resolver.model.encoder
    seen = []
    encoder_module.register_forward_hook(lambda *args: seen.append(1))
    list(nlp.pipe(_texts(100, seed=1), batch_size=32))
    assert len(seen) == calls  # 32 + 32 + 32 + 4 texts; LSL links sentences: one call per text


def _doc(words, **annotations) -> Doc:
    return Doc(spacy.blank("en").vocab, words=words, spaces=[True] * (len(words) - 1) + [False], **annotations)


def test_resolved_text_keeps_possessives_and_capitals():
    doc = _doc(words=["Tom", "lost", "his", "keys", ".", "His", "sister", "found",
                                             "them", "for", "him", "."],
              sent_starts=[True] + [False] * 4 + [True] + [False] * 6)
    clusters = [[doc[0:1], doc[2:3], doc[5:6], doc[10:11]], [doc[3:4], doc[8:9]]]
    write_clusters(doc, [[(s.start, s.end - 1) for s in c] for c in clusters])  # mentions: last token inclusive
    assert doc._.resolved_text == "Tom lost Tom's keys . Tom's sister found keys for Tom ."
    plural = _doc(words=["The", "dogs", "ate", ".", "Their", "bowls", "were", "full", "."],
                 tags=["DT", "NNS", "VBD", ".", "PRP$", "NNS", "VBD", "JJ", "."],
                 sent_starts=[True, False, False, False, True, False, False, False, False])
    assert resolved_text(plural, [[plural[0:2], plural[4:5]]]) == "The dogs ate . The dogs' bowls were full ."
    her = _doc(words=["Anna", "smiled", ";", "Tom", "saw", "her", "and", "her", "dog"])
    assert resolved_text(her, [[her[0:1], her[5:6], her[7:8]]]) == "Anna smiled ; Tom saw Anna and Anna's dog"
    only_pronouns = _doc(words=["He", "said", "he", "left"])
    assert resolved_text(only_pronouns, [[only_pronouns[0:1], only_pronouns[2:3]]]) == "He said he left"


def test_a_doc_without_sentences_and_a_missing_model_are_one_line(models):
    nlp = spacy.blank("en")
    nlp.add_pipe("corefbert_coref", config={"model": models["lsl"]})
    with pytest.raises(CorefBertError, match="no sentence boundaries"):
        nlp("Anna met Tom. She smiled.")
    with pytest.raises(CorefBertError, match="needs a model"):
        spacy.blank("en").add_pipe("corefbert_coref")
    with pytest.raises(CorefBertError, match="no coreference scorer 'nope'"):
        spacy.blank("en").add_pipe("corefbert_coref", config={"model": models["lsl"], "scorer": "nope"})


def test_sentence_windows_overlap_by_whole_sentences():
    assert sentence_windows([3, 3, 3, 3], max_words=6, overlap_words=0) == [(0, 2), (2, 4)]
    assert sentence_windows([3, 3, 3, 3], max_words=6, overlap_words=3) == [(0, 2), (1, 3), (2, 4)]
    assert sentence_windows([3, 3, 3, 3], max_words=100, overlap_words=50) == [(0, 4)]
    assert sentence_windows([9, 2, 2], max_words=4, overlap_words=4) == [(0, 1), (1, 3)]  # a long one alone
    assert sentence_windows([2, 2, 2], max_words=4, overlap_words=4) == [(0, 2), (1, 3)]  # always moves on
    assert sentence_windows([], max_words=4, overlap_words=1) == []


def test_the_merger_joins_clusters_through_shared_mentions():
    merger = ClusterMerger()
    merger.add([[(0, 0), (5, 6)], [(2, 2), (3, 3)]])
    merger.add([[(5, 6), (9, 9)], [(12, 12), (14, 14)]])
    assert merger.clusters() == [[(0, 0), (5, 6), (9, 9)], [(2, 2), (3, 3)], [(12, 12), (14, 14)]]


def _linking_resolver(window_words: int, overlap: int) -> Resolver:
    """A Resolver whose "model" links every "Anna" of a window: merged windows must give one cluster."""
    resolver = Resolver.__new__(Resolver)
    resolver.max_sentence_words, resolver.max_segment_words, resolver.overlap_words = 50, window_words, overlap

    def predict(windows):
        out = []
        for sentences in windows:
            words = [w[0] for s in sentences for w in s]
            annas = [(i, i) for i, w in enumerate(words) if w == "Anna"]
            out.append([annas] if len(annas) > 1 else [])
        return out

    resolver._predict = predict
    return resolver


def test_overlapping_windows_merge_to_the_one_window_result():
    sentences = [[(w, 0, 0, 0) for w in s.split()] for s in ["Anna met Tom .", "Tom left .", "Anna sat .",
                                                              "It rained .", "Anna left ."] * 6]
    whole = _linking_resolver(10_000, 0).clusters([sentences])
    assert len(whole[0]) == 1 and len(whole[0][0]) == 18
    assert _linking_resolver(12, 6).clusters([sentences]) == whole  # windows of ~4 sentences sharing ~2
    assert len(_linking_resolver(12, 0).clusters([sentences])[0]) > 1  # touching windows cannot join


def _tagged_doc(vocab) -> Doc:
    words = ["The", "farmer", "saw", "the", "old", "dog", ".", "He", "fed", "it", "and", "his", "cat", "."]
    pos = ["DET", "NOUN", "VERB", "DET", "ADJ", "NOUN", "PUNCT", "PRON", "VERB", "PRON", "CCONJ", "PRON", "NOUN",
           "PUNCT"]
    return Doc(vocab, words=words, pos=pos, sent_starts=[True] + [False] * 6 + [True] + [False] * 6)


def test_the_copy_scorer_links_each_pronoun_to_the_best_phrase_before_it(coref_checkpoint, copy_registered):
    nlp = spacy.blank("en")
    component = nlp.add_pipe("corefbert_coref", config={"model": str(coref_checkpoint), "scorer": "copy"})
    assert isinstance(component.scorer, SpacyCopyScorer)
    doc = component(_tagged_doc(nlp.vocab))
    assert noun_phrases(doc) == [(0, 2), (3, 6), (12, 13)]
    linked = {t.i for cluster in doc._.coref_clusters for span in cluster for t in span if t.pos_ == "PRON"}
    assert linked == {7, 9, 11}, "every third-person pronoun with a phrase before it is linked"
    # The literal reference: CopyResolver, one pronoun at a time, with character spans.
    resolver = CopyResolver(str(coref_checkpoint))
    text = doc.text
    for cluster in doc._.coref_clusters:
        phrase = cluster[0]
        for span in cluster[1:]:
            candidates = [(doc[s].idx, doc[e - 1].idx + len(doc[e - 1])) for s, e in [(0, 2), (3, 6)]]
            scores = resolver.view(text, (span.start_char, span.end_char), candidates).scores
            assert candidates[max(range(2), key=scores.__getitem__)] == (phrase.start_char, phrase.end_char)
    assert doc._.resolved_text.count("farmer") + doc._.resolved_text.count("dog") == 5


def test_the_copy_scorer_needs_tags(coref_checkpoint, copy_registered):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("corefbert_coref", config={"model": str(coref_checkpoint), "scorer": "copy"})
    with pytest.raises(CorefBertError, match="part-of-speech tags"):
        nlp("The farmer saw the dog. He fed it.")


def test_the_factory_is_the_packaged_entry_point():
    """pyproject.toml names what spaCy loads after ``pip install``."""
    import tomllib
    from helpers import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    module, _, name = project["spacy_factories"]["corefbert_coref"].partition(":")
    assert module == spacy_component.__name__ and getattr(spacy_component, name) is spacy_component.make_coref_component
    assert project["spacy_misc"]["corefbert.scorer.copy"] == "corefbert.tasks.coref.resolver:spacy_copy_scorer"
