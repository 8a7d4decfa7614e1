"""CoNLL-2012 coreference files (``*_conll``, ``.conll``): one reader, one writer.

One word per line, a blank line between sentences, documents between ``#begin document (NAME); part P`` and
``#end document``, the coreference column last. OntoNotes aligns its columns with spaces (doc id, part, word
index, word, ..., speaker, named entities, SRL arguments ..., coreference; the SRL columns vary per sentence,
so the column count is checked within a sentence); LitBank is tab-separated, with an *empty* coreference
column for no mention. Coreference entries are ``(ID``, ``ID)`` and ``(ID)`` joined by ``|``, starts and ends
of one ID pairing up last-in first-out, as the reference scorer (v8.01) reads them.

Round trip: writing the gold clusters back gives the bytes that were read; other clusters rewrite the
coreference column only.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from dataclasses import dataclass, field

from corefbert.errors import CorefBertError, note_input
from corefbert.text.durable import output_file
from corefbert.text.spans import Cluster, Mention

BEGIN = re.compile(r"^#begin document \((?P<name>.*)\);?(?: part (?P<part>\S+))?\s*$")
ID = r"\w[\w.:#-]*"  # numbers in OntoNotes and LitBank; names from other tools
ENTRY = re.compile(rf"^(?:\((?P<single>{ID})\)|\((?P<start>{ID})|(?P<end>{ID})\))$")
NO_MENTION = ("-", "", "_")
ONTONOTES_GENRES = ("bc", "bn", "mz", "nw", "pt", "tc", "wb")
MIN_COLUMNS = 5  # doc id, part, word index, word, ..., coreference
SPEAKER_COLUMN = 9  # OntoNotes: present when a line has the 11 fixed columns and the coreference column


@dataclass
class ConllDocument:
    """One ``#begin document`` ... ``#end document`` block (one part of an OntoNotes document)."""

    doc_key: str  # "<name>_<part as int>", the key end-to-end coreference systems use
    name: str
    part: str  # as written in the header ("000", "0")
    sentences: list[list[str]]  # words per sentence
    speakers: list[list[str]]  # per word; "-" / "_" when the file has no speaker content
    genre: str  # OntoNotes genre ("bc", "nw", ...) from the name, else ""
    clusters: list[Cluster]  # mentions over the flat word list (text.spans: ends inclusive), sorted by first mention
    columns: list[list[list[str]]] = field(default_factory=list)  # raw columns per sentence per word
    cluster_ids: list[str] = field(default_factory=list)  # the file's ID of each cluster (writing gold back)
    lines: list[list[str]] = field(default_factory=list)  # raw word lines per sentence (byte-identical writing)
    blank_before_end: bool = True  # a blank line between the last sentence and "#end document"
    blank_after_end: bool = False  # a blank line after "#end document"
    newline: str = "\n"  # "\r\n" for a file written on Windows
    source: str = field(default="", compare=False)  # "file:line" of the header, for messages

    @property
    def words(self) -> list[str]:
        """The flat word list the cluster indices point into."""
        return [word for sentence in self.sentences for word in sentence]

    def sentence_of_word(self) -> list[int]:
        """``[num_words]``: the sentence index of each word."""
        return [i for i, sentence in enumerate(self.sentences) for _ in sentence]


def make_doc_key(name: str, part: str) -> str:
    """``name_part`` with the part as an integer when it is one ("000" -> "0"), as e2e-coref keys it."""
    return f"{name}_{int(part)}" if part.isdigit() else f"{name}_{part}"


def genre_of(name: str) -> str:
    """OntoNotes genre: the first path component when it is one of the seven genres, else ""."""
    head = name.split("/", 1)[0]
    return head if "/" in name and head in ONTONOTES_GENRES else ""


# ------------------------------------------------------------------------------------------------ reading


