"""Extractive-QA windows (features), their collation, the span loss and decoding back to text.

Windows come from the fast tokenizer's overflow + offsets, with each tokenizer's own special tokens
(``[CLS] q [SEP] c [SEP]`` for BERT, ``<s> q </s></s> c </s>`` for RoBERTa). ``doc_stride`` is the
step between the starts of consecutive windows, as in BERT's ``run_squad.py`` and the paper's code;
the tokenizer's own ``stride`` is the *overlap*, so it is derived per question length.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
import torch

from corefbert.errors import CorefBertError
from corefbert.metrics.squad import normalize_answer
from corefbert.tasks.qa.data import QAExample
from corefbert.text.tokenizers import trimmed_offsets

logger = logging.getLogger(__name__)

NO_ANSWER = 0  # windows without an answer point start and end at the first token ([CLS] / <s>)


def truncate_questions(questions: list[str], tokenizer, max_query_length: int) -> list[str]:
    """Each question cut to its first ``max_query_length`` tokens (as text, so the pair encoding re-tokenizes it)."""
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    return [question[: offsets[max_query_length - 1][1]] if len(offsets) > max_query_length else question
            for question, offsets in zip(questions, encoded["offset_mapping"])]


def build_windows(examples: list[QAExample], tokenizer, max_seq_length: int = 384, doc_stride: int = 128,
                  max_query_length: int = 64, max_answers: int | None = None, max_count: int | None = 2,
                  skip_unanswered: bool = False) -> list[dict]:
    """Cut every example into windows of at most ``max_seq_length`` tokens.

    Each window is a dict: ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the tokenizer
    makes them), ``example_index``, ``offsets`` (``[start, end)`` characters of each context token
    without the whitespace a token may carry, ``[-1, -1]`` elsewhere and for a whitespace-only token),
    ``answer_starts`` / ``answer_ends`` (token positions of the gold spans wholly inside the window, at most
    ``max_answers``, or ``[0]`` when there is none) and ``answer_count`` (number of gold spans in the window,
    clipped to ``max_count`` unless it is None). ``skip_unanswered`` drops examples with no located answer.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise CorefBertError("extractive QA needs a fast tokenizer (offsets); this checkpoint has a slow one")
    keep = [i for i, ex in enumerate(examples) if ex.answers or not skip_unanswered]
    if len(keep) < len(examples):
        logger.warning("%d question(s) without a locatable answer skipped for training", len(examples) - len(keep))
    questions = truncate_questions([examples[i].question for i in keep], tokenizer, max_query_length)
    question_lengths = [len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]]
    specials = tokenizer.num_special_tokens_to_add(pair=True)

    # Questions of the same length share one overlap, so each group is one batched tokenizer call.
    groups: dict[int, list[int]] = defaultdict(list)
    for position, length in enumerate(question_lengths):
        budget = max_seq_length - length - specials
        if budget < 1:
            raise CorefBertError(f"max_seq_length {max_seq_length} leaves no room for the context after a "
                                 f"{length}-token question; raise --max_seq_length or lower "
                                 "--max_query_length")
        groups[max(0, budget - doc_stride)].append(position)

    windows: list[dict] = []
    clipped = 0
    for overlap, positions in sorted(groups.items()):
        encoded = tokenizer([questions[p] for p in positions], [examples[keep[p]].context for p in positions],
                            truncation="only_second", max_length=max_seq_length, stride=overlap,
                            return_overflowing_tokens=True, return_offsets_mapping=True)
        for w, sample in enumerate(encoded["overflow_to_sample_mapping"]):
            example_index = keep[positions[sample]]
            context = examples[example_index].context
            # [start, end) without a token's edge whitespace (trimmed_offsets); [-1, -1] (never an answer's
            # edge) outside the context and for a whitespace-only token
            offsets = [list(trimmed_offsets(context, *span) or (-1, -1)) if sid == 1 else [-1, -1]
                       for sid, span in zip(encoded.sequence_ids(w), encoded["offset_mapping"][w])]
            starts, ends = _window_answers(examples[example_index], offsets)
            clipped += max_count is not None and len(starts) > max_count
            window = {"input_ids": encoded["input_ids"][w], "attention_mask": encoded["attention_mask"][w],
                      "example_index": example_index, "offsets": offsets,
                      "answer_count": len(starts) if max_count is None else min(len(starts), max_count),
                      "answer_starts": (starts[:max_answers] if max_answers else starts) or [NO_ANSWER],
                      "answer_ends": (ends[:max_answers] if max_answers else ends) or [NO_ANSWER]}
            if "token_type_ids" in encoded:
                window["token_type_ids"] = encoded["token_type_ids"][w]
            windows.append(window)
    if clipped:
        logger.warning("%d window(s) hold more than %d answer spans; their count label is clipped to %d",
                       clipped, max_count, max_count)
    windows.sort(key=lambda window: window["example_index"])  # stable: windows of an example stay in order
    return windows


def _window_answers(example: QAExample, offsets: list[list[int]]) -> tuple[list[int], list[int]]:
    """Token start/end of each gold span lying wholly inside the window's context."""
    context_positions = [i for i, (start, _) in enumerate(offsets) if start >= 0]
    if not context_positions:
        return [], []
    first_char = offsets[context_positions[0]][0]
    last_char = offsets[context_positions[-1]][1]
    spans: list[tuple[int, int]] = []
    for answer in example.answers:
        if answer.start < first_char or answer.end > last_char:
            continue
        token_start = next(i for i in context_positions if offsets[i][1] > answer.start)
        token_end = max(i for i in context_positions if offsets[i][0] < answer.end)
        if token_end >= token_start and (token_start, token_end) not in spans:
            spans.append((token_start, token_end))
    return [start for start, _ in spans], [end for _, end in spans]


