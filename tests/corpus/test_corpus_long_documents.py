"""Long documents: spaCy sees bounded pieces and batches, so memory does not grow with a
document; a huge document and an empty validation split are warned about, and the trainer's error says why."""

import json
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.language import Language
from test_corpus import TINY, RegexTagger, bert_tokenizer, check_row, prepare  # noqa: F401  (bert_tokenizer: a fixture)

from corefbert.corpus import packing
from corefbert.corpus import prepare as corpus
from corefbert.corpus import readers as corpus_io
from corefbert.corpus.mentions import MAX_BATCH_CHARS, MAX_PIECE_CHARS, MentionExtractor
from corefbert.corpus.packed_rows import COLUMNS
from corefbert.errors import CorefBertError
from corefbert.pretraining.data import check_corpus, load_prepared_corpus

NOUNS = {"lighthouse", "notebook", "boat", "harbour", "train", "bridge", "river", "village"}


if not Language.has_factory("corpus_test_nouns"):
    @Language.component("corpus_test_nouns")
    def _tag_nouns(doc):
        """A context-free tagger: a word is a NOUN by its form alone, so pieces must tag like the whole."""
        for token in doc:
            token.pos_ = "NOUN" if token.lower_ in NOUNS else "X"
        return doc


def recording_pipeline():
    """A ``spacy.Language`` that records the texts of every ``pipe`` call it gets."""
    nlp = spacy.blank("en")
    nlp.add_pipe("corpus_test_nouns")
    calls: list[list[str]] = []
    original = nlp.pipe

    def pipe(texts, as_tuples=False, **kwargs):
        if not as_tuples:  # spaCy's own inner call with the Docs it made of the (text, context) pairs
            return original(texts, **kwargs)
        items = list(texts)
        calls.append([text for text, _ in items])
        return original(items, as_tuples=True, **kwargs)

    nlp.pipe = pipe
    return nlp, calls


def long_document(copies: int) -> str:
    """A one-sentence-per-line document with no blank line (the issue's case), ``copies`` x 8 paragraphs."""
    return "\n".join(line for _ in range(copies) for line in TINY.read_text(encoding="utf-8").splitlines() if line)


@pytest.mark.parametrize("copies", [100, 200])
def test_spacy_gets_bounded_pieces_and_batches_whatever_the_document_length(copies):
    text = long_document(copies)
    assert len(text) > 2 * MAX_BATCH_CHARS
    nlp, calls = recording_pipeline()
    (pieced,) = MentionExtractor(nlp)([text])
    pieces = [piece for call in calls for piece in call]
    assert "".join(pieces) == text  # every character tagged once, in order
    assert max(len(p) for p in pieces) <= MAX_PIECE_CHARS
    assert max(sum(len(p) for p in call) for call in calls) <= MAX_BATCH_CHARS  # what spaCy holds at once
    assert all(p.endswith("\n") for p in pieces[:-1])  # cut at line ends, never inside a sentence

    whole_nlp, _ = recording_pipeline()
    whole_nlp.max_length = len(text) + 1
    (whole,) = MentionExtractor(whole_nlp, max_chars=len(text), max_batch_chars=len(text))([text])
    assert pieced.num_mentions > 1000
    for name in ("word_starts", "word_ends", "is_mention", "group_keys"):
        np.testing.assert_array_equal(getattr(pieced, name), getattr(whole, name))


def test_short_documents_still_share_batches():
    nlp, calls = recording_pipeline()
    texts = [f"The boat {i} reached the harbour." for i in range(200)]
    docs = list(MentionExtractor(nlp, batch_size=64)(texts))
    assert len(docs) == 200 and [len(call) for call in calls] == [64, 64, 64, 8]
    assert all(doc.num_mentions == 2 for doc in docs)


