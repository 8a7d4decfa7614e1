"""Input formats of the corpus reader that used to be read as plain prose: WikiText raw files, CoNLL-2012
column files, and WikiExtractor titles with HTML entities (corefbert/corpus/readers.py)."""

import html
import json
import re

import pytest
from helpers import FIXTURES, shared_data
from test_corpus import RegexTagger, bert_tokenizer, prepare  # noqa: F401  (bert_tokenizer: a fixture)

from corefbert.corpus import prepare as corpus
from corefbert.corpus.readers import (
    Source,
    generate_documents,
    iter_documents,
    sniff_format,
    wikitext_heading_level,
)
from corefbert.errors import CorefBertError

FIX = FIXTURES / "corpus_formats"
WIKITEXT = FIX / "wikitext_articles.raw"
AMP = FIX / "wiki_amp_titles"
LITBANK = FIX / "litbank_style.conll"
ONTONOTES = FIX / "ontonotes_style.gold_conll"


def documents(path) -> list[str]:
    return list(iter_documents(Source(str(path), "file")))


def read_report(tmp_path, *paths) -> tuple[list[str], dict]:
    sources = tuple(Source(str(p), "file") for p in paths)
    report = tmp_path / "report.json"
    texts = [row["text"] for row in generate_documents(sources, "text", str(report))]
    return texts, json.loads(report.read_text())


# --- WikiText: ' = Title = ' lines separate documents, even without blank lines ---------------------------

def test_wikitext_titles_start_documents_and_headings_are_no_text():
    raw = WIKITEXT.read_text(encoding="utf-8")
    titles = [line.strip(" =") for line in raw.splitlines() if wikitext_heading_level(line) == 1]
    assert "\n\n" not in raw and len(titles) == 3  # the fixture is the case: no blank line at all
    docs = documents(WIKITEXT)
    assert len(docs) == len(titles)
    assert docs[0].startswith("The Harbour Light is a lighthouse") and docs[2].startswith("Ilse Varga was")
    for doc in docs:
        assert not any(wikitext_heading_level(line) for line in doc.splitlines())
        assert "@" not in doc and " = " not in doc  # WikiText's escapes and heading marks are gone
    assert "21.5 metres" in docs[0] and "second-order lens" in docs[0] and "1,200 kilograms" in docs[0]
    assert "History" not in docs[0] and "Flood of 1911" not in docs[1]  # section headings dropped
    body_lines = [line.strip() for line in raw.splitlines() if line.strip() and not wikitext_heading_level(line)]
    assert sum(len(doc.splitlines()) for doc in docs) == len(body_lines)  # every paragraph kept, one per line


def test_wikitext_with_blank_lines_between_paragraphs_is_read_the_same(tmp_path):
    # WikiText-103/2 raw files put " " lines around headings and between paragraphs; those are no boundaries.
    spaced = tmp_path / "wiki.train.raw"
    spaced.write_text(" \n" + "\n \n".join(WIKITEXT.read_text(encoding="utf-8").splitlines()) + "\n")
    assert documents(spaced) == documents(WIKITEXT)


@pytest.mark.parametrize("line, level", [
    (" = Valkyria Chronicles III = ", 1), (" = = Gameplay = = ", 2), (" = = = Plot = = = ", 3),
    ("= A = B =", 1), (" = = Mismatch = ", 0), ("a = b = c", 0), (" = = ", 0), ("x", 0), ("", 0),
])
def test_wikitext_heading_levels(line, level):
    assert wikitext_heading_level(line) == level


