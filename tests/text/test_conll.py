"""corefbert.text.conll: the CoNLL-2012 reader/writer on hand-written fixtures, bad input, and the shared files."""

from __future__ import annotations

import pytest
from helpers import FIXTURES as ALL_FIXTURES
from helpers import shared_data

from corefbert.errors import CorefBertError
from corefbert.text.conll import (
    ConllDocument,
    coref_column_entries,
    format_entries,
    read_conll,
    replace_last_column,
    write_conll,
)

FIXTURES = ALL_FIXTURES / "conll"
ONTONOTES = FIXTURES / "mini.gold_conll"
LITBANK = FIXTURES / "litbank_mini.conll"


def test_ontonotes_layout_documents_parts_speakers_genre_clusters():
    first, second = read_conll(str(ONTONOTES))
    assert (first.doc_key, first.name, first.part, first.genre) == ("nw/test/00/mini_0001_0", "nw/test/00/mini_0001",
                                                                  "000", "nw")
    assert second.doc_key == "nw/test/00/mini_0001_1" and second.part == "001"
    assert first.sentences == [["John", "gave", "his", "sister", "a", "book", "."], ["She", "liked", "it", "."]]
    assert first.speakers == [["Speaker#1"] * 7, ["Speaker#2"] * 4]
    assert first.words[7:9] == ["She", "liked"] and first.sentence_of_word() == [0] * 7 + [1] * 4
    # "(1|(0)" on "his": a start of cluster 1 and a one-word mention of cluster 0; "She" stays out (no bracket).
    assert first.clusters == [[(0, 0), (2, 2)], [(2, 3)], [(4, 5), (9, 9)]]
    assert first.cluster_ids == ["0", "1", "2"]
    assert len(first.columns[0][0]) == 13 and len(first.columns[1][0]) == 12  # SRL columns vary per sentence
    # "7)|(7)" on "'s": the open "(7" of "Mary" closes there and a one-word mention of the same cluster starts.
    assert second.clusters == [[(0, 1), (1, 1)]]


def test_litbank_layout_empty_coreference_column():
    (document,) = read_conll(str(LITBANK))
    assert (document.doc_key, document.part, document.genre) == ("tiny_litbank_brat_0", "0", "")
    assert document.speakers[0][0] == "_" and document.columns[0][1][-1] == ""
    assert document.clusters == [[(0, 2), (6, 6)], [(4, 4), (9, 9)]]


@pytest.mark.parametrize("path", [ONTONOTES, LITBANK], ids=["ontonotes", "litbank"])
def test_round_trip_is_byte_identical_and_reads_back_equal(path, tmp_path):
    documents = read_conll(str(path))
    write_conll(documents, str(tmp_path / "out.conll"))
    assert (tmp_path / "out.conll").read_bytes() == path.read_bytes()
    assert read_conll(str(tmp_path / "out.conll")) == documents


@pytest.mark.parametrize("path", [ONTONOTES, LITBANK], ids=["ontonotes", "litbank"])
def test_predicted_clusters_replace_the_coreference_column_only(path, tmp_path):
    documents = read_conll(str(path))
    predicted = [[[(0, 0)], [(1, 2), (1, 1), (0, 3)]] for _ in documents]
    write_conll(documents, str(tmp_path / "pred.conll"), clusters=predicted)
    again = read_conll(str(tmp_path / "pred.conll"))
    assert [d.clusters for d in again] == [[[(0, 0)], [(0, 3), (1, 1), (1, 2)]]] * len(documents)
    for before, after in zip(documents, again):
        assert [[c[:-1] for c in s] for s in after.columns] == [[c[:-1] for c in s] for s in before.columns]
        assert after.sentences == before.sentences and after.speakers == before.speakers
    lines = (tmp_path / "pred.conll").read_text().splitlines()
    assert lines[1].endswith("(0)|(1") if path == ONTONOTES else lines[1].endswith("\t(0)|(1")
    # Space-aligned columns keep their right edge where the new value fits.
    if path == ONTONOTES:
        original = ONTONOTES.read_text().splitlines()
        assert len(lines[3]) == len(original[3])


