"""Coreference on raw text with a model trained by ``finetune/run_coref_e2e.py``: clusters as JSON (character
spans) and an HTML view with each cluster in its own colour.

    python -m corefbert.tasks.coref_e2e.resolve --model out/asl/best --text "Anna met Tom. She gave him a letter."
    python -m corefbert.tasks.coref_e2e.resolve --model out/asl/best --input_file story.txt --output_dir out/story

Text is split into words by a deterministic rule (runs of letters/digits with inner ' or -, and single
punctuation marks) and into sentences after ``.``, ``!``, ``?`` (with any closing quotes or brackets) and at
blank lines. As a Python API: ``Resolver(model_dir).resolve(text)`` -> the JSON's dict.

Memory and time are bounded by the model's settings, not by the text: words are read one sentence at a time,
a sentence longer than ``--max_sentence_words`` is read as pieces, and the model runs on consecutive segments
of whole sentences of at most ``--max_segment_words`` words (both default to what the model was trained
with). Mentions are linked within a segment only: a text longer than one segment gets each segment's clusters.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
from collections import defaultdict
from collections.abc import Iterator

import torch

from corefbert.errors import CorefBertError, cli_entry
from corefbert.tasks.coref_e2e.documents import featurize, segment_sentences, sentence_pieces
from corefbert.tasks.coref_e2e.model import load_model
from corefbert.tasks.coref_e2e.span_ranking import predict_clusters
from corefbert.text.conll import ConllDocument

WORD = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]")
SENTENCE_END = {".", "!", "?"}
CLOSERS = {'"', "'", "”", "’", ")", "]", "»"}


def iter_sentences(text: str) -> Iterator[list[tuple[str, int, int]]]:
    """``text`` -> sentences of ``(word, start, end)`` (character offsets, end exclusive), one at a time."""
    current: list[tuple[str, int, int]] = []
    ended = False
    for match in WORD.finditer(text):
        word, start = match.group(), match.start()
        gap = text[current[-1][2]:start] if current else ""
        closes = word in CLOSERS and not gap  # a quote right after "." closes; one after a space opens
        if current and ("\n\n" in gap.replace("\r", "") or (ended and not closes)):
            yield current
            current = []
        current.append((word, start, match.end()))
        ended = word in SENTENCE_END or (ended and closes)
    if current:
        yield current


def tokenize(text: str) -> list[list[tuple[str, int, int]]]:
    """Every sentence of :func:`iter_sentences` as one list."""
    return list(iter_sentences(text))


def read_text(path: str) -> str:
    """The UTF-8 text of ``path``; a missing, binary or non-UTF-8 file or a folder is a one-line error."""
    if os.path.isdir(path):
        raise CorefBertError("a folder, not a file; pass a UTF-8 text file (one text per run)", path=path)
    if not os.path.isfile(path):
        raise CorefBertError("no such file; pass a UTF-8 text file", path=path)
    with open(path, "rb") as handle:
        data = handle.read()
    if b"\x00" in data:
        raise CorefBertError("a binary file (NUL bytes); pass a UTF-8 text file", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorefBertError(f"not UTF-8 text (byte {err.start}); convert it to UTF-8", path=path) from None


class Resolver:
    """A trained end-to-end coreference model, loaded once; :meth:`resolve` turns text into clusters."""

    def __init__(self, model_dir: str, max_sentence_words: int | None = None, max_segment_words: int | None = None):
        self.model, self.vocab, self.tokenizer = load_model(model_dir)
        self.model.eval()
        self.max_sentence_words = max_sentence_words or self.model.config.max_sentence_words
        self.max_segment_words = max_segment_words or self.model.config.max_segment_words

    def resolve(self, text: str) -> dict:
        """``{"text", "clusters": [[{"start", "end", "text"}, ...], ...]}`` with character offsets; a text longer
        than one segment gets the clusters of each segment, in order."""
        pieces = sentence_pieces(iter_sentences(text), min(self.max_sentence_words, self.max_segment_words))
        clusters: list[list[dict]] = []
        for segment in segment_sentences(pieces, self.max_segment_words):
            clusters += self._resolve_segment(text, segment)
        if not clusters and not WORD.search(text):
            raise CorefBertError("the text is empty (no words); pass some sentences")
        return {"text": text, "clusters": clusters}

    def _resolve_segment(self, text: str, sentences: list[list[tuple[str, int, int]]]) -> list[list[dict]]:
        """The clusters of one segment's ``sentences`` as character spans of ``text``."""
        words = [[w for w, _, _ in s] for s in sentences]
        document = ConllDocument("text_0", "text", "0", words, [["-"] * len(s) for s in words], "", [])
        features = featurize(document, self.model.config, self.vocab, self.tokenizer)
        with torch.no_grad():
            out = self.model(**features)
        offsets = [(start, end) for s in sentences for _, start, end in s]
        clusters = predict_clusters(out.top_starts, out.top_ends, out.antecedents, out.scores)
        return [[{"start": offsets[s][0], "end": offsets[e][1], "text": text[offsets[s][0]:offsets[e][1]]}
                 for s, e in cluster] for cluster in clusters]


