"""Extractive QA shared by QUOREF and MRQA/SQuAD: examples, readers, answer alignment.

Two official file formats are read here, each by one reader:

- SQuAD-style JSON (SQuAD v1.1, Quoref): ``{"data": [{"paragraphs": [{"context", "qas": [{"id",
  "question", "answers": [{"text", "answer_start"}]}]}]}]}``. In Quoref, the ``answers`` of a
  question are the spans of one multi-span answer; in SQuAD they are alternative gold answers.
- MRQA JSONL: an optional ``{"header": ...}`` first line, then one ``{"context", "qas": [{"qid",
  "question", "answers": [str], "detected_answers": [{"text", "char_spans": [[start, end_incl]]}]}]}``
  per line (plain or ``.gz``).

Answers are located in the context by character offsets; when an offset does not point at its text
(known to happen in Quoref) the answer is re-aligned to the nearest occurrence of its text, and when the
text is not in the context at all the answer is skipped. Both are counted and reported once per file.
Windowing and decoding live in :mod:`corefbert.tasks.qa.windows`.
"""

from __future__ import annotations

import logging
import os
import re
from contextlib import closing
from dataclasses import dataclass, field

from corefbert.errors import CorefBertError
from corefbert.text.jsonio import read_json, read_jsonl

logger = logging.getLogger(__name__)


@dataclass
class AnswerSpan:
    """A gold answer located in the context: characters ``[start, end)``."""

    start: int
    end: int
    text: str


@dataclass
class QAExample:
    """One question over one context: ``answers`` the located spans the training labels come from (sorted by
    position), ``gold_texts`` the strings the metric scores against (Quoref: all spans of the answer; SQuAD
    and MRQA: the alternative answers)."""

    qid: str
    question: str
    context: str
    answers: list[AnswerSpan] = field(default_factory=list)
    gold_texts: list[str] = field(default_factory=list)


@dataclass
class ReadStats:
    """What a reader had to repair or drop, so a caller can report it."""

    realigned: int = 0
    unlocatable: int = 0
    unanswerable: int = 0

    def report(self, path: str) -> None:
        if self.realigned:
            logger.warning("%s: %d answer offset(s) did not match their text; aligned to the nearest "
                           "occurrence of the text", path, self.realigned)
        if self.unlocatable:
            logger.warning("%s: %d answer(s) not found in their context; skipped for training (still scored)",
                           path, self.unlocatable)
        if self.unanswerable:
            logger.warning("%s: %d unanswerable question(s) (SQuAD 2.0 is_impossible) skipped: extractive QA "
                           "needs an answer", path, self.unanswerable)


def locate_answer(context: str, text: str, start: int | None, stats: ReadStats) -> AnswerSpan | None:
    """The span of ``text`` in ``context``: at ``start`` when it matches, else the nearest occurrence."""
    if not text.strip():
        stats.unlocatable += 1
        return None
    if start is not None and 0 <= start and context[start : start + len(text)] == text:
        return AnswerSpan(start, start + len(text), text)
    occurrences = [m.start() for m in re.finditer(f"(?={re.escape(text)})", context)]  # overlapping ones too
    if not occurrences:
        stats.unlocatable += 1
        return None
    stats.realigned += 1
    anchor = start if start is not None else 0
    best = min(occurrences, key=lambda pos: (abs(pos - anchor), pos))
    return AnswerSpan(best, best + len(text), text)


def _require(condition: bool, what: str, path: str, position: str) -> None:
    if not condition:
        raise CorefBertError(f"{what}; expected the official SQuAD/Quoref JSON layout", path=path, position=position)


def read_squad_json(path: str, keep_unanswered: bool = False) -> list[QAExample]:
    """Read a SQuAD v1.1 / Quoref JSON file; questions without answers (SQuAD 2.0 ``is_impossible``, or a
    test file) are skipped and counted, unless ``keep_unanswered`` (to predict on a test file)."""
    root = read_json(path)
    _require(isinstance(root, dict) and isinstance(root.get("data"), list), 'no top-level "data" list', path, "root")
    stats = ReadStats()
    examples: list[QAExample] = []
    for a, article in enumerate(root["data"]):
        where = f"data[{a}]"
        _require(isinstance(article, dict) and isinstance(article.get("paragraphs"), list),
                 'an article without a "paragraphs" list', path, where)
        for p, paragraph in enumerate(article["paragraphs"]):
            where = f"data[{a}].paragraphs[{p}]"
            _require(isinstance(paragraph, dict) and isinstance(paragraph.get("context"), str)
                     and isinstance(paragraph.get("qas"), list),
                     'a paragraph without a "context" string and a "qas" list', path, where)
            context = paragraph["context"]
            for q, qa in enumerate(paragraph["qas"]):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                _require(isinstance(qa, dict) and "id" in qa and isinstance(qa.get("question"), str)
                         and isinstance(qa.get("answers"), list),
                         'a question without "id", "question" and an "answers" list', path, where)
                if (qa.get("is_impossible") or not qa["answers"]) and not keep_unanswered:
                    stats.unanswerable += 1
                    continue
                example = QAExample(str(qa["id"]), qa["question"], context)
                for answer in qa["answers"]:
                    _require(isinstance(answer, dict) and isinstance(answer.get("text"), str),
                             'an answer without a "text" string', path, where)
                    example.gold_texts.append(answer["text"])
                    start = answer.get("answer_start")
                    span = locate_answer(context, answer["text"], start if isinstance(start, int) else None, stats)
                    if span is not None:
                        example.answers.append(span)
                example.answers.sort(key=lambda span: (span.start, span.end))
                examples.append(example)
    if not examples:
        raise CorefBertError("no answerable question in the file", path=path)
    stats.report(path)
    return examples


