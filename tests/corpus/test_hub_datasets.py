"""Hub datasets as pretraining text (corefbert/corpus/hub_datasets.py), offline: a local data folder stands in for a
Hub repository (``datasets.load_dataset`` treats both alike), and an uncached Hub name is one line."""

from __future__ import annotations

import json

import pytest
from test_corpus import RegexTagger, bert_tokenizer  # noqa: F401  (bert_tokenizer: a fixture)

from corefbert.corpus.hub_datasets import hub_fingerprint, hub_path, parse_hub_path
from corefbert.corpus.readers import Source, iter_documents
from corefbert.errors import CorefBertError


def hub_documents(path, text_column="text"):
    return iter_documents(Source(path, "hub"), text_column)


@pytest.fixture
def data_repo(tmp_path):
    """A dataset repository layout: data files per split, no loading script."""
    (tmp_path / "repo").mkdir()
    rows = [{"id": i, "text": f"  The boat {i} left the harbour. The boat came back.  "} for i in range(5)]
    (tmp_path / "repo" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "repo" / "validation.jsonl").write_text(json.dumps({"id": 9, "text": "A gull."}) + "\n")
    return tmp_path / "repo"


def test_documents_of_a_dataset_split(data_repo):
    source = hub_path(str(data_repo), None, "train")
    assert parse_hub_path(source) == (str(data_repo), None, "train")
    docs = list(hub_documents(source))
    assert docs == [f"The boat {i} left the harbour. The boat came back." for i in range(5)]
    assert list(hub_documents(hub_path(str(data_repo), None, "validation"))) == ["A gull."]
    first = hub_fingerprint(source)
    assert first[1] == 5 and first == hub_fingerprint(source)
    (data_repo / "train.jsonl").write_text(json.dumps({"id": 7, "text": "Another text."}) + "\n")
    assert hub_fingerprint(source) != first  # other data files: another cache key


def test_bad_names_columns_and_offline_misses_are_one_line(data_repo, monkeypatch):
    with pytest.raises(CorefBertError, match="no column 'body'"):
        list(hub_documents(hub_path(str(data_repo), None, "train"), text_column="body"))
    (data_repo / "train.jsonl").write_text("{not json\n")
    with pytest.raises(CorefBertError, match="cannot load the dataset"):
        list(hub_documents(hub_path(str(data_repo), None, "train")))
    with pytest.raises(CorefBertError, match="not a dataset name"):
        hub_path("a:b")
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(CorefBertError) as err:
        list(hub_documents(hub_path("no-such-user/no-such-corpus-xyz", "20231101.en")))
    message = str(err.value)
    assert message.startswith("no-such-user/no-such-corpus-xyz/20231101.en[train]: cannot load the dataset")
    assert "not in the local datasets cache" in message and "\n" not in message


def test_prepare_reads_a_dataset_name_like_files(data_repo, tmp_path, bert_tokenizer):  # noqa: F811
    """--dataset_name is one more source of documents: prepared through the same pipeline, cached by the
    dataset's fingerprint."""
    from corefbert.corpus.prepare import PrepareArguments, prepare_corpus

    docs = list(iter_documents(Source(hub_path(str(data_repo), None, "train"), "hub")))
    assert len(docs) == 5 and docs[0].startswith("The boat 0")
    args = PrepareArguments(dataset_name=str(data_repo), output_dir=str(tmp_path / "out"), max_seq_length=32,
                            validation_split_percentage=20, seed=1)
    data = prepare_corpus(args, tokenizer=bert_tokenizer, nlp=RegexTagger())
    summary = json.loads((tmp_path / "out" / "prepare_summary.json").read_text())
    assert summary["splits"]["train"]["documents"] == 4 and summary["splits"]["validation"]["documents"] == 1
    assert summary["formats"] == {"hub dataset": 1} and len(data["train"]) > 0
    assert prepare_corpus(args, tokenizer=bert_tokenizer, nlp=RegexTagger())["train"]["input_ids"] == \
        data["train"]["input_ids"]  # the second run reuses the prepared corpus (same dataset fingerprint)