def expand_paths(paths: str | list[str]) -> list[str]:
    """Files and globs -> sorted file list; a pattern that matches nothing is a one-line error."""
    found = []
    for pattern in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        pattern = str(pattern)
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise CorefBertError("no file matches this pattern; pass CoNLL-2012 files or a glob", path=pattern)
        for path in matches:
            if os.path.isdir(path):
                raise CorefBertError("is a directory; pass CoNLL files or a glob such as DIR/*_conll", path=path)
            if not os.path.isfile(path):
                raise CorefBertError("no such file; pass CoNLL-2012 files (*_conll, *.conll)", path=path)
            found.append(path)
    return found


def read_conll(paths: str | list[str]) -> list[ConllDocument]:
    """Every document of the CoNLL-2012 files ``paths`` (files or globs), in file order."""
    return [document for path in expand_paths(paths) for document in read_conll_file(path)]


def _file_text(path: str) -> str:
    note_input(path)
    with open(path, "rb") as handle:
        data = handle.read()
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise CorefBertError("binary data (a NUL byte); expected a CoNLL-2012 text file", path=path, position=line)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise CorefBertError("not UTF-8 text; re-encode the file as UTF-8", path=path, position=line) from None


def read_conll_file(path: str) -> list[ConllDocument]:
    """The documents of one file; bad input is a :class:`CorefBertError` naming ``path:line``."""
    documents, builder = [], None
    text = _file_text(path)
    if not text.strip():
        raise CorefBertError("empty file; expected CoNLL-2012 coreference data", path=path)
    lines = text.removesuffix("\n").split("\n")
    for number, line in enumerate(lines, start=1):
        if line.startswith("#begin document"):
            if builder is not None:
                raise CorefBertError(f"'#begin document' while document {builder.name!r} (line {builder.line}) "
                                     "is still open; add its '#end document'", path=path, position=number)
            builder = _DocumentBuilder(path, number, line)
        elif line.startswith("#end document"):
            if builder is None:
                raise CorefBertError("'#end document' without a '#begin document'", path=path, position=number)
            documents.append(builder.finish(number))
            builder = None
        elif builder is None:
            if line.strip():
                raise CorefBertError("text outside a document; each document starts with "
                                     "'#begin document (NAME); part N'", path=path, position=number)
            if documents:
                documents[-1].blank_after_end = True
        elif line.startswith("#"):
            raise CorefBertError(f"unexpected comment line {line[:40]!r} inside a document", path=path,
                                 position=number)
        else:
            builder.add_line(line, number)
    if builder is not None:
        raise CorefBertError(f"document {builder.name!r} has no '#end document'; the file may be truncated",
                             path=path, position=builder.line)
    if not documents:
        raise CorefBertError("no '#begin document' in the file; expected CoNLL-2012 coreference data", path=path)
    return documents


def split_columns(line: str) -> list[str]:
    """Tab-separated lines keep empty columns (LitBank's empty coreference column); others split on spaces.
    A Windows line end (``\r``) is not part of the last column."""
    line = line.rstrip("\r")
    return line.split("\t") if "\t" in line else line.split()


def parse_coref_entries(value: str) -> list[tuple[str, str]]:
    """``"(3|4)|(5)"`` -> ``[("start", "3"), ("end", "4"), ("single", "5")]``; ``-`` -> ``[]``."""
    if value in NO_MENTION:
        return []
    entries = []
    for part in value.split("|"):
        match = ENTRY.match(part)
        if match is None:
            raise ValueError(part)
        kind = next(k for k in ("single", "start", "end") if match.group(k) is not None)
        entries.append((kind, match.group(kind)))
    return entries