def _open_tag(index: int, number: int) -> str:
    hue = (number * 137) % 360
    return (f'<span class="mention" data-cluster="{number + 1}" data-mention="{index}" style="border-bottom: 3px '
            f'solid hsl({hue}, 70%, 45%); background: hsla({hue}, 70%, 45%, 0.12)">')


def render_html(result: dict) -> str:
    """The text with every mention underlined in its cluster's colour and tagged with its cluster number.

    Tags must nest, and mentions of two clusters may cross (``[a [b a] b]``): where a mention ends inside
    another that opened after it, the inner one is closed there and reopened right after, so each ``<span>``
    belongs to one mention (``data-mention``) of one cluster (``data-cluster``), and the number is written at
    the mention's real end."""
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m corefbert.tasks.coref_e2e.resolve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="A model folder written by finetune/run_coref_e2e.py.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="The text to resolve.")
    source.add_argument("--input_file", help="A UTF-8 text file to resolve.")
    parser.add_argument("--output_dir", help="Write <name>.json and <name>.html here (name: the input file's "
                                             "stem, or 'text'); the JSON is printed either way.")
    parser.add_argument("--max_sentence_words", type=int, help="Read longer sentences as pieces of this many "
                                                               "words (default: the model's setting).")
    parser.add_argument("--max_segment_words", type=int, help="Run the model on segments of whole sentences of at "
                        "most this many words; mentions link within a segment (default: the model's setting).")
    return parser.parse_args(argv)


def check_output_dir(path: str | None) -> None:
    """Refuse an ``--output_dir`` that names a file before the model is loaded and the text resolved."""
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
        raise CorefBertError("--output_dir names an existing file; pass a folder (it is created if missing)",
                             path=path)


def make_output_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:  # a file where a parent folder should be, no permission
        raise CorefBertError(f"cannot create --output_dir ({err.strerror}); pass a writable folder",
                             path=path) from None


@cli_entry
def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    for name in ("max_sentence_words", "max_segment_words"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise CorefBertError(f"--{name} must be at least 1 (got {getattr(args, name)})")
    text = args.text if args.text is not None else read_text(args.input_file)
    if not text.strip():
        raise CorefBertError("the text is empty; pass some sentences", path=args.input_file)
    check_output_dir(args.output_dir)
    result = Resolver(args.model, args.max_sentence_words, args.max_segment_words).resolve(text)
    print(json.dumps(result["clusters"], ensure_ascii=False, indent=1))
    if args.output_dir:
        make_output_dir(args.output_dir)
        stem = os.path.splitext(os.path.basename(args.input_file))[0] if args.input_file else "text"
        for suffix, content in ((".json", json.dumps(result, ensure_ascii=False, indent=1)),
                                (".html", render_html(result))):
            with open(os.path.join(args.output_dir, stem + suffix), "w", encoding="utf-8") as handle:
                handle.write(content)
        print(f"wrote {os.path.join(args.output_dir, stem)}.json and .html")
    return result


if __name__ == "__main__":
    main()