def test_a_plain_file_without_headings_stays_plain(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("The boat sank.\nIt was old.\n\nThe river rose = and fell.\n")
    assert sniff_format(str(plain)) == "text" and len(documents(plain)) == 2
    assert sniff_format(str(WIKITEXT)) == "wikitext"


def test_a_wikitext_corpus_gets_a_validation_split(tmp_path, bert_tokenizer):  # noqa: F811
    data = prepare(tmp_path, bert_tokenizer, [WIKITEXT], validation_split_percentage=34, max_seq_length=64)
    summary = json.loads((tmp_path / "out" / corpus.SUMMARY_FILE).read_text())
    assert summary["splits"]["train"]["documents"] == 2 and summary["splits"]["validation"]["documents"] == 1
    assert len(data["validation"]) > 0 and summary["formats"] == {"wikitext": 1}


# --- WikiExtractor titles written with entities -----------------------------------------------------------

def test_escaped_titles_are_recognised_and_title_only_stubs_skipped(tmp_path):
    texts, report = read_report(tmp_path, AMP)
    titles = [html.unescape(t) for t in re.findall(r'title="([^"]*)"', AMP.read_text(encoding="utf-8"))]
    assert report["empty_documents"] == 2 and len(texts) == 3  # two title-only stubs, three bodies
    assert texts[0].startswith("Pike & Lind was a firm") and texts[1].startswith("Rope & Lantern is a song")
    assert not any(text.splitlines()[0].strip() in titles for text in texts)


@pytest.mark.shared_data
def test_real_wikiextractor_file_has_no_title_only_documents():
    path = shared_data("wiki_corpus", "enwiki_wikiextractor", "wiki_00")
    raw = path.read_text(encoding="utf-8")
    titles = {html.unescape(t).strip() for t in re.findall(r'<doc [^>]*title="([^"]*)"', raw)}
    assert any("&amp;" in t for t in re.findall(r'<doc [^>]*title="([^"]*)"', raw))
    docs = [d for d in documents(path) if d]
    assert docs and not [d for d in docs if d.splitlines()[0].strip() in titles]


# --- CoNLL-2012 column files: the word column, one document per part -------------------------------------

def test_conll_files_give_their_words_one_document_per_part():
    assert sniff_format(str(LITBANK)) == sniff_format(str(ONTONOTES)) == "conll-2012"
    (litbank,) = documents(LITBANK)
    assert litbank == ("CHAPTER I\nMarta kept the lighthouse on the cape .\n"
                       "Every evening Marta climbed the stairs of the lighthouse .")
    ontonotes = documents(ONTONOTES)
    assert ontonotes == ["The keeper ( Marta ) rowed to the boat .\nThe boat sank .",
                         "The crew thanked the keeper ."]  # PTB escapes undone, one document per part


def test_conll_token_line_with_too_few_columns_is_one_line(tmp_path):
    bad = tmp_path / "bad.conll"
    bad.write_text("#begin document (x); part 0\nx\t0\t0\tThe\t_\nx\t0\nx\t0\t2\tboat\t_\n#end document\n")
    with pytest.raises(CorefBertError, match=r"bad\.conll:3: CoNLL-2012 token line with 2 column\(s\)"):
        documents(bad)


def test_prepare_reads_conll_as_words_and_says_so(tmp_path, bert_tokenizer, capsys):  # noqa: F811
    data = prepare(tmp_path, bert_tokenizer, [LITBANK, ONTONOTES], validation_split_percentage=0,
                   max_seq_length=64, short_seq_prob=0, packing="single")
    decoded = [bert_tokenizer.decode(row[1:-1]) for row in data["train"]["input_ids"]]
    assert len(decoded) == 3 and decoded[0].startswith("chapter i marta kept the lighthouse")
    assert not any(re.search(r"\t|\b_\b|bc/kel|brat", text) for text in decoded)  # no column text
    assert "files read as: conll-2012 2" in capsys.readouterr().out


@pytest.mark.shared_data
def test_a_real_litbank_file_is_one_document_of_its_words():
    path = sorted(shared_data("conll2012", "litbank").glob("*.conll"))[0]
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    (doc,) = documents(path)
    assert doc.split() == [row[3] for row in rows]
    assert len(doc.splitlines()) == path.read_text(encoding="utf-8").count("\n\n")  # one line per sentence