class _DocumentBuilder:
    """Accumulates one document's lines and pairs its mention brackets."""

    def __init__(self, path: str, line: int, header: str):
        match = BEGIN.match(header)
        if match is None:
            raise CorefBertError("bad header; expected '#begin document (NAME); part N'", path=path, position=line)
        self.path, self.line = path, line
        self.newline = "\r\n" if header.endswith("\r") else "\n"
        self.name, self.part = match.group("name"), match.group("part") or "0"
        self.sentences, self.columns, self.lines = [[]], [[]], [[]]
        self.open: dict[str, list[tuple[int, int]]] = {}  # cluster id -> stack of (start word, line)
        self.mentions: dict[str, list[Mention]] = {}
        self.words = 0
        self.blank_before_end = False

    def add_line(self, line: str, number: int) -> None:
        line = line.rstrip("\r")  # kept as the document's newline
        if not line.strip():
            if self.lines[-1]:
                self.sentences.append([])
                self.columns.append([])
                self.lines.append([])
            self.blank_before_end = True
            return
        self.blank_before_end = False
        columns = split_columns(line)
        if len(columns) < MIN_COLUMNS:
            raise CorefBertError(f"{len(columns)} columns, a CoNLL-2012 word line has at least {MIN_COLUMNS} "
                                 "(doc id, part, word index, word, ..., coreference)", path=self.path, position=number)
        if self.columns[-1] and len(columns) != len(self.columns[-1][0]):
            raise CorefBertError(f"{len(columns)} columns where this sentence's first line has "
                                 f"{len(self.columns[-1][0])}; fix the line or the missing blank line before it",
                                 path=self.path, position=number)
        self._add_brackets(columns[-1], number)
        self.sentences[-1].append(columns[3])
        self.columns[-1].append(columns)
        self.lines[-1].append(line)
        self.words += 1

    def _add_brackets(self, value: str, number: int) -> None:
        try:
            entries = parse_coref_entries(value)
        except ValueError as err:
            raise CorefBertError(f"bad coreference entry {str(err)!r}; expected '-', '(ID', 'ID)' or '(ID)' "
                                 "joined by '|'", path=self.path, position=number) from None
        word = self.words
        for kind, cluster in entries:
            if kind == "single":
                self.mentions.setdefault(cluster, []).append((word, word))
            elif kind == "start":
                self.open.setdefault(cluster, []).append((word, number))
            elif not self.open.get(cluster):
                raise CorefBertError(f"unbalanced brackets: '{cluster})' closes a mention of cluster {cluster} "
                                     "that was never opened; fix the coreference column", path=self.path,
                                     position=number)
            else:
                start, _ = self.open[cluster].pop()
                self.mentions.setdefault(cluster, []).append((start, word))

    def finish(self, end_line: int) -> ConllDocument:
        unclosed = [(line, cluster) for cluster, stack in self.open.items() for _, line in stack]
        if unclosed:
            line, cluster = min(unclosed)
            raise CorefBertError(f"unbalanced brackets: '({cluster}' is never closed before '#end document' "
                                 f"(line {end_line}); fix the coreference column", path=self.path, position=line)
        if not self.lines[-1]:
            self.sentences.pop(), self.columns.pop(), self.lines.pop()
        if not self.sentences:
            raise CorefBertError(f"document {self.name!r} has no words", path=self.path, position=self.line)
        ids = sorted(self.mentions, key=lambda c: (min(self.mentions[c]), c))
        return ConllDocument(
            doc_key=make_doc_key(self.name, self.part), name=self.name, part=self.part,
            sentences=self.sentences,
            speakers=[[c[SPEAKER_COLUMN] if len(c) > SPEAKER_COLUMN + 1 else "-" for c in s] for s in self.columns],
            genre=genre_of(self.name),
            clusters=[sorted(set(self.mentions[c])) for c in ids], columns=self.columns, cluster_ids=ids,
            lines=self.lines, blank_before_end=self.blank_before_end, newline=self.newline,
            source=f"{self.path}:{self.line}")


# ------------------------------------------------------------------------------------------------ writing


def coref_column_entries(clusters: list[Cluster], ids: list[str], num_words: int) -> list[list[tuple[str, str]]]:
    """``[num_words]`` lists of (kind, id) entries: ends first, then one-word mentions, then starts.

    Ends before starts so that a word closing one mention of a cluster and opening another of the same
    cluster reads back as those two mentions (the reader pairs brackets last-in first-out)."""
    ends, singles, starts = ([[] for _ in range(num_words)] for _ in range(3))
    for cluster, cluster_id in zip(clusters, ids):
        for start, end in sorted(set(map(tuple, cluster))):
            if not 0 <= start <= end < num_words:
                raise CorefBertError(f"mention ({start}, {end}) of cluster {cluster_id} is outside the document's "
                                     f"{num_words} words")
            if start == end:
                singles[start].append(("single", cluster_id))
            else:
                starts[start].append(("start", cluster_id))
                ends[end].append(("end", cluster_id))
    # Among starts on one word, the longer mention opens first (it closes last): proper nesting order.
    return [e + s + list(reversed(b)) for e, s, b in zip(ends, singles, starts)]


