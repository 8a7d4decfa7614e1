"""Readers for the pronoun-coreference benchmarks, one per file format (docs/guides/coref.md, "Formats read"):
GAP TSV, 4-line blocks (DPR/WSCR, WSC273, PDP, WinoGender, WikiCREM: sentence; pronoun, or ``[MASK]`` which
the sentence then holds literally; comma-separated candidates; the answer; a blank line between blocks), WSC
XML (``WSCollection.xml``, ISO-8859-1) and WinoGender's ``all_sentences.tsv``.

Every reader returns ``(examples, skipped)``: a structural problem with the file (wrong column count, an offset
that does not match the text, a block that is not 4 lines) raises one :class:`CorefBertError` line; a
well-formed problem that cannot be used (answer not among the candidates, pronoun missing, fewer than two
candidates) is counted in ``skipped`` by reason, or raises with ``strict=True``.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from itertools import groupby

from corefbert.errors import CorefBertError
from corefbert.pronouns import LEXICON, forms_of

logger = logging.getLogger(__name__)

MASK_LITERAL = "[MASK]"
WSC273 = 273  # WSCollection.xml's first 273 schemas are the WSC273 benchmark
WSC_SCHEMAS = ("auto", "wsc273", "all")
# Gender of the GAP pronouns (the official scorer's constants.py: he, him, his; she, her, hers).
GAP_PRONOUN_GENDER = {w: g for g in ("masculine", "feminine") for w in forms_of(g)}
WINOGENDER_PRONOUNS = {"male": forms_of("masculine"), "female": forms_of("feminine"),
                       "neutral": forms_of(None, number="plural")}
FORMATS = ("gap", "blocks", "wsc_xml", "winogender")


@dataclass
class PronounExample:
    """One pronoun to resolve among named candidates: ``pronoun_start``/``pronoun_end`` are character offsets
    (end exclusive) of the pronoun (or of the literal ``[MASK]``) in ``text``; ``candidate_spans[i]`` every
    span where candidate ``i`` occurs (:func:`candidate_spans`; never the pronoun's, empty where it does not
    occur); ``label`` the index of the referent, or ``None`` when no candidate is (GAP)."""

    id: str
    text: str
    pronoun_start: int
    pronoun_end: int
    candidates: list[str]
    label: int | None
    candidate_spans: list[list[tuple[int, int]]] = field(default_factory=list)
    gender: str | None = None
    candidate_match: list[str] = field(default_factory=list)  # per candidate, how it was found (MATCH_TIERS)

    @property
    def pronoun(self) -> str:
        return self.text[self.pronoun_start:self.pronoun_end]

    @property
    def gold(self) -> list[bool]:
        """Per candidate: is it the pronoun's referent (the GAP ``A-coref``/``B-coref`` columns)."""
        return [i == self.label for i in range(len(self.candidates))]


class _Skips:
    """Counts skipped problems by reason; in strict mode the first one raises."""

    def __init__(self, path: str, strict: bool):
        self.path, self.strict, self.counts = path, strict, Counter()

    def __call__(self, reason: str, position: object, detail: str) -> None:
        if self.strict:
            raise CorefBertError(f"{detail}; fix the problem or drop --strict to skip and count it",
                                 path=self.path, position=position)
        self.counts[reason] += 1


def _word_spans(text: str, phrase: str, exclude: tuple[int, int] | None = None) -> list[tuple[int, int]]:
    """Case-insensitive whole-word occurrences of ``phrase`` in ``text``, not overlapping ``exclude``."""
    phrase = phrase.strip()
    if not phrase:
        return []
    # \b only works next to word characters; a phrase ending in punctuation ("Tina's.") needs a lookaround.
    pattern = r"(?<!\w)" + re.escape(phrase) + r"(?!\w)"
    spans = [(m.start(), m.end()) for m in re.finditer(pattern, text, flags=re.IGNORECASE)]
    if exclude is not None:
        spans = [s for s in spans if s[1] <= exclude[0] or s[0] >= exclude[1]]
    return spans


# Words that may precede a candidate's head without changing what it names ("the son" = "his son").
DETERMINERS = frozenset("the a an this that these those".split()) | frozenset(
    w for w, p in LEXICON.items() if "determiner" in p.forms)
