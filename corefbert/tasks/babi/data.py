"""bAbI QA (Weston et al. 2015): the reader of the official ``qaN_<name>_{train,test}.txt`` files, tokens,
and the coreference clusters a Coref-GRU reads (exact match within a story, or a JSONL file of character
spans); the word ids come from :class:`corefbert.text.vocabulary.Vocabulary`.

Official format: ``<id> <sentence>`` per line, ids restart at 1 with each story; a question line is
``<id> <question>\\t<answer>\\t<supporting ids>``, the supporting ids naming earlier story lines (never a
question line) of the same story. A question sees the story lines before it (not the earlier questions).
Answers of task 8 (``apple,football``, ``nothing``) and 19 (``n,w``) are comma-joined lists.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

from corefbert.errors import CorefBertError
from corefbert.pronouns import PRONOUNS
from corefbert.text.jsonio import read_jsonl

TOKEN = re.compile(r"\w+|[^\w\s]")
DETERMINERS = {"the", "a", "an"}
# Capitalised words that are not entities (sentence-initial function words of bAbI's generator).
NOT_ENTITIES = DETERMINERS | PRONOUNS | {"is", "what", "where", "who", "how", "why", "does", "do", "did", "was",
                                         "following", "afterwards", "then", "after", "before", "this", "yesterday",
                                         "in", "if", "there", "and"}


@dataclass
class BabiExample:
    """One question with the story lines before it."""

    task_id: int
    line: int  # 1-based line number of the question in its file
    story: int  # index of the story in the file (the held-out split keeps a story's questions together)
    sentences: list[str]
    question: str
    answer: str
    supporting: list[int] = field(default_factory=list)

    @property
    def document(self) -> str:
        """The story text the character spans of a coreference file refer to: sentences joined by one space."""
        return " ".join(self.sentences)


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """``(lowercased token, start, end)`` character spans of words and punctuation."""
    return [(m.group().lower(), m.start(), m.end()) for m in TOKEN.finditer(text)]


def find_task_file(data_dir: str, task_id: int, split: str) -> str | None:
    """The one ``qa<task_id>_*_<split>.txt`` in ``data_dir`` (None when there is none)."""
    found = sorted(glob.glob(os.path.join(glob.escape(data_dir), f"qa{task_id}_*_{split}.txt")))
    if len(found) > 1:
        raise CorefBertError(f"several files for bAbI task {task_id} ({', '.join(map(os.path.basename, found))}); "
                             "keep one per task and split", path=data_dir)
    return found[0] if found else None


def read_babi_file(path: str, task_id: int) -> list[BabiExample]:
    """Every question of an official bAbI file; one clear line on a malformed line or an empty file."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError as err:
        raise CorefBertError(f"not UTF-8 text ({err.reason}); pass an official bAbI qaN_*.txt file",
                             path=path) from None
    except OSError as err:
        raise CorefBertError(f"cannot read the bAbI file ({err.strerror})", path=path) from None
    examples: list[BabiExample] = []
    story: list[str] = []
    story_index, previous_id = -1, 0
    question_ids: set[int] = set()  # line ids of the current story's question lines (no supporting fact)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        head, _, rest = raw.partition(" ")
        if not head.isdigit() or not rest.strip():
            raise CorefBertError("expected '<id> <sentence>' (bAbI format); is this an official qaN_*.txt file?",
                                 path=path, position=number)
        line_id = int(head)
        if line_id == 1:
            story, story_index, question_ids = [], story_index + 1, set()
        elif line_id != previous_id + 1:
            raise CorefBertError(f"line id {line_id} does not follow {previous_id} (ids restart at 1 per story)",
                                 path=path, position=number)
        previous_id = line_id
        if "\t" not in rest:
            story.append(rest.strip())
            continue
        fields = rest.split("\t")
        if len(fields) != 3 or not fields[1].strip():
            raise CorefBertError("a question line needs '<question>\\t<answer>\\t<supporting ids>'",
                                 path=path, position=number)
        if not fields[0].strip():
            raise CorefBertError("empty question before the answer; a question line is '<id> <question>\\t"
                                 "<answer>\\t<supporting ids>'", path=path, position=number)
        supporting = _supporting_ids(fields[2], line_id, question_ids, path, number)
        question_ids.add(line_id)
        examples.append(BabiExample(task_id, number, story_index, list(story), fields[0].strip(),
                                    fields[1].strip().lower(), supporting))
    if not examples:
        raise CorefBertError("no question lines (a line with TAB-separated question, answer, supporting ids) "
                             "in this file; pass an official bAbI qaN_*.txt file", path=path)
    return examples