def format_entries(entries: list[tuple[str, str]], empty: str = "-") -> str:
    """Entries back to the column's text: ``[("start", "3"), ("single", "5")]`` -> ``"(3|(5)"``."""
    forms = {"single": "({})", "start": "({}", "end": "{})"}
    return "|".join(forms[kind].format(cid) for kind, cid in entries) or empty


def replace_last_column(line: str, value: str) -> str:
    """``line`` with its last column replaced by ``value``, keeping tabs, or the right edge of spaced columns."""
    if "\t" in line:
        return line[: line.rindex("\t") + 1] + value
    body = line.rstrip()
    start = len(body) - len(body.split()[-1])
    gap = len(body[:start]) - len(body[:start].rstrip())
    keep = body[: start - gap]
    return keep + " " * max(1, gap + (len(body) - start) - len(value)) + value + line[len(body):]


def document_lines(document: ConllDocument, clusters: list[Cluster] | None = None) -> list[str]:
    """The text lines of one document (no newlines), with the gold clusters or ``clusters``."""
    gold = clusters is None
    clusters = document.clusters if gold else clusters
    ids = document.cluster_ids if gold and len(document.cluster_ids) == len(clusters) else None
    ids = ids or [str(i) for i in range(len(clusters))]
    entries = coref_column_entries(clusters, ids, len(document.words))
    out = [f"#begin document ({document.name}); part {document.part}"]
    word = 0
    for s, sentence in enumerate(document.sentences):
        if s:
            out.append("")
        for w, text in enumerate(sentence):
            out.append(_word_line(document, s, w, text, entries[word]))
            word += 1
    if document.blank_before_end:
        out.append("")
    out.append("#end document")
    if document.blank_after_end:
        out.append("")
    return out


def _word_line(document: ConllDocument, s: int, w: int, text: str, entries: list[tuple[str, str]]) -> str:
    columns = document.columns[s][w] if s < len(document.columns) and w < len(document.columns[s]) else None
    if columns is None:  # a hand-built document: the 12 fixed OntoNotes columns, no SRL
        part = str(int(document.part)) if document.part.isdigit() else document.part
        speaker = document.speakers[s][w] if s < len(document.speakers) else "-"
        return "\t".join([document.name, part, str(w), text, "-", "-", "-", "-", "-", speaker, "*",
                          format_entries(entries)])
    old = columns[-1]
    empty = old if old in NO_MENTION else "-"  # LitBank writes nothing where OntoNotes writes "-"
    same = Counter(parse_coref_entries(old)) == Counter(entries)
    line = document.lines[s][w] if s < len(document.lines) and w < len(document.lines[s]) else None
    if line is not None and split_columns(line) == columns:
        return line if same else replace_last_column(line, format_entries(entries, empty=empty))
    value = old if same else format_entries(entries, empty=empty)
    return "\t".join(columns[:-1] + [value])


def write_conll(documents: list[ConllDocument], path: str,
                clusters: list[list[Cluster]] | None = None) -> None:
    """Write ``documents`` to ``path``; ``clusters`` (one cluster list per document) replaces the gold ones."""
    if clusters is not None and len(clusters) != len(documents):
        raise CorefBertError(f"{len(clusters)} cluster lists for {len(documents)} documents; pass one per document")
    text = []
    for i, document in enumerate(documents):
        lines = document_lines(document, None if clusters is None else clusters[i])
        text.append("".join(line + document.newline for line in lines))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with output_file(path, what="the CoNLL file", newline="\n") as handle:
        handle.write("".join(text))
