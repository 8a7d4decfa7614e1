"""Pronoun resolution with CorefBERT's copy head (beyond the paper): scoring, features and the HTML view.

Mention Reference Prediction trains a copy head: for a masked word at position ``i`` and final hidden states
``h``, ``Pr(x_k | x_i) = softmax_k((V ⊙ h_k)ᵀ h_i)`` over the copyable tokens ``k`` of the sequence, and a
mention ``w_j`` with first/last tokens ``s_j``/``t_j`` is copied with ``Pr(x_{s_j}|x_{s_i}) · Pr(x_{t_j}|x_{t_i})``.
A pronoun is a word whose referent the head should copy, so: mask the pronoun (one mask token, so
``s_i = t_i``), run the encoder, and score each candidate by ``log Σ_occurrences Pr(start) · Pr(end)`` (the
sum over a candidate's occurrences mirrors L_MRP's sum over the unmasked mentions of a group). Copyable
tokens are real, non-special tokens other than the masked pronoun itself, as in pretraining.

Pretraining mentions are single nouns, so by default a candidate phrase is scored by its last word
("the city councilmen" -> "councilmen"; a trailing possessive 's is dropped); ``copy_span="full"`` uses the
whole phrase.

``finetune/run_coref.py --zero_shot copy`` and :class:`corefbert.tasks.coref.resolver.CopyResolver` score
through this module.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel

from corefbert.errors import CorefBertError, one_line
from corefbert.pretraining.families import load_quietly
from corefbert.pretraining.modeling import copy_scores
from corefbert.tasks.coref.mlm_scoring import CandidateScoringOutput, with_labels_and_index
from corefbert.tasks.coref.readers import PronounExample
from corefbert.tasks.heads import stored_tensors
from corefbert.text.tokenizers import joins_next, span_tokens

COPY_VECTOR_KEY = "mrp.copy_vector"
COPY_SPANS = ("last_word", "full")


def read_copy_vector(directory: str) -> torch.Tensor | None:
    """``mrp.copy_vector`` from a checkpoint's safetensors file(s), or ``None`` if it has none."""
    found = stored_tensors(directory, lambda key: COPY_VECTOR_KEY if key == COPY_VECTOR_KEY
                           or key.endswith("." + COPY_VECTOR_KEY) else None)
    return found.get(COPY_VECTOR_KEY)