def _supporting_ids(text: str, line_id: int, question_ids: set[int], path: str, number: int) -> list[int]:
    """The supporting-fact ids of question ``line_id``: each must be an earlier story line of the same story
    (the generator's facts precede their question; a question line is never a fact)."""
    ids = []
    for word in text.split():
        if not word.isdigit():
            raise CorefBertError(f"supporting fact id {word!r} is not a line number; the third field lists the "
                                 "ids of the story lines that answer the question", path=path, position=number)
        fact = int(word)
        if not 1 <= fact < line_id:
            raise CorefBertError(f"supporting fact {fact} is not an earlier line of this story (this question's id is "
                                 f"{line_id}; ids restart at 1 per story)", path=path, position=number)
        if fact in question_ids:
            raise CorefBertError(f"supporting fact {fact} is a question line, not a story sentence", path=path,
                                 position=number)
        ids.append(fact)
    return ids


def entity_mentions(tokens: list[tuple[str, int, int]], originals: list[str]) -> dict[str, list[int]]:
    """``{entity word: token positions}`` in first-mention order. An entity token is a capitalised word that
    is not a function word (names: Mary, John) or the word right after a determiner (the kitchen, a swan)."""
    positions: dict[str, list[int]] = {}
    for i, (token, _, _) in enumerate(tokens):
        capitalised = originals[i][:1].isupper() and token not in NOT_ENTITIES
        after_determiner = i > 0 and tokens[i - 1][0] in DETERMINERS and token.isalpha()
        if capitalised or after_determiner:
            positions.setdefault(token, []).append(i)
    return positions


def groups_to_ids(groups: list[list[int]], num_tokens: int, max_clusters: int) -> list[int]:
    """Cluster id per token from groups of token positions: groups of at least two mentions become clusters
    1, 2, ... in first-mention order, the first ``max_clusters`` kept; 0 elsewhere."""
    ids = [0] * num_tokens
    repeated = sorted((sorted(g) for g in groups if len(g) > 1), key=lambda g: g[0])
    for cluster_id, positions in enumerate(repeated[:max_clusters], start=1):
        for i in positions:
            ids[i] = cluster_id
    return ids


def exact_match_clusters(tokens: list[tuple[str, int, int]], originals: list[str],
                         max_clusters: int) -> list[int]:
    """The paper's bAbI setting: equal entity tokens (:func:`entity_mentions`) of the story linked."""
    return groups_to_ids(list(entity_mentions(tokens, originals).values()), len(tokens), max_clusters)


def spans_to_clusters(tokens: list[tuple[str, int, int]], clusters: list, max_clusters: int, where: str) -> list[int]:
    """Cluster id per token from ``[[[start, end], ...], ...]`` character spans (a token overlapping a span
    joins its cluster; the first ``max_clusters`` clusters are kept)."""
    ids = [0] * len(tokens)
    for cluster_id, spans in enumerate(clusters[:max_clusters], start=1):
        for span in spans:
            if not (isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) for v in span)
                    and 0 <= span[0] < span[1]):
                raise CorefBertError(f"span {span!r} is not [start, end] with 0 <= start < end", path=where)
            for i, (_, start, end) in enumerate(tokens):
                if start < span[1] and span[0] < end:
                    ids[i] = cluster_id
    return ids


def read_coref_file(path: str) -> dict[tuple[int, int], list]:
    """``{(task id, question line): clusters}`` from a JSONL file of ``{"task": N, "line": L, "clusters":
    [[[start, end], ...], ...]}`` (offsets into the example's :attr:`BabiExample.document`)."""
    records: dict[tuple[int, int], list] = {}
    expected = 'expected a JSON object {"task": N, "line": L, "clusters": [[[start, end], ...], ...]} per line'
    for number, record in read_jsonl(path, expected=expected):
        try:
            key = (int(record["task"]), int(record["line"]))
            clusters = record["clusters"]
        except (ValueError, KeyError, TypeError):
            raise CorefBertError(expected, path=path, position=number) from None
        if not isinstance(clusters, list):
            raise CorefBertError("'clusters' must be a list of lists of [start, end] spans", path=path,
                                 position=number)
        records[key] = clusters
    return records
