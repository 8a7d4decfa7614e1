"""Reading pretraining text: one reader per input format, documents out as plain strings.

Formats, recognized by content (so WikiExtractor's extension-less ``wiki_00`` files work), each also as
``.gz`` or ``.bz2``: plain text (documents separated by blank lines, their line breaks kept); WikiText raw
files (one document per `` = Title = `` line, headings dropped, `` @-@ `` escapes undone); WikiExtractor
``<doc>`` files (the title line dropped, HTML entities unescaped); CoNLL-2012 column files (the word column,
one sentence per line); JSON lines with a ``--text_column`` field; a folder saved by ``datasets``.

A file that is empty, binary or not UTF-8 is skipped whole and reported; a missing file, a glob that
matches nothing, malformed JSON or a missing text field is a :class:`CorefBertError`.
"""

from __future__ import annotations

import codecs
import fnmatch
import glob
import html
import io
import json
import os
import re
import stat
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from corefbert.corpus.hub_datasets import hub_fingerprint, load_hub_split
from corefbert.errors import CorefBertError, one_line
from corefbert.text.durable import replace_file
from corefbert.text.jsonio import open_compressed, read_jsonl

_DOC_OPEN = re.compile(r'^<doc\b[^>]*>\s*$')
_DOC_TITLE = re.compile(r'\btitle="([^"]*)"')
# `` = Title = `` (level 1) and `` = = Section = = `` (level 2, 3, ...) lines of WikiText's raw files.
_WIKITEXT_HEADING = re.compile(r"^((?:= )+)(?!=)(.*?\S)((?: =)+)$")
_WIKITEXT_ESCAPES = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_WIKITEXT_SNIFF_BYTES = 1 << 16
# Penn Treebank escapes in CoNLL-2012 word columns (OntoNotes); LitBank writes plain punctuation.
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
                "/.": ".", "/?": "?", "/-": "-"}
_SAVED_DATASET_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
# Files only prepare_corpus writes (a corpus, its resume chunks): such a folder is output, never input text.
PREPARED_CORPUS_MARKERS = ("prepare_fingerprint.json", "prepare_summary.json", "prepare_manifest.json")
_CHUNK = 1 << 20
# A document this long is most likely several run together (no blank lines, no headings): warned about.
HUGE_DOCUMENT_CHARS = 1_000_000


@dataclass(frozen=True)
class Source:
    """One input: a text file (``kind="file"``), a saved ``datasets`` directory (``kind="dataset"``), or a split
    of a Hub dataset (``kind="hub"``, path ``hub:NAME:CONFIG:SPLIT``; :mod:`corefbert.corpus.hub_datasets`)."""

    path: str
    kind: str


