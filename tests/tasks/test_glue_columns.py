"""GLUE rows whose width differs from the header: one error line (a tab inside a sentence), never a misread;
MNLI's rows with more or fewer annotator labels than the header names read their gold label from the end."""

from __future__ import annotations

import re

import pytest
from helpers import shared_data

from corefbert.errors import CorefBertError
from corefbert.tasks.glue import read_glue_tsv

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
MNLI_COLUMNS = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]


def _write(tmp_path, text, name="bad.tsv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _mnli_row(index, sentence1, sentence2, labels, gold):
    return "\t".join([str(index), "1", f"{index}e", "fiction", "( x )", "( x )", "(ROOT x)", "(ROOT x)",
                      sentence1, sentence2, *labels, gold])


@pytest.mark.parametrize(
    "task, text, found, expected, line",
    [
        # MRPC: a tab inside sentence 1 used to make its second half sentence 2.
        ("mrpc", MRPC_HEADER + "1\t7\t8\tA b.\tB a.\n0\t9\t10\tThe cat\tsat.\tA dog ran.\n", 6, "5", 3),
        ("rte", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\textra\n", 5, "4", 2),
        ("cola", "gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the\tsat.\n", 5, "4", 2),
        ("sst2", "sentence\tlabel\na fine\tfilm\t1\n", 3, "2", 2),
        # Narrower than the header but with every column the reader wanted: still a broken row.
        ("rte", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\n", 3, "4", 2),
    ],
)
def test_a_row_wider_or_narrower_than_the_header_is_one_error_line(tmp_path, task, text, found, expected, line):
    path = _write(tmp_path, text)
    with_labels = not text.endswith("B.\n")  # the short RTE row is read as a test file (no label wanted)
    with pytest.raises(CorefBertError) as err:
        read_glue_tsv(path, task, with_labels=with_labels)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: row has {found} columns") and "\n" not in message
    assert re.search(rf"has {expected}\b", message)
    assert ("a tab inside a text field?" in message) == (found > int(expected))


def test_mnli_rows_with_five_annotator_labels_under_a_one_label_header(tmp_path):
    """MultiNLI's validated training pairs carry five annotator labels under a header naming label1 only."""
    header = "\t".join(MNLI_COLUMNS + ["label1", "gold_label"])
    rows = [_mnli_row(0, "A man sleeps.", "Someone sleeps.", ["entailment"], "entailment"),
            _mnli_row(1, "A man runs.", "A man sits.", ["contradiction", "neutral", "neutral",
                                                         "contradiction", "contradiction"], "contradiction"),
            _mnli_row(2, "A dog barks.", "A dog barks loudly.", ["neutral"], "neutral")]
    examples = read_glue_tsv(_write(tmp_path, "\n".join([header, *rows]) + "\n", "train.tsv"), "mnli", True)
    assert [e.texts for e in examples] == [("A man sleeps.", "Someone sleeps."), ("A man runs.", "A man sits."),
                                           ("A dog barks.", "A dog barks loudly.")]
    assert [e.label for e in examples] == [1, 0, 2] and [e.index for e in examples] == ["0", "1", "2"]
    # A dev header names five; a row with three is read too (its gold label is still the last column).
    header = "\t".join(MNLI_COLUMNS + [f"label{i}" for i in range(1, 6)] + ["gold_label"])
    text = header + "\n" + _mnli_row(0, "A.", "B.", ["neutral"] * 3, "neutral") + "\n"
    (example,) = read_glue_tsv(_write(tmp_path, text, "dev.tsv"), "mnli", True)
    assert example.texts == ("A.", "B.") and example.label == 2


def test_mnli_tab_inside_a_sentence_is_not_taken_for_annotator_labels(tmp_path):
    header = "\t".join(MNLI_COLUMNS + ["label1", "gold_label"])
    row = _mnli_row(0, "A man\tsleeps.", "Someone sleeps.", ["entailment"], "entailment")
    path = _write(tmp_path, header + "\n" + row + "\n")
    with pytest.raises(CorefBertError, match=re.escape(f"{path}:2: row has 13 columns, the GLUE mnli header has "
                                                       "12 to 16 (1 to 5 annotator labels); a tab inside")):
        read_glue_tsv(path, "mnli", with_labels=True)
    # The test files have no annotator labels at all: their width is fixed.
    header = "\t".join(MNLI_COLUMNS)
    row = "\t".join(_mnli_row(0, "A man\tsleeps.", "B.", [], "").split("\t")[:-1])
    path = _write(tmp_path, header + "\n" + row + "\n", "test.tsv")
    with pytest.raises(CorefBertError, match=re.escape(f"{path}:2: row has 11 columns, the GLUE mnli header has 10;")):
        read_glue_tsv(path, "mnli", with_labels=False)


@pytest.mark.shared_data
@pytest.mark.parametrize("task, folder", [("rte", "RTE"), ("mrpc", "MRPC"), ("cola", "CoLA"), ("sst2", "SST-2"),
                                          ("wnli", "WNLI")])
def test_real_glue_files_read_every_row(task, folder):
    for path in sorted(shared_data("glue", folder).glob("*.tsv")):
        lines = path.read_text(encoding="utf-8-sig").splitlines()
        rows = len(lines) - (task != "cola")  # CoLA train/dev have no header
        examples = read_glue_tsv(str(path), task, with_labels=True)
        assert len(examples) == rows and all(e.label is not None and all(e.texts) for e in examples)