class CopyHeadScorer(nn.Module):
    """Encoder + copy vector; ``forward(**collate_copy_queries(...))`` -> per-candidate copy log-probs."""

    def __init__(self, encoder: nn.Module, copy_vector: torch.Tensor):
        super().__init__()
        self.encoder = encoder
        self.copy_vector = nn.Parameter(copy_vector.float().clone())

    @classmethod
    def from_pretrained(cls, path: str, allow_untrained: bool = False, untrained: bool = False) -> CopyHeadScorer:
        """The encoder of ``path`` with its ``mrp.copy_vector``; ``untrained``: V at its initial 1/hidden
        whatever the checkpoint holds (the control); ``allow_untrained``: that where it has none."""
        # Quietly: transformers would report the copy vector this scorer reads below as UNEXPECTED.
        try:
            encoder, _ = load_quietly(AutoModel, path, add_pooling_layer=False)
        except TypeError:
            encoder, _ = load_quietly(AutoModel, path)
        except (OSError, ValueError) as err:
            raise CorefBertError(f"cannot load an encoder ({one_line(err, first_line=True)})", path=path) from None
        vector = read_copy_vector(path) if os.path.isdir(path) and not untrained else None
        if vector is None and not (untrained or allow_untrained):
            raise CorefBertError(f"no {COPY_VECTOR_KEY} in this checkpoint: copy scoring needs a CorefBERT "
                                 "pretraining checkpoint (or --allow_untrained_copy_head for an untrained V)",
                                 path=path)
        if vector is None:  # the value load_pretraining_model starts V at: scores are a scaled dot product h_kᵀ h_i
            vector = torch.full((encoder.config.hidden_size,), 1.0 / encoder.config.hidden_size)
        return cls(encoder, vector)

    def copy_log_probs(self, input_ids, attention_mask, copy_mask, query_position) -> torch.Tensor:
        """log Pr(x_k | x_query) over the sequence: [B, L], -inf where ``copy_mask`` [B, L] is False."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [B, L, H]
        query = query_position.unsqueeze(1)  # [B, 1]: the pronoun is one token, so s_i = t_i
        logits, _ = copy_scores(hidden, self.copy_vector, query, query)  # pretraining's own scores, [B, 1, L]
        return logits[:, 0].masked_fill(~copy_mask, float("-inf")).log_softmax(-1)

    def forward(self, input_ids, attention_mask, copy_mask, query_position, mention_starts, mention_ends,
                mention_mask, candidate_mask, labels=None, example_index=None):
        log_probs = self.copy_log_probs(input_ids, attention_mask, copy_mask, query_position)  # [B, L]
        batch = torch.arange(log_probs.shape[0], device=log_probs.device)[:, None, None]
        # Pr(start | query) * Pr(end | query), the pronoun being one token (s_i = t_i): [B, N, O]
        pair = log_probs[batch, mention_starts] + log_probs[batch, mention_ends]
        pair = pair.masked_fill(~mention_mask, float("-inf"))
        scores = torch.logsumexp(pair, dim=-1)  # [B, N]; -inf for a candidate with no occurrence in the window
        return CandidateScoringOutput(loss=None, scores=scores.masked_fill(~candidate_mask, float("-inf")))


def _scored_span(text: str, span: tuple[int, int], copy_span: str) -> tuple[int, int]:
    """The character span the copy head scores: the phrase's last word (minus a possessive 's), or all of it."""
    start, end = span
    if copy_span == "full":
        return span
    match = re.search(r"(\w[\w.\-]*?)(?:'s|’s|')?\W*$", text[start:end])
    return span if match is None else (start + match.start(1), start + match.end(1))


def copy_window_start(query: int, length: int, width: int, occurrences: list[list[list[int]]]) -> int:
    """The first token of the ``width``-token window of a ``length``-token text that the copy head reads: centred
    on the pronoun (token ``query``), unless that leaves out every occurrence of a candidate the text holds
    (undecided); then the one nearest it among those holding the pronoun and whole occurrences of the most
    candidates. ``occurrences``: per candidate, per occurrence, the token positions it covers."""
    centred = min(max(0, query - width // 2), max(0, length - width))

    def held(first: int, whole: bool) -> int:
        """How many candidates have an occurrence in the window at ``first`` (whole, or any token of it)."""
        last = first + width - 1
        return sum(any(tokens and ((first <= tokens[0] and tokens[-1] <= last) if whole else
                                   any(first <= t <= last for t in tokens)) for tokens in candidate)
                   for candidate in occurrences)

    present = sum(any(candidate) for candidate in occurrences)
    if held(centred, whole=False) == present:
        return centred  # every candidate the text holds is in view: the problems decided so far stay as they were
    starts = range(max(0, query - width + 1), min(query, max(0, length - width)) + 1)  # each holds the pronoun
    best = max(starts, key=lambda first: (held(first, whole=True), -abs(first - centred)))
    return best if held(best, whole=False) > held(centred, whole=False) else centred


def encode_copy_query(example: PronounExample, tokenizer, max_length: int = 512,
                      copy_span: str = "last_word") -> dict:
    """Features for :class:`CopyHeadScorer`: the text with the pronoun replaced by one mask token, the mask's
    position, and each candidate's occurrences as (first, last) token positions inside the window."""
    mask = tokenizer.mask_token
    text = example.text[:example.pronoun_start] + mask + example.text[example.pronoun_end:]
    shift = len(mask) - (example.pronoun_end - example.pronoun_start)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets, joined = encoding["input_ids"], encoding["offset_mapping"], joins_next(encoding.word_ids())
    query = next((i for i, t in enumerate(ids) if t == tokenizer.mask_token_id), None)
    if query is None:
        raise CorefBertError(f"the masked pronoun of {example.id} did not survive tokenization")
    # Per candidate, per occurrence: the tokens of the whole text it covers, as pretraining's mention spans are
    # (a lone space token the tokenizer joins to the word included).
    occurrences = []
    for char_spans in example.candidate_spans:
        occurrences.append([])
        for char_start, char_end in char_spans:
            char_start, char_end = _scored_span(example.text, (char_start, char_end), copy_span)
            if char_start >= example.pronoun_end:
                char_start, char_end = char_start + shift, char_end + shift
            occurrences[-1].append(span_tokens(text, offsets, joined, char_start, char_end))
    # A window of max_length - 2 tokens holding the pronoun (GAP texts can exceed 512).
    width = max_length - 2
    first = copy_window_start(query, len(ids), width, occurrences)
    ids, offsets = ids[first:first + width], offsets[first:first + width]
    inside = [[[i - first + 1 for i in tokens if first <= i < first + width] for tokens in candidate]
              for candidate in occurrences]  # +1: the leading special token
    spans = [[(kept[0], kept[-1]) for kept in candidate if kept] for candidate in inside]
    input_ids = [tokenizer.cls_token_id] + ids + [tokenizer.sep_token_id]
    copy_mask = [False] + [True] * len(ids) + [False]
    copy_mask[query - first + 1] = False  # never copy the masked pronoun onto itself
    return {"input_ids": input_ids, "copy_mask": copy_mask, "query_position": query - first + 1,
            "mention_spans": spans, "offsets": [(0, 0)] + [tuple(o) for o in offsets] + [(0, 0)],
            "masked_text": text}