def collate_windows(windows: list[dict], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad a list of windows into tensors; answer slots are padded with -100."""
    def pad(key: str, value: int) -> torch.Tensor:
        width = max(len(w[key]) for w in windows)
        return torch.tensor([list(w[key]) + [value] * (width - len(w[key])) for w in windows])  # int64

    batch = {"input_ids": pad("input_ids", pad_token_id),  # [batch, seq]
             "attention_mask": pad("attention_mask", 0),  # [batch, seq]
             "answer_starts": pad("answer_starts", -100),  # [batch, answers]
             "answer_ends": pad("answer_ends", -100),  # [batch, answers]
             "answer_count": torch.tensor([w["answer_count"] for w in windows], dtype=torch.long),  # [batch]
             "feature_index": torch.tensor([w.get("feature_index", -1) for w in windows], dtype=torch.long)}
    if "token_type_ids" in windows[0]:
        batch["token_type_ids"] = pad("token_type_ids", 0)  # [batch, seq]
    return batch


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, answer_starts: torch.Tensor,
              answer_ends: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Span cross-entropy over the gold answers of each window, averaged over windows.

    ``start_logits``/``end_logits`` [batch, seq] (padding already at -inf-like values);
    ``answer_starts``/``answer_ends`` [batch, answers], -100 in unused slots, every row with >= 1 answer.
    ``"sum"``: sum over the answers of (CE_start + CE_end) / 2 (QUOREF, every span is part of the answer);
    ``"marginal"``: -(log Σ p_start + log Σ p_end) / 2 over the answers (MRQA, any occurrence is right).
    """
    valid = answer_starts >= 0  # [batch, answers]
    log_start = torch.log_softmax(start_logits.float(), dim=-1).gather(1, answer_starts.clamp(min=0))
    log_end = torch.log_softmax(end_logits.float(), dim=-1).gather(1, answer_ends.clamp(min=0))
    if reduction == "sum":
        per_window = -((log_start + log_end) / 2).masked_fill(~valid, 0.0).sum(dim=1)  # [batch]
    else:  # "marginal"
        floor = torch.finfo(log_start.dtype).min
        per_window = -(torch.logsumexp(log_start.masked_fill(~valid, floor), dim=1)
                       + torch.logsumexp(log_end.masked_fill(~valid, floor), dim=1)) / 2
    return per_window.mean()


def window_candidates(start_logits: np.ndarray, end_logits: np.ndarray, offsets: list[list[int]], n_best: int,
                      max_answer_length: int) -> list[tuple[float, int, int]]:
    """The ``(score, char_start, char_end)`` spans from the ``n_best`` best starts x ends of one window."""
    context = np.array([start >= 0 for start, _ in offsets])
    start_logits, end_logits = start_logits[:len(offsets)], end_logits[:len(offsets)]
    if not context.any():
        return []
    best_starts = np.argsort(-np.where(context, start_logits, -np.inf))[:n_best]
    best_ends = np.argsort(-np.where(context, end_logits, -np.inf))[:n_best]
    candidates = []
    for s in best_starts:
        if not context[s]:
            continue
        for e in best_ends:
            if not context[e] or e < s or e - s + 1 > max_answer_length:
                continue
            candidates.append((float(start_logits[s] + end_logits[e]), offsets[s][0], offsets[e][1]))
    return candidates


def pick_spans(candidates: list[tuple[float, int, int]], context: str, k: int) -> list[str]:
    """The ``k`` best candidate spans that neither overlap nor repeat a text already picked."""
    picked, texts, seen_texts = [], [], set()  # spans, their texts, the normalized texts
    for _, start, end in sorted(candidates, key=lambda c: -c[0]):
        if len(texts) == k:
            break
        if any(start < other_end and other_start < end for other_start, other_end in picked):
            continue
        text = context[start:end]
        key = normalize_answer(text)
        if key in seen_texts:
            continue
        picked.append((start, end))
        texts.append(text)
        seen_texts.add(key)
    return texts


def decode_answers(examples: list[QAExample], windows: list[dict], start_logits: np.ndarray,
                   end_logits: np.ndarray, count_logits: np.ndarray | None = None, n_best: int = 20,
                   max_answer_length: int = 30, multi_span: bool = False) -> dict[str, str | list[str]]:
    """Turn window logits [windows, seq] back into answers per question.

    Single span: ``{qid: best span text}`` over all windows of the question. Multi-span (QUOREF):
    ``{qid: [span, ...]}`` with as many non-overlapping spans as the count head [windows, counts]
    predicts in the window holding the best span (at least 1; 1 without a count head).
    """
    by_example: dict[int, list[int]] = defaultdict(list)
    for w, window in enumerate(windows):
        by_example[window["example_index"]].append(w)
    answers: dict = {}
    for example_index, window_ids in by_example.items():
        example = examples[example_index]
        candidates, owner = [], []
        for w in window_ids:
            found = window_candidates(start_logits[w], end_logits[w], windows[w]["offsets"], n_best, max_answer_length)
            candidates.extend(found)
            owner.extend([w] * len(found))
        best = max(range(len(candidates)), key=lambda i: candidates[i][0], default=None)
        if not multi_span:
            start, end = (0, 0) if best is None else candidates[best][1:]
            answers[example.qid] = example.context[start:end]
        else:  # as many spans as the count head predicts in the window of the best one (at least 1)
            counted = count_logits is not None and best is not None
            k = max(1, int(np.argmax(count_logits[owner[best]]))) if counted else 1
            answers[example.qid] = pick_spans(candidates, example.context, k)
    return answers