def test_windows_line_ends_read_the_same_and_write_back_identical(tmp_path):
    path = tmp_path / "crlf.conll"
    path.write_bytes(LITBANK.read_bytes().replace(b"\n", b"\r\n"))
    documents = read_conll(str(path))
    assert [d.clusters for d in documents] == [d.clusters for d in read_conll(str(LITBANK))]
    write_conll(documents, str(tmp_path / "out.conll"))
    assert (tmp_path / "out.conll").read_bytes() == path.read_bytes()


def test_hand_built_document_writes_and_reads_back(tmp_path):
    document = ConllDocument(doc_key="doc_0", name="doc", part="0", sentences=[["A", "cat", "."], ["It", "ran"]],
                             speakers=[["-"] * 3, ["-"] * 2], genre="", clusters=[[(0, 1), (3, 3)]], columns=[])
    write_conll([document], str(tmp_path / "hand.conll"))
    (back,) = read_conll(str(tmp_path / "hand.conll"))
    assert (back.doc_key, back.sentences, back.speakers, back.clusters) == (
        "doc_0", document.sentences, document.speakers, document.clusters)


def test_coreference_column_order_reads_back_for_touching_mentions_of_one_cluster():
    # Word 2 closes (0, 2) and opens (2, 4) of the same cluster: ends must come first.
    entries = coref_column_entries([[(0, 2), (2, 4), (2, 2)]], ["5"], 5)
    assert [format_entries(e) for e in entries] == ["(5", "-", "5)|(5)|(5", "-", "5)"]
    # Two mentions starting on one word: the longer opens first.
    assert format_entries(coref_column_entries([[(0, 1)], [(0, 3)]], ["1", "2"], 4)[0]) == "(2|(1"


def test_replace_last_column_keeps_tabs_and_the_right_edge():
    assert replace_last_column("a\tb\t", "(3)") == "a\tb\t(3)"
    assert replace_last_column("a   b      -", "(12)") == "a   b   (12)"
    assert replace_last_column("a b -", "(123)") == "a b (123)"


def test_globs_and_lists(tmp_path):
    assert len(read_conll([str(ONTONOTES), str(LITBANK)])) == 3
    assert len(read_conll(str(FIXTURES / "*conll"))) == 3


# ---------------------------------------------------------------------------------------------- bad input

GOOD = ONTONOTES.read_text()


def _lines_with(line_number: int, new: str | None) -> str:
    lines = GOOD.splitlines()
    if new is None:
        del lines[line_number - 1]
    else:
        lines[line_number - 1] = new
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, position, words", [
    (_lines_with(3, "nw/test/00/mini_0001 0 1 gave VBD (VP* give 01 1 Speaker#1 * (V*)"), ":3:", "12 columns"),
    (_lines_with(3, "nw/test/00/mini_0001 0 1 gave"), ":3:", "at least 5"),
    (_lines_with(6, GOOD.splitlines()[5].replace("(2", "-")), ":7:", "never opened"),
    (_lines_with(12, GOOD.splitlines()[11].replace("(2)", "(2")), ":12:", "never closed"),
    (_lines_with(12, GOOD.splitlines()[11].replace("(2)", "(2]")), ":12:", "bad coreference entry"),
    (_lines_with(15, None), ":16:", "still open"),
    (GOOD[: GOOD.rindex("#end document")], ":17:", "no '#end document'"),
    ("#begin document (x); part 0\n#end document\n", ":1:", "no words"),
    ("x 0 0 word -\n", ":1:", "outside a document"),
    ("", "", "empty file"),
    ("word line\n", ":1:", "outside a document"),
    ("#begin document x\n", ":1:", "bad header"),
], ids=["column count", "too few columns", "unopened", "unclosed", "bad entry", "missing end", "missing end at eof",
        "empty document", "no header", "empty file", "text only", "bad header"])
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, text, position, words):
    path = tmp_path / "bad.gold_conll"
    path.write_text(text)
    with pytest.raises(CorefBertError) as info:
        read_conll(str(path))
    message = str(info.value)
    assert "\n" not in message and f"{path}{position}" in message and words in message


