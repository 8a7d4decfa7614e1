"""Coreference on raw text with a model trained by ``finetune/run_coref_e2e.py``: clusters as JSON (character
spans) and an HTML view with each cluster in its own colour.

    python -m corefbert.resolve --model out/asl/best --text "Anna met Tom. She gave him a letter."
    python -m corefbert.resolve --model out/asl/best --input_file story.txt --output_dir out/story

Text is split into words by a deterministic rule (runs of letters/digits with inner ' or -, and single
punctuation marks) and into sentences after ``.``, ``!``, ``?`` (with any closing quotes or brackets) and at
blank lines. As a Python API: ``Resolver(model_dir).resolve(text)`` -> the JSON's dict.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re

import torch

from corefbert.conll import ConllDocument
from corefbert.e2e_coref import predict_clusters
from corefbert.e2e_documents import featurize
from corefbert.e2e_model import load_model
from corefbert.errors import CorefBertError, cli_entry

WORD = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]")
SENTENCE_END = {".", "!", "?"}
CLOSERS = {'"', "'", "”", "’", ")", "]", "»"}


def tokenize(text: str) -> list[list[tuple[str, int, int]]]:
    """``text`` -> sentences of ``(word, start, end)`` (character offsets, end exclusive)."""
    sentences: list[list[tuple[str, int, int]]] = []
    current: list[tuple[str, int, int]] = []
    ended = False
    for match in WORD.finditer(text):
        word, start = match.group(), match.start()
        gap = text[current[-1][2]:start] if current else ""
        closes = word in CLOSERS and not gap  # a quote right after "." closes; one after a space opens
        if current and ("\n\n" in gap.replace("\r", "") or (ended and not closes)):
            sentences.append(current)
            current = []
        current.append((word, start, match.end()))
        ended = word in SENTENCE_END or (ended and closes)
    if current:
        sentences.append(current)
    return sentences


def read_text(path: str) -> str:
    """The UTF-8 text of ``path``; a missing, binary or non-UTF-8 file is a one-line error."""
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

    def __init__(self, model_dir: str):
        self.model, self.vocab, self.tokenizer = load_model(model_dir)
        self.model.eval()

    def resolve(self, text: str) -> dict:
        """``{"text", "clusters": [[{"start", "end", "text"}, ...], ...]}`` with character offsets."""
        sentences = tokenize(text)
        if not sentences:
            raise CorefBertError("the text is empty (no words); pass some sentences")
        words = [[w for w, _, _ in s] for s in sentences]
        document = ConllDocument("text_0", "text", "0", words, [["-"] * len(s) for s in words], "", [])
        features = featurize(document, self.model.config, self.vocab, self.tokenizer)
        with torch.no_grad():
            out = self.model(**features)
        offsets = [(start, end) for s in sentences for _, start, end in s]
        clusters = predict_clusters(out.top_starts, out.top_ends, out.antecedents, out.scores)
        return {"text": text, "clusters": [[{"start": offsets[s][0], "end": offsets[e][1],
                                             "text": text[offsets[s][0]:offsets[e][1]]} for s, e in cluster]
                                           for cluster in clusters]}


def render_html(result: dict) -> str:
    """The text with every mention underlined in its cluster's colour and tagged ``[cluster number]``."""
    text, events = result["text"], []
    for number, cluster in enumerate(result["clusters"]):
        for mention in cluster:
            events.append((mention["start"], 1, -mention["end"], number))  # opens: longer spans first
            events.append((mention["end"], 0, -mention["start"], number))  # closes before opens at one offset
    events.sort()
    parts, position = [], 0
    for offset, is_open, _, number in events:
        parts.append(html.escape(text[position:offset]).replace("\n", "<br>\n"))
        position = offset
        if is_open:
            colour = f"hsl({(number * 137) % 360}, 70%, 45%)"
            parts.append(f'<span class="mention" style="border-bottom: 3px solid {colour}; '
                         f'background: hsla({(number * 137) % 360}, 70%, 45%, 0.12)">')
        else:
            parts.append(f'<sub style="color: hsl({(number * 137) % 360}, 70%, 40%)">{number + 1}</sub></span>')
    parts.append(html.escape(text[position:]).replace("\n", "<br>\n"))
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>coreference clusters</title></head>\n"
            "<body style=\"font-family: serif; line-height: 2; max-width: 50em\">\n"
            f"<p>{len(result['clusters'])} clusters</p>\n<p>{''.join(parts)}</p>\n</body></html>\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m corefbert.resolve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="A model folder written by finetune/run_coref_e2e.py.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="The text to resolve.")
    source.add_argument("--input_file", help="A UTF-8 text file to resolve.")
    parser.add_argument("--output_dir", help="Write <name>.json and <name>.html here (name: the input file's "
                                             "stem, or 'text'); the JSON is printed either way.")
    return parser.parse_args(argv)


@cli_entry
def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    text = args.text if args.text is not None else read_text(args.input_file)
    if not text.strip():
        raise CorefBertError("the text is empty; pass some sentences", path=args.input_file)
    result = Resolver(args.model).resolve(text)
    print(json.dumps(result["clusters"], ensure_ascii=False, indent=1))
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        stem = os.path.splitext(os.path.basename(args.input_file))[0] if args.input_file else "text"
        for suffix, content in ((".json", json.dumps(result, ensure_ascii=False, indent=1)),
                                (".html", render_html(result))):
            with open(os.path.join(args.output_dir, stem + suffix), "w", encoding="utf-8") as handle:
                handle.write(content)
        print(f"wrote {os.path.join(args.output_dir, stem)}.json and .html")
    return result


if __name__ == "__main__":
    main()