# A word that ends the head phrase of a longer candidate ("the man in the red hat" -> "the man").
_HEAD_END = frozenset("of with in on at from by for to near under over behind who whom whose which that".split())
_POSSESSIVE = re.compile(r"(?:'s|’s|'|’)$")
MATCH_TIERS = ("exact", "no_determiner", "head_word", "possessor", "unmatched")


def candidate_spans(text: str, candidate: str, exclude: tuple[int, int] | None = None,
                    claimed: list[tuple[int, int]] = ()) -> tuple[list[tuple[int, int]], str]:
    """Where ``candidate`` occurs in ``text``, and how it was found (one of :data:`MATCH_TIERS`).

    The one matcher of every scoring path (the WSC literature's tolerance): the whole phrase, case-insensitive
    and whole-word ("The trophy" finds "the trophy"); else without leading determiners or a trailing
    possessive ("the son" finds "his son", "Sam's" finds "Sam"); else its head word, the last word before a
    preposition or relative pronoun ("the man in the red hat" -> "man"), at occurrences not ``claimed`` by
    another candidate; else the possessor of a possessive phrase ("Tina's drawing" -> "Tina" when "drawing"
    belongs to "Sam's drawing"). ``exclude`` is the pronoun's span. Empty spans and ``"unmatched"``: the
    candidate is a paraphrase with no occurrence.
    """
    spans = _word_spans(text, candidate, exclude)
    if spans:
        return spans, "exact"
    words = re.findall(r"[\w'’.\-]+", candidate)
    if not words:
        return [], "unmatched"

    def free(phrase: str) -> list[tuple[int, int]]:
        return [s for s in _word_spans(text, phrase, exclude) if not any(s[0] < e and b < s[1] for b, e in claimed)]

    bare = words
    while len(bare) > 1 and bare[0].casefold() in DETERMINERS:
        bare = bare[1:]
    bare = bare[:-1] + [_POSSESSIVE.sub("", bare[-1]) or bare[-1]]
    if bare != words and (spans := free(" ".join(bare))):
        return spans, "no_determiner"
    head_phrase = next((bare[:i] for i in range(1, len(bare)) if bare[i].casefold() in _HEAD_END), bare)
    head = _POSSESSIVE.sub("", head_phrase[-1]) or head_phrase[-1]
    if len(bare) > 1 and (spans := free(head)):
        return spans, "head_word"
    possessors = [_POSSESSIVE.sub("", w) for w in bare[:-1] if _POSSESSIVE.search(w)]
    if possessors and (spans := free(possessors[-1])):
        return spans, "possessor"
    return [], "unmatched"


def match_candidates(text: str, candidates: list[str], exclude: tuple[int, int] | None = None
                     ) -> tuple[list[list[tuple[int, int]]], list[str]]:
    """:func:`candidate_spans` of each candidate; a loose match never takes another candidate's exact match."""
    exact = [_word_spans(text, cand, exclude) for cand in candidates]
    claimed = [[s for j, other in enumerate(exact) if j != i for s in other] for i in range(len(candidates))]
    found = [candidate_spans(text, cand, exclude, taken) for cand, taken in zip(candidates, claimed)]
    return [spans for spans, _ in found], [tier for _, tier in found]


def _find_pronoun(text: str, pronoun: str, candidates: list[str]) -> tuple[int, int] | None:
    """Locate the pronoun: the literal ``[MASK]``, else its first whole-word occurrence outside a candidate.

    Kocijan et al. replace the first `` pronoun `` (space-delimited); a word-boundary match also finds a
    pronoun before punctuation or at the start, and skipping candidate spans avoids the "her" of "her friend".
    """
    if pronoun == MASK_LITERAL or MASK_LITERAL in pronoun:
        start = text.find(MASK_LITERAL)
        return None if start < 0 else (start, start + len(MASK_LITERAL))
    taken = [span for cand in candidates for span in _word_spans(text, cand)]
    for flags in (0, re.IGNORECASE):
        for m in re.finditer(r"(?<!\w)" + re.escape(pronoun) + r"(?!\w)", text, flags=flags):
            if not any(s <= m.start() < e for s, e in taken):
                return m.start(), m.end()
    return None