def test_a_huge_document_and_an_empty_validation_split_are_warned_about(tmp_path, bert_tokenizer, capsys,  # noqa: F811
                                                                        monkeypatch):
    one = tmp_path / "one_document.txt"
    one.write_text(long_document(2) + "\n")
    monkeypatch.setattr(corpus_io, "HUGE_DOCUMENT_CHARS", 2_000)
    monkeypatch.setattr(corpus, "HUGE_DOCUMENT_CHARS", 2_000)
    data = prepare(tmp_path, bert_tokenizer, [one], validation_split_percentage=5)
    err = capsys.readouterr().err
    assert f"warning: 1 document(s) over 2,000 characters (the longest {len(one.read_text()) - 1:,}, in {one})" in err
    assert "warning: the validation split is empty: the corpus has only 1 document(s)" in err
    summary = json.loads((tmp_path / "out" / corpus.SUMMARY_FILE).read_text())
    assert summary["huge_documents"]["count"] == 1 and len(data["validation"]) == 0

    # What run_mrp.py then says, for a prepared folder and for the corpus it prepared itself.
    tokens = summary["splits"]["train"]["tokens"]
    why = (rf"the validation split is empty: the corpus has only 1 document\(s\) \({tokens:,} tokens\) and "
           r"validation takes whole documents \(the first 5%.*or pass --validation_file$")
    with pytest.raises(CorefBertError, match=why):
        check_corpus(load_prepared_corpus(str(tmp_path / "out")), str(tmp_path / "out"))
    with pytest.raises(CorefBertError, match=why):
        check_corpus(data, "corpus")


def test_an_empty_split_without_a_summary_keeps_the_short_message(tmp_path):
    import datasets

    columns = {c: [[1, 2]] for c in ("input_ids", "word_ids", "mention_starts", "mention_ends", "mention_groups")}
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns),
                                   "validation": datasets.Dataset.from_dict({c: [] for c in columns})})
    with pytest.raises(CorefBertError, match=r"^x: the validation split is empty; give more text$"):
        check_corpus(splits, "x")


def test_many_documents_are_not_warned_about(tmp_path, bert_tokenizer, capsys):  # noqa: F811
    prepare(tmp_path, bert_tokenizer, [TINY], validation_split_percentage=20)
    assert "warning" not in capsys.readouterr().err
    assert not Path(tmp_path / "out" / corpus.SUMMARY_FILE).read_text().count('"count": 1')


def test_a_long_document_is_tokenized_and_packed_in_bounded_segments(bert_tokenizer, monkeypatch):  # noqa: F811
    text = long_document(3)  # ~7,500 characters, one document
    calls = []

    class RecordingTokenizer:
        """Delegates to the tokenizer and records how many characters each call gets."""

        def __getattr__(self, name):
            return getattr(bert_tokenizer, name)

        def __call__(self, texts, **kwargs):
            calls.append(sum(len(t) for t in texts))
            return bert_tokenizer(texts, **kwargs)

    def pack(segment_chars):
        monkeypatch.setattr(packing, "SEGMENT_CHARS", segment_chars)
        calls.clear()
        packer = packing.SequencePacker(bert_tokenizer, MentionExtractor(RegexTagger()), max_seq_length=64,
                                        short_seq_prob=0.0)
        packer.tokenizer = RecordingTokenizer()
        rows = packer({"doc_id": [0, 1], "text": [text, "The boat and the boat."]}).to_pydict()
        return rows, packer.stats, list(calls)

    whole, whole_stats, whole_calls = pack(10**9)
    rows, stats, segment_calls = pack(2_000)
    assert max(whole_calls) > 7_000 and max(segment_calls) <= 2_000  # what one tokenizer call holds
    assert stats["documents"] == whole_stats["documents"] == 2 and stats["documents_without_words"] == 0
    inner = lambda r: [i for row in r["input_ids"] for i in row[1:-1]]  # noqa: E731
    assert inner(rows) == inner(whole)  # the same text, every token once, in order
    assert len(whole["input_ids"]) <= len(rows["input_ids"]) <= len(whole["input_ids"]) + len(text) // 2_000 + 1
    for values in zip(*(rows[name] for name in COLUMNS)):
        check_row(dict(zip(COLUMNS, values)), bert_tokenizer, 64)