def collate_copy_queries(features: list[dict], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad :func:`encode_copy_query` features: ids [B, L], mentions [B, N, O] (N candidates, O occurrences)."""
    batch = len(features)
    length = max(len(f["input_ids"]) for f in features)
    n_cand = max(len(f["mention_spans"]) for f in features)
    n_occ = max([len(s) for f in features for s in f["mention_spans"]] + [1])
    input_ids = torch.full((batch, length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, length), dtype=torch.long)
    copy_mask = torch.zeros((batch, length), dtype=torch.bool)
    starts = torch.zeros((batch, n_cand, n_occ), dtype=torch.long)
    ends = torch.zeros((batch, n_cand, n_occ), dtype=torch.long)
    mention_mask = torch.zeros((batch, n_cand, n_occ), dtype=torch.bool)
    candidate_mask = torch.zeros((batch, n_cand), dtype=torch.bool)
    for b, f in enumerate(features):
        n = len(f["input_ids"])
        input_ids[b, :n] = torch.tensor(f["input_ids"])
        attention_mask[b, :n] = 1
        copy_mask[b, :n] = torch.tensor(f["copy_mask"])
        for c, occurrences in enumerate(f["mention_spans"]):
            candidate_mask[b, c] = True
            for o, (s, e) in enumerate(occurrences):
                starts[b, c, o], ends[b, c, o], mention_mask[b, c, o] = s, e, True
    out = {"input_ids": input_ids, "attention_mask": attention_mask, "copy_mask": copy_mask,
           "query_position": torch.tensor([f["query_position"] for f in features]), "mention_starts": starts,
           "mention_ends": ends, "mention_mask": mention_mask, "candidate_mask": candidate_mask}
    return with_labels_and_index(out, features)


@dataclass
class CopyView:
    """What the HTML view shows: the masked text, copy probability per token, candidate scores."""

    example: PronounExample
    tokens: list[tuple[int, int, float]]  # (char start, char end) in the masked text, Pr(copy | pronoun)
    masked_text: str
    scores: list[float]

    @property
    def mask_span(self) -> tuple[int, int]:
        """Where the mask token that replaced the pronoun sits in ``masked_text``."""
        start = self.example.pronoun_start
        return start, start + len(self.masked_text) - len(self.example.text) + len(self.example.pronoun)


@torch.no_grad()
def copy_view(model: CopyHeadScorer, tokenizer, example: PronounExample, max_length: int = 512,
              copy_span: str = "last_word") -> CopyView:
    """Score one example's candidates (the scores evaluation gives them) and keep the whole copy distribution."""
    feature = encode_copy_query(example, tokenizer, max_length, copy_span)
    batch = collate_copy_queries([feature], tokenizer.pad_token_id)
    batch = {k: v.to(next(model.parameters()).device) for k, v in batch.items()}
    scores = model(**batch).scores[0].tolist()
    probs = model.copy_log_probs(batch["input_ids"], batch["attention_mask"], batch["copy_mask"],
                                 batch["query_position"])[0].exp().tolist()  # [L]
    tokens = [(s, e, p) for (s, e), p in zip(feature["offsets"], probs) if e > s]
    return CopyView(example, tokens, feature["masked_text"], scores)


def render_copy_html(view: CopyView, title: str = "CorefBERT copy distribution") -> str:
    """Shade each token of ``view.masked_text`` by Pr(copy | pronoun), box the pronoun, underline candidates.

    Shades run from the least to the most likely copyable token (min-max), so an untrained head's nearly
    flat distribution still shows its ranking; the caption gives the two probabilities."""
    text = view.masked_text
    probs = [p for _, _, p in view.tokens if p > 0.0]
    low, high = (min(probs), max(probs)) if probs else (0.0, 1.0)
    shift = view.mask_span[1] - view.example.pronoun_end
    underlined = [(s + shift, e + shift) if s >= view.example.pronoun_end else (s, e)
                  for occurrences in view.example.candidate_spans for s, e in occurrences]
    pieces, cursor = [], 0
    for start, end, prob in view.tokens:
        pieces.append(html.escape(text[cursor:start]))
        token = html.escape(text[start:end])
        if start < view.mask_span[1] and end > view.mask_span[0]:
            pieces.append(f'<span class="pronoun" title="masked pronoun">{html.escape(view.example.pronoun)}</span>')
        else:
            alpha = (prob - low) / (high - low) if high > low else 1.0
            klass = "tok cand" if any(s < end and e > start for s, e in underlined) else "tok"
            pieces.append(f'<span class="{klass}" style="background: rgba(220, 60, 30, {max(alpha, 0.0):.3f})" '
                          f'title="Pr(copy) = {prob:.4f}">{token}</span>')
        cursor = end
    pieces.append(html.escape(text[cursor:]))
    ranked = sorted(zip(view.example.candidates, view.scores), key=lambda item: -item[1])
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td>{score:.3f}</td></tr>" for name, score in ranked)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: Georgia, serif; max-width: 52em; margin: 2em auto; line-height: 1.9; }}
.tok {{ border-radius: 3px; padding: 1px 0; }}
.cand {{ text-decoration: underline 2px #1f4fbf; }}
.pronoun {{ border: 2px solid #1f4fbf; border-radius: 3px; padding: 0 3px; font-weight: bold; }}
table {{ border-collapse: collapse; margin-top: 1.5em; }} td, th {{ border: 1px solid #bbb; padding: 2px 10px; }}
</style></head><body>
<h2>{html.escape(title)}</h2>
<p class="text">{''.join(pieces)}</p>
<p><small>Shade: probability that the copy head copies the token into the boxed (masked) pronoun, from
{low:.4f} (white) to {high:.4f} (darkest). Underlined: candidate mentions.</small></p>
<table><tr><th>candidate</th><th>log Pr(copy)</th></tr>{rows}</table>
</body></html>
"""