def _example(ex_id: str, text: str, span: tuple[int, int], candidates: list[str], label: int | None,
             gender: str | None = None) -> PronounExample:
    spans, tiers = match_candidates(text, candidates, exclude=span)
    return PronounExample(ex_id, text, span[0], span[1], candidates, label, spans, gender, tiers)


def _tsv_rows(path: str, header: list[str], refusal: str) -> list[tuple[int, list[str]]]:
    """The non-empty rows after the header, with their line numbers; ``refusal`` if it is not ``header``."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or [c.strip() for c in rows[0][:len(header)]] != header:
        raise CorefBertError(refusal, path=path, position=1)
    return [(line_no, row) for line_no, row in enumerate(rows[1:], start=2) if row]


def read_gap(path: str, strict: bool = False) -> tuple[list[PronounExample], Counter]:
    """Read a GAP TSV file (``gap-development.tsv``, ``gap-validation.tsv``, ``gap-test.tsv``)."""
    examples, skips = [], _Skips(path, strict)
    refusal = "not a GAP TSV file: the header must start with ID<TAB>Text"
    for line_no, row in _tsv_rows(path, ["ID", "Text"], refusal):
        if len(row) != 11:
            raise CorefBertError(f"expected 11 tab-separated GAP columns, found {len(row)}", path=path,
                                 position=line_no)
        ex_id, text, pronoun, p_off, a, a_off, a_coref, b, b_off, b_coref, _url = row
        spans = []
        for name, surface, offset in (("Pronoun", pronoun, p_off), ("A", a, a_off), ("B", b, b_off)):
            if not offset.isdigit():
                raise CorefBertError(f"{name}-offset {offset!r} is not a number", path=path, position=line_no)
            start = int(offset)
            if text[start:start + len(surface)] != surface:
                raise CorefBertError(
                    f"{name}-offset {start} points at {text[start:start + len(surface)]!r}, not {surface!r}; "
                    "offsets are character offsets into Text", path=path, position=line_no)
            spans.append((start, start + len(surface)))
        labels = []
        for name, value in (("A-coref", a_coref), ("B-coref", b_coref)):
            if value.upper() not in ("TRUE", "FALSE"):
                raise CorefBertError(f"{name} must be TRUE or FALSE, got {value!r}", path=path, position=line_no)
            labels.append(value.upper() == "TRUE")
        if all(labels):
            skips("both_true", line_no, "both A and B are marked coreferent")
            continue
        gender = GAP_PRONOUN_GENDER.get(pronoun.lower())
        if gender is None:
            raise CorefBertError(f"pronoun {pronoun!r} is not a GAP pronoun ({', '.join(GAP_PRONOUN_GENDER)})",
                                 path=path, position=line_no)
        label = labels.index(True) if any(labels) else None
        example = _example(ex_id, text, spans[0], [a, b], label, gender)
        # The annotated offset is the mention GAP means; other occurrences of the name follow it.
        for i, span in enumerate(spans[1:]):
            if span not in example.candidate_spans[i]:
                example.candidate_spans[i].insert(0, span)
        examples.append(example)
    return examples, skips.counts


def read_blocks(path: str, strict: bool = False) -> tuple[list[PronounExample], Counter]:
    """Read the 4-line block format (DPR ``train.c.txt``, ``wsc273.txt``, ``PDP.txt``, WikiCREM, WinoGender)."""
    examples, skips = [], _Skips(path, strict)
    with open(path, encoding="utf-8") as handle:
        numbered = [(number, line.strip()) for number, line in enumerate(handle.read().splitlines(), start=1)]
    runs = [list(run) for blank, run in groupby(numbered, key=lambda item: not item[1]) if not blank]
    blocks = [(run[0][0], [line for _, line in run]) for run in runs]  # (first line number, its lines)
    stem = os.path.splitext(os.path.basename(path))[0]
    for index, (line_no, block) in enumerate(blocks):
        if len(block) != 4:
            raise CorefBertError(
                f"a problem must be 4 lines (sentence, pronoun, candidates, answer), this block has {len(block)}",
                path=path, position=line_no)
        sentence, pronoun, cand_line, answer = block
        candidates = [c.strip() for c in cand_line.split(",") if c.strip()]
        if len(candidates) < 2:
            skips("fewer_than_two_candidates", line_no + 2, f"only {len(candidates)} candidate(s)")
            continue
        folded, key = [c.casefold() for c in candidates], answer.strip().casefold()
        label = folded.index(key) if key in folded else None
        if label is None:
            skips("answer_not_a_candidate", line_no + 3, f"answer {answer!r} is not among {candidates}")
            continue
        span = _find_pronoun(sentence, pronoun, candidates)
        if span is None:
            skips("pronoun_not_in_sentence", line_no + 1, f"pronoun {pronoun!r} does not occur in the sentence")
            continue
        examples.append(_example(f"{stem}-{index}", sentence, span, candidates, label))
    return examples, skips.counts


def _xml_text(element: ET.Element | None) -> str:
    return " ".join("".join(element.itertext()).split()) if element is not None else ""


def read_wsc_xml(path: str, strict: bool = False, schemas: str = "auto") -> tuple[list[PronounExample], Counter]:
    """Read Ernest Davis's ``WSCollection.xml`` (ISO-8859-1).

    The collection holds 285 schemas: WSC273 and 12 later additions. ``schemas``: ``wsc273`` keeps the first
    273, ``all`` keeps every one, ``auto`` (default) keeps the first 273 of a file named like the official
    collection (``WSCollection*.xml``) and every schema of any other file. The count read is logged.
    """
    if schemas not in WSC_SCHEMAS:
        raise CorefBertError(f"unknown WSC schema selection {schemas!r}; choose one of {', '.join(WSC_SCHEMAS)}")
    examples, skips = [], _Skips(path, strict)
    try:
        # The XML declaration names ISO-8859-1, so parse bytes and let the parser decode them.
        with open(path, "rb") as handle:
            root = ET.fromstring(handle.read())
    except ET.ParseError as err:
        raise CorefBertError(f"not well-formed XML ({err})", path=path) from None
    except LookupError as err:  # the declaration names an encoding Python does not know
        raise CorefBertError(f"the XML declaration names an unknown encoding ({err}); the official file is "
                             "ISO-8859-1", path=path) from None
    every = list(root.iter("schema"))
    official = os.path.basename(path).lower().startswith("wscollection")
    keep = WSC273 if schemas == "wsc273" or (schemas == "auto" and official) else len(every)
    logger.info("%s: %d <schema> elements, reading %s", path, len(every),
                f"the first {min(keep, len(every))} (WSC273; --wsc_schemas all reads every one)"
                if keep < len(every) else "all of them")
    for index, schema in enumerate(every[:keep]):
        position = f"schema {index + 1}"
        txt1, pron, txt2 = (_xml_text(schema.find(f"text/{tag}")) for tag in ("txt1", "pron", "txt2"))
        candidates = [_xml_text(a) for a in schema.findall("answers/answer")]
        candidates = [c for c in candidates if c]
        if not pron:
            skips("pronoun_not_in_sentence", position, "the schema has no <pron>")
            continue
        if len(candidates) < 2:
            skips("fewer_than_two_candidates", position, f"only {len(candidates)} <answer>(s)")
            continue
        letter = _xml_text(schema.find("correctAnswer")).strip(" .").upper()
        label = ord(letter) - ord("A") if len(letter) == 1 and "A" <= letter <= "Z" else None
        if label is None or label >= len(candidates):
            skips("answer_not_a_candidate", position, f"correctAnswer {letter!r} names no <answer>")
            continue
        prefix = txt1 + " " if txt1 else ""
        # txt2 often starts with punctuation ("them" + "."), which takes no space before it.
        suffix = txt2 if not txt2 or not txt2[0].isalnum() else " " + txt2
        text = prefix + pron + suffix
        span = (len(prefix), len(prefix) + len(pron))
        examples.append(_example(f"wsc-{index}", text, span, candidates, label))
    return examples, skips.counts


def read_winogender(path: str, strict: bool = False) -> tuple[list[PronounExample], Counter]:
    """Read WinoGender's ``all_sentences.tsv`` (``sentid<TAB>sentence``)."""
    examples, skips = [], _Skips(path, strict)
    for line_no, row in _tsv_rows(path, ["sentid", "sentence"],
                                  "not a WinoGender sentence TSV: the header must be sentid<TAB>sentence"):
        if len(row) != 2:
            raise CorefBertError(f"expected 2 tab-separated columns, found {len(row)}", path=path, position=line_no)
        sent_id, sentence = row[0].strip(), row[1].strip()
        parts = sent_id.split(".")
        if len(parts) != 5 or parts[2] not in ("0", "1") or parts[3] not in WINOGENDER_PRONOUNS:
            raise CorefBertError(f"sentid {sent_id!r} is not occupation.participant.answer.gender.txt",
                                 path=path, position=line_no)
        occupation, participant, answer, gender = parts[:4]
        # Prefer the determiner phrase the sentence uses ("the technician"), as the block files do.
        candidates = [f"the {noun}" if _word_spans(sentence, f"the {noun}") else noun
                      for noun in (occupation, participant)]
        matches = [m for p in WINOGENDER_PRONOUNS[gender]
                   for m in re.finditer(rf"(?<!\w){p}(?!\w)", sentence, flags=re.IGNORECASE)]
        if not matches:
            skips("pronoun_not_in_sentence", line_no, f"no {gender} pronoun in the sentence")
            continue
        first = min(matches, key=lambda m: m.start())
        examples.append(_example(sent_id, sentence, (first.start(), first.end()), candidates, int(answer), gender))
    return examples, skips.counts