@pytest.mark.parametrize("data, words", [(bytes(range(256)), "binary"), ("Gauß\n".encode("latin-1"), "UTF-8")])
def test_binary_and_non_utf8_files(tmp_path, data, words):
    path = tmp_path / "bad.conll"
    path.write_bytes(data)
    with pytest.raises(CorefBertError, match=words):
        read_conll(str(path))


def test_missing_files_and_empty_globs(tmp_path):
    with pytest.raises(CorefBertError, match="no such file"):
        read_conll(str(tmp_path / "absent.conll"))
    with pytest.raises(CorefBertError, match="no file matches"):
        read_conll(str(tmp_path / "*.conll"))
    with pytest.raises(CorefBertError, match="directory"):
        read_conll(str(tmp_path))


def test_writer_rejects_mentions_outside_the_document(tmp_path):
    documents = read_conll(str(LITBANK))
    with pytest.raises(CorefBertError, match="outside"):
        write_conll(documents, str(tmp_path / "x.conll"), clusters=[[[(0, 99)]]])
    with pytest.raises(CorefBertError, match="one per document"):
        write_conll(documents, str(tmp_path / "x.conll"), clusters=[])


# ---------------------------------------------------------------------------------------------- real data


@pytest.mark.shared_data
def test_every_shared_file_reads_and_round_trips_byte_identical(tmp_path):
    root = shared_data("conll2012")
    files = sorted(root.glob("*/*conll"))
    assert len(files) == 23
    total_words = total_clusters = 0
    for path in files:
        documents = read_conll(str(path))
        write_conll(documents, str(tmp_path / "out"))
        assert (tmp_path / "out").read_bytes() == path.read_bytes(), path
        assert read_conll(str(tmp_path / "out")) == documents
        for document in documents:
            total_words += len(document.words)
            total_clusters += len(document.clusters)
            assert all(0 <= s <= e < len(document.words) for c in document.clusters for s, e in c)
    onto = read_conll(str(root / "ontonotes_excerpts" / "coref.gold_conll"))
    assert [d.doc_key for d in onto] == [f"bc/cctv/00/cctv_0000_{p}" for p in (0, 1, 3, 5)]
    assert {d.genre for d in onto} == {"bc"} and onto[0].speakers[0][0] == "Speaker#1"
    assert total_words > 40_000 and total_clusters > 1_000


# ---------------------------------------------------------------------------------------------- fuzzing

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])
LINES = GOOD.splitlines(keepends=True) + LITBANK.read_text().splitlines(keepends=True)


@st.composite
def mutated_conll(draw) -> bytes:
    """Lines of both fixtures dropped, repeated or shuffled in, bytes flipped, or the file cut short."""
    lines = draw(st.lists(st.sampled_from(LINES), max_size=30)) if draw(st.booleans()) else list(LINES)
    data = bytearray("".join(lines).encode("utf-8"))
    for _ in range(draw(st.integers(0, 3))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.sampled_from(b"()|-\t \n#0123456789x\x00\xff"))
    return bytes(data[: draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@FUZZ
@given(data=mutated_conll())
def test_fuzzed_files_read_or_fail_in_one_line_and_what_reads_round_trips(tmp_path, data):
    path = tmp_path / "fuzz.conll"
    path.write_bytes(data)
    try:
        documents = read_conll(str(path))
    except CorefBertError as err:
        assert "\n" not in str(err)
        return
    write_conll(documents, str(tmp_path / "again.conll"))
    assert read_conll(str(tmp_path / "again.conll")) == documents