def read_mrqa_jsonl(path: str, keep_unanswered: bool = False) -> list[QAExample]:
    """Read an MRQA JSONL(.gz) file; the ``{"header": ...}`` first line is optional (samples lack it)."""
    stats = ReadStats()
    examples: list[QAExample] = []
    for line_number, record in read_jsonl(path, expected="expected MRQA JSONL"):
        if isinstance(record, dict) and "header" in record:
            continue
        if not (isinstance(record, dict) and isinstance(record.get("context"), str)
                and isinstance(record.get("qas"), list)):
            raise CorefBertError('a line without a "context" string and a "qas" list; expected MRQA JSONL',
                                 path=path, position=line_number)
        try:
            examples += _mrqa_examples(record, keep_unanswered, stats, path, line_number)
        except (TypeError, ValueError, AttributeError):
            # A field of the wrong type (answers not a list, char_spans not [start, end] integer pairs, ...).
            raise CorefBertError("a question's answers, detected_answers or char_spans have the wrong type; "
                                 "expected MRQA JSONL", path=path, position=line_number) from None
    if not examples:
        raise CorefBertError("no question in the file; expected MRQA JSONL", path=path)
    stats.report(path)
    return examples


def _mrqa_examples(record: dict, keep_unanswered: bool, stats: ReadStats, path: str,
                   line_number: int) -> list[QAExample]:
    """The questions of one MRQA context line."""
    context = record["context"]
    examples = []
    for qa in record["qas"]:
        if not (isinstance(qa, dict) and isinstance(qa.get("question"), str) and ("qid" in qa or "id" in qa)):
            raise CorefBertError('a question without "qid" and "question"', path=path, position=line_number)
        if qa.get("is_impossible") and not keep_unanswered:
            stats.unanswerable += 1
            continue
        example = QAExample(str(qa.get("qid", qa.get("id"))), qa["question"], context)
        example.gold_texts = [str(text) for text in qa.get("answers", [])]
        seen = set()
        for detected in qa.get("detected_answers", []):
            for start, end_inclusive in detected.get("char_spans", []):
                if (start, end_inclusive) in seen:
                    continue
                seen.add((start, end_inclusive))
                if 0 <= start <= end_inclusive < len(context):
                    text = context[start : end_inclusive + 1]
                    example.answers.append(AnswerSpan(start, end_inclusive + 1, text))
                else:
                    span = locate_answer(context, detected.get("text", ""), None, stats)
                    if span is not None:
                        example.answers.append(span)
        if not example.gold_texts:
            example.gold_texts = [str(detected.get("text", "")) for detected in qa.get("detected_answers", [])]
        example.answers.sort(key=lambda span: (span.start, span.end))
        examples.append(example)
    return examples


def detect_format(path: str) -> str:
    """``"squad"`` for a SQuAD-style JSON file, ``"mrqa"`` for MRQA JSONL, from the name or first line."""
    name = path[:-3] if path.endswith(".gz") else path
    if name.endswith(".jsonl"):
        return "mrqa"
    if name.endswith(".json"):
        return "squad"
    try:
        with closing(read_jsonl(path)) as lines:
            _, record = next(lines)
    except StopIteration:
        return "squad"  # the reader then names what is wrong with the file
    except CorefBertError:
        if not os.path.isfile(path):
            raise
        return "squad"  # a pretty-printed JSON document does not parse line by line
    return "mrqa" if isinstance(record, dict) and ("header" in record or "context" in record) else "squad"


def read_qa_file(path: str, data_format: str = "auto", keep_unanswered: bool = False) -> list[QAExample]:
    """Read ``path`` as ``"squad"`` (JSON), ``"mrqa"`` (JSONL) or ``"auto"`` (detected)."""
    if data_format == "auto":
        data_format = detect_format(path)
    if data_format == "squad":
        return read_squad_json(path, keep_unanswered)
    if data_format == "mrqa":
        return read_mrqa_jsonl(path, keep_unanswered)
    raise CorefBertError(f"unknown data format {data_format!r}; use auto, squad or mrqa")