SUPPORTED = "GAP TSV, 4-line blocks, WSC XML (WSCollection.xml) or WinoGender all_sentences.tsv"


def _reject_other_tasks(path: str) -> None:
    """Files of another task, named as such (their generic errors, "this block has 121 lines", mislead)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = next((line.strip() for line in (handle.readline() for _ in range(50)) if line.strip()), "")
    if first.startswith("occupation(0)") or "$OCCUPATION" in first:
        raise CorefBertError(
            "this is WinoGender's templates.tsv (sentences with $OCCUPATION/$PARTICIPANT/$NOM_PRONOUN slots); "
            "run_coref.py reads the filled-in all_sentences.tsv of the same release (header sentid<TAB>sentence) "
            "or the 4-line WinoGender.txt", path=path, position=1)
    name = os.path.basename(path).lower()
    if first.startswith("#begin document") or name.endswith((".conll", "_conll")):
        raise CorefBertError(
            "this is a CoNLL-2012 coreference file (token columns, #begin document lines); run_coref.py resolves "
            f"single pronouns and reads {SUPPORTED}. CoNLL files are read by finetune/run_coref_e2e.py "
            "(end-to-end coreference) and python -m corefbert.tasks.pronoun_pairs.builder (pronoun-replacement pairs)",
            path=path, position=1)


def detect_format(path: str) -> str:
    """Guess the format of ``path`` from its extension and first line."""
    if path.lower().endswith(".xml"):
        return "wsc_xml"
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.readline()
    if first.startswith("ID\tText\t"):
        return "gap"
    if first.startswith("sentid\t"):
        return "winogender"
    return "blocks"


_READERS = {"gap": read_gap, "blocks": read_blocks, "wsc_xml": read_wsc_xml, "winogender": read_winogender}


def read_pronoun_file(path: str, format: str | None = None, strict: bool = False, wsc_schemas: str = "auto"
                      ) -> tuple[list[PronounExample], Counter]:
    """Read any supported file; ``format`` is one of :data:`FORMATS` or ``None`` to detect it;
    ``wsc_schemas`` selects the schemas of a WSC XML file (see :func:`read_wsc_xml`)."""
    if not os.path.isfile(path):
        raise CorefBertError("file not found; check the path", path=path)
    format = format or detect_format(path)
    if format not in _READERS:
        raise CorefBertError(f"unknown coreference format {format!r}; choose one of {', '.join(FORMATS)}",
                             path=path)
    _reject_other_tasks(path)
    options = {"schemas": wsc_schemas} if format == "wsc_xml" else {}
    try:
        return _READERS[format](path, strict=strict, **options)
    except UnicodeDecodeError as err:
        raise CorefBertError(f"not UTF-8 text ({err.reason} at byte {err.start})", path=path) from None