def document_sources(patterns: list[str] | str | None, what: str = "--train_file",
                     skipped: list[dict] | None = None) -> list[Source]:
    """Expand files, directories and globs into sources, in a stable (sorted) order, each file once.

    A file reached through several paths (a symlink loop under a ``**`` glob, a file named twice) is read
    once, by its first path (device and inode tell files apart). FIFOs, sockets, devices and dangling links
    are not read (a FIFO would block the run); they and the repeated paths are appended to ``skipped`` as
    ``{"path", "reason"}``.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns:
        raise CorefBertError(f"no {what} given; pass text files, a directory or a glob")
    skipped = [] if skipped is None else skipped
    first_skip = len(skipped)
    sources: list[Source] = []
    seen: dict[tuple, str] = {}
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(_glob(pattern))
            if not matches:
                raise CorefBertError(f"{what} glob matches no file; check the pattern", path=pattern)
        else:
            if not os.path.lexists(pattern):
                raise CorefBertError(f"{what} not found; check the path", path=pattern)
            matches = [pattern]
        for match in matches:
            for source, identity in _expand(match, what, skipped):
                if seen.get(identity) == source.path:  # "dir/**" lists a folder and then its files again
                    continue
                if identity in seen:
                    skipped.append({"path": source.path, "reason": f"same file as {seen[identity]} (read once)",
                                    "duplicate": True})
                    continue
                seen[identity] = source.path
                sources.append(source)
    unique = {item["path"]: item for item in skipped[first_skip:]}  # a FIFO found twice is reported once
    skipped[first_skip:] = unique.values()
    if not sources:
        reasons = "; ".join(f"{one_line(s['path'])}: {s['reason']}" for s in skipped[first_skip:][:3])
        raise CorefBertError(f"{what} {patterns} holds no file" + (f" that can be read ({reasons})" if reasons else ""))
    return sources


def _glob(pattern: str) -> list[str]:
    """``glob.glob(pattern, recursive=True)``, but ``**`` enters each real directory once (Python's follows a
    link to an ancestor until the path is too long to resolve, and two such links never end)."""
    if "**" not in pattern:
        return glob.glob(pattern)
    parts = pattern.split(os.sep)
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    root = os.sep.join(parts[:fixed]) or (os.sep if pattern.startswith(os.sep) else os.curdir)
    found: list[str] = []
    entered: set[tuple[int, int]] = set()

    def join(folder: str, name: str) -> str:
        return name if folder == os.curdir and fixed == 0 else os.path.join(folder, name)

    def names(folder: str, part: str) -> list[str]:
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            return []
        return [n for n in entries if part.startswith(".") or not n.startswith(".")]

    def walk(folder: str, rest: list[str]) -> None:
        if not rest:
            found.append(folder)
            return
        part, tail = rest[0], rest[1:]
        if part == "**":
            try:
                info = os.stat(folder)
            except OSError:
                return
            if (info.st_dev, info.st_ino) in entered:
                return
            entered.add((info.st_dev, info.st_ino))
            walk(folder, tail)  # zero directories
            for name in names(folder, part):
                path = join(folder, name)
                if os.path.isdir(path):
                    walk(path, rest)
                elif not tail:
                    found.append(path)
        elif glob.has_magic(part):
            for name in names(folder, part):
                if fnmatch.fnmatchcase(name, part) and (not tail or os.path.isdir(join(folder, name))):
                    walk(join(folder, name), tail)
        elif os.path.lexists(join(folder, part)) if not tail else os.path.isdir(join(folder, part)):
            walk(join(folder, part), tail)

    walk(root, parts[fixed:])
    # A trailing "**" names the folders too (as glob does); their files are listed by _expand.
    return list(dict.fromkeys(path for path in found if path != os.curdir))


def _refuse_prepared_corpus(folder: str, what: str) -> None:
    marker = next((m for m in PREPARED_CORPUS_MARKERS if os.path.isfile(os.path.join(folder, m))), None)
    if marker is not None:
        raise CorefBertError(f"{what} includes a corpus written by prepare_corpus.py (it holds {marker}): packed "
                             "token ids, not text. Put --output_dir outside the input folder (delete this one "
                             "or move it) or list the text files themselves", path=folder)


def _file_source(path: str, skipped: list[dict]) -> list[tuple[Source, tuple]]:
    try:
        info = os.stat(path)  # follows symlinks: a loop or a dangling link raises
    except OSError as err:
        skipped.append({"path": os.path.abspath(path), "reason": f"cannot be opened ({err.strerror or err})"})
        return []
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a file")
        skipped.append({"path": os.path.abspath(path), "reason": f"not a regular file ({kind}); not read"})
        return []
    return [(Source(os.path.abspath(path), "file"), (info.st_dev, info.st_ino))]


def _expand(path: str, what: str, skipped: list[dict]) -> list[tuple[Source, tuple]]:
    """The sources of one path, each with the identity of what it resolves to."""
    if not os.path.isdir(path):
        return _file_source(path, skipped)
    _refuse_prepared_corpus(path, what)
    if any(os.path.isfile(os.path.join(path, m)) for m in _SAVED_DATASET_MARKERS):
        return [(Source(os.path.abspath(path), "dataset"), ("dataset", os.path.realpath(path)))]
    found = []
    # os.walk does not follow symlinked folders (no loops); every file is stat-ed for its identity.
    for root, dirs, files in os.walk(path):
        _refuse_prepared_corpus(root, what)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                found.extend(_file_source(os.path.join(root, name), skipped))
    return found


def source_fingerprint(sources: list[Source]) -> list:
    """Path, size and modification time of every file behind ``sources`` (the cache key's input part)."""
    out = []
    for source in sources:
        if source.kind == "hub":  # the dataset's own fingerprint, not file times
            out.append(hub_fingerprint(source.path))
            continue
        paths = [source.path] if source.kind != "dataset" else \
            sorted(os.path.join(r, f) for r, _, fs in os.walk(source.path) for f in fs)
        for path in paths:
            info = os.stat(path)
            out.append([path, info.st_size, info.st_mtime_ns])
    return out


def unreadable_reason(path: str) -> str | None:
    """Why a text file cannot be read as a corpus (empty, binary, not UTF-8), or None if it can."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    position, pending, has_text = 0, 0, False
    try:
        with open_compressed(path) as handle:
            while chunk := handle.read(_CHUNK):
                nul = chunk.find(b"\0")
                if nul >= 0:
                    return f"binary file (NUL byte at byte {position + nul})"
                try:
                    has_text = bool(decoder.decode(chunk).strip()) or has_text
                except UnicodeDecodeError as err:
                    return f"not UTF-8 (byte {position + err.start}); re-encode it as UTF-8"
                position += len(chunk)
            pending = len(decoder.getstate()[0])
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as err:
        return f"not UTF-8 (truncated sequence at byte {position - pending + err.start}); re-encode it as UTF-8"
    except (OSError, EOFError, zlib.error) as err:  # zlib.error: a .gz whose deflate data is corrupt
        return f"unreadable ({err.__class__.__name__}: {err})"
    return None if has_text else "empty file"


def wikitext_heading_level(line: str) -> int:
    """1 for a WikiText `` = Title = `` line, 2 for `` = = Section = = `` and so on; 0 for any other line."""
    match = _WIKITEXT_HEADING.match(line.strip())
    if not match or len(match.group(1)) != len(match.group(3)):
        return 0
    return len(match.group(1)) // 2


def sniff_format(path: str) -> str:
    """``wikiextractor``, ``jsonl``, ``conll-2012``, ``wikitext`` or ``text``, by content: the first text
    (``<doc``, ``{``, ``#begin document``), else a WikiText heading line within the first 64 KiB."""
    with open_compressed(path) as handle:
        raw = handle.read(_WIKITEXT_SNIFF_BYTES)
    text = raw.decode("utf-8-sig", errors="ignore")
    head = text.lstrip(" \t\r\n")
    if head.startswith("<doc"):
        return "wikiextractor"
    if head.startswith("{"):
        return "jsonl"
    if head.startswith("#begin document"):
        return "conll-2012"
    lines = text.splitlines()
    if len(raw) == _WIKITEXT_SNIFF_BYTES:
        lines = lines[:-1]  # the last line may be cut in the middle
    if any(wikitext_heading_level(line) for line in lines):
        return "wikitext"
    return "text"


def _lines(path: str) -> Iterator[str]:
    # Universal newlines (\r\n, \r -> \n) but not str.splitlines' form feeds and other separators.
    with open_compressed(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline=None) as handle:
        yield from handle


def _plain_documents(path: str) -> Iterator[str]:
    lines: list[str] = []
    for line in _lines(path):
        if line.strip():
            lines.append(line.rstrip("\n"))
        elif lines:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


def _wikitext_documents(path: str) -> Iterator[str]:
    # Blank lines separate paragraphs, not articles, in WikiText; only a level-1 heading starts one.
    lines: list[str] = []
    for line in _lines(path):
        level = wikitext_heading_level(line)
        if level == 1 and lines:
            yield "\n".join(lines)
            lines = []
        if level or not line.strip():
            continue
        text = line.strip()
        for escaped, plain in _WIKITEXT_ESCAPES:
            text = text.replace(escaped, plain)
        lines.append(text)
    if lines:
        yield "\n".join(lines)


def _conll_documents(path: str) -> Iterator[str]:
    # One document per "#begin document (name); part N" block; the word column is the 4th.
    sentences: list[str] = []
    words: list[str] = []
    for number, line in enumerate(_lines(path), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            if words:
                sentences.append(" ".join(words))
                words = []
            if stripped.startswith(("#begin document", "#end document")) and sentences:
                yield "\n".join(sentences)
                sentences = []
            continue
        columns = stripped.split()
        if len(columns) < 4:
            raise CorefBertError(f"CoNLL-2012 token line with {len(columns)} column(s); expected at least 4 "
                                 "(document, part, word index, word, ...)", path=path, position=number)
        words.append(_PTB_ESCAPES.get(columns[3], columns[3]))
    if words:
        sentences.append(" ".join(words))
    if sentences:
        yield "\n".join(sentences)


def _wiki_body(lines: list[str], title: str | None) -> str:
    while lines and not lines[0].strip():
        lines.pop(0)
    # WikiExtractor writes the title line escaped or not depending on its version ("A &amp; B").
    if lines and title is not None and html.unescape(lines[0]).strip() == html.unescape(title).strip():
        lines.pop(0)
    return html.unescape("\n".join(lines)).strip()


def _wikiextractor_documents(path: str) -> Iterator[str]:
    lines: list[str] | None = None
    title = None
    for line in _lines(path):
        opening = _DOC_OPEN.match(line) if line.startswith("<doc") else None
        if opening:
            if lines is not None:  # an unclosed <doc>: keep what it had
                yield _wiki_body(lines, title)
            title_match = _DOC_TITLE.search(line)
            lines, title = [], title_match.group(1) if title_match else None
        elif line.startswith("</doc>"):
            if lines is not None:
                yield _wiki_body(lines, title)
            lines = None
        elif lines is not None:
            lines.append(line.rstrip("\n"))
    if lines is not None:
        yield _wiki_body(lines, title)


def _jsonl_documents(path: str, text_column: str) -> Iterator[str]:
    for number, record in read_jsonl(path, expected="fix or remove that line"):
        if not isinstance(record, dict) or text_column not in record:
            keys = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise CorefBertError(f"no {text_column!r} field (found {keys}); pass --text_column",
                                 path=path, position=number)
        text = record[text_column]
        if not isinstance(text, str):
            raise CorefBertError(f"field {text_column!r} is {type(text).__name__}, not text", path=path, position=number)
        title = record.get("title")
        if isinstance(title, str) and html.unescape(text.lstrip()).startswith(html.unescape(title)):
            text = _wiki_body(text.split("\n"), title)
        yield text.strip()


def _dataset_documents(path: str, text_column: str) -> Iterator[str]:
    import datasets

    try:
        data = datasets.load_from_disk(path)
    except (FileNotFoundError, ValueError) as err:
        raise CorefBertError(f"not a loadable saved dataset ({err})", path=path) from None
    if isinstance(data, datasets.DatasetDict):
        if "train" not in data and len(data) != 1:
            raise CorefBertError(f"saved DatasetDict has splits {list(data)} and no 'train'", path=path)
        data = data["train"] if "train" in data else next(iter(data.values()))
    yield from _column_texts(data, text_column, path)


def _column_texts(data, text_column: str, path: str) -> Iterator[str]:
    """The ``text_column`` of every row of a ``datasets.Dataset`` (a saved one or a Hub split), stripped."""
    if text_column not in data.column_names:
        raise CorefBertError(f"no column {text_column!r} (columns: {data.column_names}); pass --text_column",
                             path=path)
    for batch in data.select_columns([text_column]).iter(batch_size=1000):
        for text in batch[text_column]:
            yield (text or "").strip()


def iter_documents(source: Source, text_column: str = "text") -> Iterator[str]:
    """Yield the documents of one readable source (possibly empty strings, which callers count)."""
    if source.kind == "hub":
        yield from _column_texts(load_hub_split(source.path), text_column, source.path)
        return
    if source.kind == "dataset":
        yield from _dataset_documents(source.path, text_column)
        return
    kind = sniff_format(source.path)
    if kind == "jsonl":
        yield from _jsonl_documents(source.path, text_column)
        return
    readers = {"wikiextractor": _wikiextractor_documents, "conll-2012": _conll_documents,
               "wikitext": _wikitext_documents, "text": _plain_documents}
    yield from readers[kind](source.path)


def generate_documents(sources: tuple[Source, ...], text_column: str, report_path: str) -> Iterator[dict]:
    """``Dataset.from_generator`` body: rows ``{"doc_id", "text"}``; skips are written to ``report_path``.
    ``sources`` is a tuple: ``datasets`` would split a list into shards, restarting ``doc_id`` in each."""
    skipped_files, empty_documents, doc_id = [], 0, 0
    formats: dict[str, int] = {}
    huge = {"count": 0, "longest": 0, "path": None}
    for source in sources:
        if source.kind == "file":
            reason = unreadable_reason(source.path)
            if reason is not None:
                skipped_files.append({"path": source.path, "reason": reason})
                continue
        kind = {"file": None, "hub": "hub dataset"}.get(source.kind, "saved dataset") or sniff_format(source.path)
        formats[kind] = formats.get(kind, 0) + 1
        for text in iter_documents(source, text_column):
            if not text:
                empty_documents += 1
                continue
            if len(text) > HUGE_DOCUMENT_CHARS:
                huge["count"] += 1
                if len(text) > huge["longest"]:
                    huge.update(longest=len(text), path=source.path)
            yield {"doc_id": doc_id, "text": text}
            doc_id += 1
    replace_file(report_path, json.dumps({"documents": doc_id, "skipped_files": skipped_files,
                                          "empty_documents": empty_documents, "formats": formats,
                                          "huge_documents": huge}))


def merge_read_reports(reports: list[dict]) -> tuple[dict, dict]:
    """Files per input format and the over-long documents, summed over several ``generate_documents`` reports."""
    formats = Counter()
    for report in reports:
        formats.update(report["formats"])
    longest = max((report["huge_documents"] for report in reports), key=lambda huge: huge["longest"])
    count = sum(report["huge_documents"]["count"] for report in reports)
    return dict(formats), {"count": count, "longest": longest["longest"], "path": longest["path"]}
