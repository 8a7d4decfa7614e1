"""Dynamic MLM + Mention Reference Prediction masking for packed CorefBERT sequences.

One call masks a whole batch with numpy array operations: O(batch x length) work plus sorts over words
and mentions; Python loops run over rows only to read them. Paper-exact by default (Ye et al. 2020,
section 3.2; docs/design.md, "The method, exactly"); three switches reproduce the official code's choices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from corefbert.errors import CorefBertError

_CONTRACT_HINT = "re-run corpus preparation (packed-sequence schema in docs/contracts.md)"


def _round_half_up(x: np.ndarray) -> np.ndarray:
    # np.round rounds half to even: 7.5 -> 8 but 6.5 -> 6 would bias short rows.
    return np.floor(x + 0.5).astype(np.int64)


class DataCollatorForMentionReferencePrediction:
    """Mask a batch of packed sequences for MLM + MRP, whole words at a time.

    Each row (a mapping with ``input_ids``, ``word_ids``, ``mention_starts``, ``mention_ends``,
    ``mention_groups`` as lists or arrays, see docs/contracts.md) gets a budget of
    ``round(mlm_probability * maskable tokens)`` tokens (at least 1 when it has any maskable token).
    Maskable tokens are those with ``word_ids >= 0``. The budget is filled with whole words:

    - **MRP** (``mrp_ratio`` of the masked words, 0.2 = the paper's MLM : MRP = 4 : 1). Picks a usable
      group uniformly, then one of its still-unmasked mentions uniformly, and repeats until the share is
      used or no group has two unmasked mentions left; one mention of every group always stays unmasked.
      The word count is chosen so that, given the row's mean word and mention lengths in tokens, the MRP
      words make ``mrp_ratio`` of all masked words (rounded stochastically so short rows are not biased).
    - **MLM** fills the remaining token budget with uniformly random whole words (a random order taken
      while the words fit), never an MRP-masked word and, when ``mrp_ratio > 0``, never the one mention
      per group kept as referent. A row with no usable group gives its whole budget to MLM.
      ``mrp_ratio=0`` is plain whole-word MLM (the paper's ablation): no mention is treated specially.

    Each masked word becomes the mask token (``mask_replace_prob``), a random non-special token
    (``random_replace_prob``) or stays unchanged, decided once per word. MLM labels cover every masked
    token, MRP ones included.

    Official-code options (thunlp/CorefBERT ``gen_copy_data_MRP.py``), all off by default:

    - ``mrp_share_as_cap``: the MRP share is a token cap ``max(1, round(mrp_ratio * budget))`` filled
      first (mentions taken in the sampled order while they fit), MLM takes the rest.
    - ``replacement_per_token``: the 80/10/10 choice is made per token, not per word.
    - ``referents_maskable``: MLM may mask any mention, referents included. Referents so masked are
      dropped from the targets; an MRP mention left with none stays MLM-masked but gets no MRP slot.

    Randomness: a fresh ``numpy`` generator per call from ``(seed, worker id, worker seed, call counter)``
    (``seed=None``: ``torch.initial_seed()``), so DataLoader workers differ; the trainer passes its own
    ``generator`` per batch instead (:class:`corefbert.pretraining.data.SeededCollate`).

    Returns a dict of torch tensors (docs/contracts.md); ``B`` rows, ``L`` the longest row (rounded up to
    ``pad_to_multiple_of``), ``M`` the most MRP-masked mentions in a row, ``R`` the most referents of one
    (both may be 0): ``input_ids`` (masked), ``attention_mask``, ``labels`` (-100 off the masked tokens, MLM
    and MRP), ``word_ids`` and ``document_ids`` (each word token's document in the row, -1 off words),
    all [B, L] long; ``copy_mask`` [B, L] bool (real, non-special tokens not selected for masking);
    ``mrp_mention_starts`` / ``mrp_mention_ends`` [B, M] long (in text order) with ``mrp_mention_mask`` [B, M]
    bool; ``mrp_referent_starts`` / ``mrp_referent_ends`` [B, M, R] long (every unmasked mention of the group)
    with ``mrp_referent_mask`` [B, M, R] bool (each real mention has >= 1). Unused slots hold 0.
    """

    def __init__(self, tokenizer, mlm_probability: float = 0.15, mrp_ratio: float = 0.2,
                 seed: int | None = None, pad_to_multiple_of: int | None = None,
                 mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1,
                 mrp_share_as_cap: bool = False, replacement_per_token: bool = False,
                 referents_maskable: bool = False):
        name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        if getattr(tokenizer, "mask_token_id", None) is None:
            raise CorefBertError(f"tokenizer {name} has no mask token, which MLM and MRP masking need; use a "
                                 "BERT/RoBERTa-style tokenizer or add one with tokenizer.add_special_tokens")
        if getattr(tokenizer, "pad_token_id", None) is None:
            raise CorefBertError(f"tokenizer {name} has no pad token, which batching needs; "
                                 "set tokenizer.pad_token before building the collator")
        for what, value in (("mlm_probability", mlm_probability), ("mrp_ratio", mrp_ratio)):
            if not 0.0 <= value <= 1.0:
                raise CorefBertError(f"{what}={value} is outside [0, 1]; pass a fraction such as 0.15")
        if mask_replace_prob < 0 or random_replace_prob < 0 or mask_replace_prob + random_replace_prob > 1:
            raise CorefBertError(f"mask_replace_prob={mask_replace_prob} and random_replace_prob="
                                 f"{random_replace_prob} must be >= 0 and sum to at most 1 "
                                 "(the paper uses 0.8 and 0.1)")
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise CorefBertError(f"pad_to_multiple_of={pad_to_multiple_of} must be a positive integer")
        self.mlm_probability = float(mlm_probability)
        self.mrp_ratio = float(mrp_ratio)
        self.seed = seed
        self.pad_to_multiple_of = pad_to_multiple_of
        self.mask_replace_prob = float(mask_replace_prob)
        self.random_replace_prob = float(random_replace_prob)
        self.mrp_share_as_cap = mrp_share_as_cap
        self.replacement_per_token = replacement_per_token
        self.referents_maskable = referents_maskable
        self.mask_token_id = int(tokenizer.mask_token_id)
        self.pad_token_id = int(tokenizer.pad_token_id)
        # Random replacements come from the ordinary vocabulary, never [CLS]/<s>/[MASK]/padding.
        special = np.asarray(sorted(set(tokenizer.all_special_ids)), dtype=np.int64)
        self.random_token_ids = np.setdiff1d(np.arange(len(tokenizer), dtype=np.int64), special)
        self._calls = 0

    def _next_rng(self) -> np.random.Generator:
        info = get_worker_info()
        base = self.seed if self.seed is not None else torch.initial_seed()
        worker = (info.id + 1, info.seed) if info is not None else (0, 0)
        entropy = [int(base) % 2**64, *(int(w) % 2**64 for w in worker), self._calls]
        self._calls += 1
        return np.random.default_rng(np.random.SeedSequence(entropy))

    def __call__(self, features: Sequence[Mapping], generator: np.random.Generator | None = None
                 ) -> dict[str, torch.Tensor]:
        """Collate and mask ``features`` (rows of the packed-sequence schema); see the class docstring.
        ``generator``: draw this batch's masks from it instead of the collator's own stream (whose call
        counter then does not advance)."""
        rng = generator if generator is not None else self._next_rng()
        batch = _stack_rows(features, self.pad_token_id, self.pad_to_multiple_of)
        input_ids, word_ids, lengths = batch["input_ids"], batch["word_ids"], batch["lengths"]
        B, L = input_ids.shape
        real = np.arange(L)[None, :] < lengths[:, None]  # [B, L]

        # Words as columns 0..W-1; column W collects special tokens and padding and is never masked.
        W = int(word_ids.max()) + 1 if word_ids.size else 0
        word_col = np.where(word_ids >= 0, word_ids, W)  # [B, L]
        row_offset = np.arange(B) * (W + 1)
        flat = (row_offset[:, None] + word_col).ravel()  # token -> flat index into [B, W+1] word arrays
        word_len = np.bincount(flat, minlength=B * (W + 1)).reshape(B, W + 1)  # [B, W+1]
        word_len[:, W] = 0
        n_maskable = word_len.sum(1)  # [B]
        n_words = (word_len > 0).sum(1)  # [B]
        budget = np.zeros(B, dtype=np.int64)
        if self.mlm_probability > 0:
            budget = np.where(n_maskable > 0, np.maximum(1, _round_half_up(self.mlm_probability * n_maskable)), 0)

        m = _mentions(batch, word_ids)
        mrp_selected, kept = self._sample_mrp(m, budget, n_maskable, n_words, rng)

        word_mrp = np.zeros((B, W + 1), dtype=bool)
        word_mrp[m["row"][mrp_selected], m["word"][mrp_selected]] = True
        word_protected = np.zeros((B, W + 1), dtype=bool)
        if self.mrp_ratio > 0 and not self.referents_maskable:
            word_protected[m["row"][kept], m["word"][kept]] = True
        mrp_tokens = np.bincount(m["row"][mrp_selected], weights=m["len"][mrp_selected], minlength=B)
        remaining = budget - mrp_tokens.astype(np.int64)  # [B]

        # MLM: a random order of the candidate words, taken while the cumulative length fits the budget.
        candidate = (word_len > 0) & ~word_mrp & ~word_protected  # [B, W+1]
        key = rng.random((B, W + 1), dtype=np.float32)
        key[~candidate] = 2.0
        # Every word has >= 1 token, so at most max(remaining) words fit: order only that many.
        K = int(min(max(remaining.max(initial=0), 0), W + 1))
        if K < W + 1:
            order = np.argpartition(key, K, axis=1)[:, :K]  # the K smallest keys, unordered
            order = np.take_along_axis(order, np.argsort(np.take_along_axis(key, order, axis=1), axis=1), axis=1)
        else:
            order = np.argsort(key, axis=1)
        order = order + row_offset[:, None]  # [B, K] flat indices, candidates first in random order
        sorted_len = np.where(candidate, word_len, 0).ravel()[order]  # [B, K]
        chosen = candidate.ravel()[order] & (np.cumsum(sorted_len, axis=1) <= remaining[:, None])
        word_masked = word_mrp.copy()
        word_masked.ravel()[order[chosen]] = True
        token_masked = word_masked.ravel()[flat].reshape(B, L)  # [B, L]

        labels = np.where(token_masked, input_ids, -100)
        masked_ids = self._replace(input_ids, token_masked, flat, W, rng)

        return {"input_ids": torch.from_numpy(masked_ids),
                "attention_mask": torch.from_numpy(real.astype(np.int64)),
                "labels": torch.from_numpy(labels), "word_ids": torch.from_numpy(word_ids),
                "copy_mask": torch.from_numpy((word_ids >= 0) & ~token_masked),
                "document_ids": torch.from_numpy(document_ids(word_ids)),
                **_mrp_targets(m, mrp_selected, token_masked, B)}

    def _replace(self, input_ids, token_masked, flat, W: int, rng) -> np.ndarray:
        """``input_ids`` ``[B, L]`` with the masked tokens replaced 80/10/10 (mask / random / unchanged), one draw
        per word (``flat`` maps tokens onto the ``[B, W+1]`` words) unless ``replacement_per_token``."""
        B, L = input_ids.shape
        if self.replacement_per_token:
            draw = rng.random((B, L))
        else:
            draw = rng.random(B * (W + 1))[flat].reshape(B, L)  # [B, L], one draw per word
        to_mask = token_masked & (draw < self.mask_replace_prob)
        to_random = token_masked & ~to_mask & (draw < self.mask_replace_prob + self.random_replace_prob)
        masked_ids = input_ids.copy()
        masked_ids[to_mask] = self.mask_token_id
        n_random = int(to_random.sum())
        if n_random and self.random_token_ids.size:
            masked_ids[to_random] = self.random_token_ids[rng.integers(self.random_token_ids.size, size=n_random)]
        return masked_ids

    def _sample_mrp(self, m, budget, n_maskable, n_words, rng):
        """Choose the MRP-masked mentions; returns (selected, kept), boolean over the batch's mentions.

        The paper's loop (pick a usable group uniformly, then one of its unmasked mentions uniformly,
        repeat) is run for all rows at once as a race of exponential clocks: every group ticks at rate 1
        through its mentions in a random order and stops before its last one. By memorylessness the next
        tick comes from each still-usable group with equal probability, so sorting all ticks by time
        gives the loop's order.
        """
        n = m["row"].size
        selected, kept = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        if n == 0:
            return selected, kept
        group = m["group_key"]
        by_group = np.argsort(group + rng.random(n))  # groups in turn, a random mention order inside each
        g_sorted = group[by_group]
        first = np.r_[True, g_sorted[1:] != g_sorted[:-1]]
        group_start = np.flatnonzero(first)[np.cumsum(first) - 1]  # index of each element's group start
        group_size = np.diff(np.r_[np.flatnonzero(first), n])[np.cumsum(first) - 1]
        rank = np.arange(n) - group_start
        ticks = np.cumsum(rng.exponential(size=n))
        before = np.r_[0.0, ticks][group_start]  # clock total before the group's first mention
        time_sorted = np.where(rank == group_size - 1, np.inf, ticks - before)
        kept[by_group[rank == group_size - 1]] = True
        time = np.empty(n)
        time[by_group] = time_sorted
        if self.mrp_ratio == 0:
            return selected, kept

        row, length = m["row"], m["len"]
        # Per row, mentions in pick order, unpickable (inf) last: t / (1 + t) maps [0, inf] onto [0, 1].
        finite = np.isfinite(time)
        by_time = np.argsort(2.0 * row + np.where(finite, time / (1.0 + np.where(finite, time, 0.0)), 1.0))
        row_sorted = row[by_time]
        row_first = np.r_[True, row_sorted[1:] != row_sorted[:-1]]
        row_start = np.flatnonzero(row_first)[np.cumsum(row_first) - 1]
        pick_rank = np.arange(n) - row_start
        cum = np.cumsum(length[by_time])
        cum_len = cum - np.r_[0, cum][row_start]  # tokens used by the first picks of the row
        if self.mrp_share_as_cap:
            cap = np.where(budget > 0, np.maximum(1, _round_half_up(self.mrp_ratio * budget)), 0)
            take = cum_len <= cap[row_sorted]
        else:
            # k MRP words with k = r * (k + k_mlm) and k * mean_mention + k_mlm * mean_word = budget.
            B = budget.size
            counts = np.bincount(row, minlength=B)
            mean_mention = np.bincount(row, weights=length, minlength=B) / np.maximum(counts, 1)
            mean_word = n_maskable / np.maximum(n_words, 1)
            r = self.mrp_ratio
            k_float = r * budget / np.maximum(r * mean_mention + (1 - r) * mean_word, 1e-9)
            k = np.floor(k_float + rng.random(B)).astype(np.int64)  # stochastic rounding: E[k] = k_float
            take = (pick_rank < k[row_sorted]) & (cum_len <= budget[row_sorted])
        take &= finite[by_time]
        selected[by_time[take]] = True
        return selected, kept


def document_ids(word_ids: np.ndarray) -> np.ndarray:
    """``[B, L]`` document index of each word token, -1 elsewhere: a special token (word id -1) with a word on
    both sides separates two documents (``--packing documents``); a row of one document is all 0."""
    is_word = word_ids >= 0  # [B, L]
    before = np.zeros_like(is_word)
    before[:, 1:] = is_word[:, :-1]
    after = np.zeros_like(is_word)
    after[:, :-1] = is_word[:, 1:]
    separator = ~is_word & before & after
    return np.where(is_word, np.cumsum(separator, axis=1), -1)


def _stack_rows(features: Sequence[Mapping], pad_id: int, multiple: int | None) -> dict[str, np.ndarray]:
    """Pad rows into preallocated [B, L] arrays (each row copied straight into its slice) and flatten their
    mentions; validate cheap invariants."""
    B = len(features)
    lengths = np.fromiter((len(f["input_ids"]) for f in features), dtype=np.int64, count=B)
    L = int(lengths.max()) if B else 0
    if multiple:
        L = -(-L // multiple) * multiple
    input_ids = np.full((B, L), pad_id, dtype=np.int64)
    word_ids = np.full((B, L), -1, dtype=np.int64)
    mention_keys = ("mention_starts", "mention_ends", "mention_groups")
    counts = np.zeros((3, B), dtype=np.int64)
    for i, f in enumerate(features):
        n = lengths[i]
        if len(f["word_ids"]) != n:
            raise CorefBertError(f"batch row {i}: input_ids has {n} tokens but word_ids "
                                 f"{len(f['word_ids'])}; they must be equal-length lists; {_CONTRACT_HINT}")
        input_ids[i, :n] = f["input_ids"]
        word_ids[i, :n] = f["word_ids"]
        for k, key in enumerate(mention_keys):
            counts[k, i] = len(f.get(key, ()))
    word_ids[word_ids < 0] = -1
    for k, key in enumerate(mention_keys[1:], start=1):
        if (counts[k] != counts[0]).any():
            i = int(np.flatnonzero(counts[k] != counts[0])[0])
            raise CorefBertError(f"batch row {i}: {key} has {counts[k, i]} entries but mention_starts "
                                 f"{counts[0, i]}; {_CONTRACT_HINT}")
    ends = np.cumsum(counts[0])
    flat = {key: np.zeros(int(ends[-1]) if B else 0, dtype=np.int64) for key in mention_keys}
    for i, f in enumerate(features):
        if counts[0, i]:
            for key in mention_keys:
                flat[key][ends[i] - counts[0, i]:ends[i]] = f[key]
    return {"input_ids": input_ids, "word_ids": word_ids, "lengths": lengths,
            "mention_row": np.repeat(np.arange(B), counts[0]), **flat}


def _mentions(batch: dict[str, np.ndarray], word_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The batch's mentions as flat arrays (row, start, end, len, word, group_key); checks they are words."""
    row, start, end = batch["mention_row"], batch["mention_starts"], batch["mention_ends"]
    group = batch["mention_groups"]
    lengths = batch["lengths"]
    bad = (start < 0) | (end < start) | (end >= lengths[row]) | (group < 0)
    if not bad.any() and row.size:
        w_start, w_end = word_ids[row, start], word_ids[row, end]
        bad = (w_start < 0) | (w_start != w_end)
        # One word exactly: the tokens just outside the span must belong to other words.
        before = np.where(start > 0, word_ids[row, np.maximum(start - 1, 0)], -1)
        after = np.where(end + 1 < lengths[row], word_ids[row, np.minimum(end + 1, word_ids.shape[1] - 1)], -1)
        bad |= (before == w_start) | (after == w_start)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        i = int(row[j])
        k = j - int(np.searchsorted(row, i))
        raise CorefBertError(f"batch row {i}: mention {k} (tokens {start[j]}..{end[j]}, group {group[j]}) "
                             f"is not exactly one word of the row; {_CONTRACT_HINT}")
    n_groups = int(group.max()) + 1 if group.size else 1
    word = word_ids[row, start] if row.size else np.zeros(0, np.int64)
    return {"row": row, "start": start, "end": end, "len": end - start + 1, "word": word,
            "group_key": row * n_groups + group}


def _mrp_targets(m, selected, token_masked, B: int) -> dict[str, torch.Tensor]:
    """Padded [B, M] mention and [B, M, R] referent tensors for the MRP-masked mentions."""
    row, start, end, group = m["row"], m["start"], m["end"], m["group_key"]
    unmasked = ~token_masked[row, start] if row.size else np.zeros(0, dtype=bool)
    ref = np.flatnonzero(unmasked)
    span = int(end.max()) + 1 if end.size else 1
    ref = ref[np.argsort(group[ref] * span + start[ref])]  # referents grouped, each group in text order
    n_keys = int(group.max()) + 1 if group.size else 0
    ref_count = np.bincount(group[ref], minlength=n_keys)
    ref_offset = np.cumsum(ref_count) - ref_count

    idx = np.flatnonzero(selected)
    idx = idx[ref_count[group[idx]] > 0] if idx.size else idx  # referents_maskable may leave none
    idx = idx[np.argsort(row[idx] * span + start[idx])]
    rows = row[idx]
    first = np.r_[True, rows[1:] != rows[:-1]] if idx.size else np.zeros(0, dtype=bool)
    slot = np.arange(idx.size) - np.flatnonzero(first)[np.cumsum(first) - 1] if idx.size else idx
    M = int(slot.max()) + 1 if idx.size else 0
    count = ref_count[group[idx]]
    R = int(count.max()) if idx.size else 0

    starts, ends = np.zeros((B, M), dtype=np.int64), np.zeros((B, M), dtype=np.int64)
    mask = np.zeros((B, M), dtype=bool)
    starts[rows, slot], ends[rows, slot], mask[rows, slot] = start[idx], end[idx], True
    r_valid = np.arange(R)[None, :] < count[:, None]  # [n_mrp, R]
    r_pick = ref[np.where(r_valid, ref_offset[group[idx]][:, None] + np.arange(R)[None, :], 0)] if ref.size else None
    r_starts, r_ends = np.zeros((B, M, R), dtype=np.int64), np.zeros((B, M, R), dtype=np.int64)
    r_mask = np.zeros((B, M, R), dtype=bool)
    if idx.size:
        r_starts[rows, slot] = np.where(r_valid, start[r_pick], 0)
        r_ends[rows, slot] = np.where(r_valid, end[r_pick], 0)
        r_mask[rows, slot] = r_valid
    return {"mrp_mention_starts": torch.from_numpy(starts), "mrp_mention_ends": torch.from_numpy(ends),
            "mrp_mention_mask": torch.from_numpy(mask), "mrp_referent_starts": torch.from_numpy(r_starts),
            "mrp_referent_ends": torch.from_numpy(r_ends), "mrp_referent_mask": torch.from_numpy(r_mask)}
