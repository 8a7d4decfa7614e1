"""Literal, loop-by-loop references that the tests hold the library's batched implementations to.

Each one follows its paper's text step by step, for one example at a time, with no vectorization: slow and
obvious on purpose. They live beside the tests because nothing in the library runs them; a reference a
benchmark times (``lstmn_reference``, ``reference_coref_gru``, ``paired_bootstrap_reference``, the coreference
metrics' ``*_literal``) stays next to its fast twin in the package.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# ---------------------------------------------------------------- CorefBERT's MLM + MRP masking (Ye et al. 2020, 3.2)


def mrp_masking_reference(row: Mapping, rng: np.random.Generator, random_token_ids: np.ndarray,
                          mask_token_id: int, mlm_probability: float = 0.15, mrp_ratio: float = 0.2,
                          mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1,
                          group_choice: str = "uniform", split_by: str = "words") -> dict:
    """Mask ONE packed row (docs/contracts.md schema) the way the paper describes it, one word at a time.

    Returns ``{"mrp_words": set, "mlm_words": set, "input_ids": np.ndarray}``: the word ids masked for MRP and
    for MLM, and the row's inputs after the 80/10/10 replacement.

    The paper fixes the 15% budget, whole words, the 4 : 1 split by words, uniform group then uniform mention,
    one mention per group left unmasked and 80/10/10. Where it is silent, this follows the choices the collator
    documents (its class docstring), so that the two must agree in distribution:

    - the budget is ``max(1, round_half_up(0.15 * maskable tokens))``;
    - the number of MRP words ``k`` solves ``k = r (k + k_mlm)`` with ``k`` mentions of the row's mean mention
      length and ``k_mlm`` words of its mean word length filling the budget, rounded stochastically;
    - the mention each group keeps unmasked is drawn before any pick (uniformly), so a pick that would
      overflow the budget ends the MRP loop without changing which mention is kept;
    - MLM walks the other words in a uniformly random order and stops at the first that does not fit.

    ``group_choice="by_size"`` (a group in proportion to its maskable mentions) and ``split_by="tokens"``
    (MRP gets a fifth of the budget's tokens, not of its words) are the two bugs the distribution test must
    catch; the paper is the defaults.
    """
    input_ids = np.asarray(row["input_ids"], dtype=np.int64)
    word_ids = [int(w) for w in row["word_ids"]]
    words: dict[int, list[int]] = {}  # word id -> its token positions
    for position, word in enumerate(word_ids):
        if word >= 0:
            words.setdefault(word, []).append(position)
    n_maskable = sum(len(tokens) for tokens in words.values())
    budget = 0
    if n_maskable > 0 and mlm_probability > 0:
        budget = max(1, int(np.floor(mlm_probability * n_maskable + 0.5)))

    # Mentions by group: mention = its word id; a group is the mentions sharing a surface form (group id).
    groups: dict[int, list[int]] = {}
    for start, group in zip(row["mention_starts"], row["mention_groups"]):
        groups.setdefault(int(group), []).append(word_ids[int(start)])

    # One mention per group stays unmasked: chosen up front, uniformly (the referent MRP copies from).
    kept = {group: mentions[int(rng.integers(len(mentions)))] for group, mentions in groups.items()}

    # How many MRP words: MLM : MRP = 4 : 1 by words, in a budget counted in tokens.
    mentions_all = [m for mentions in groups.values() for m in mentions]
    k = 0
    if mrp_ratio > 0 and mentions_all:
        mean_mention = sum(len(words[m]) for m in mentions_all) / len(mentions_all)
        mean_word = n_maskable / len(words)
        k_float = mrp_ratio * budget / max(mrp_ratio * mean_mention + (1 - mrp_ratio) * mean_word, 1e-9)
        if split_by == "tokens":
            k_float = mrp_ratio * budget / mean_mention
        k = int(np.floor(k_float + rng.random()))

    # MRP: a usable group uniformly, then one of its maskable mentions uniformly, until k words or no group.
    mrp_words: set[int] = set()
    used = 0
    while len(mrp_words) < k:
        maskable = {g: [m for m in mentions if m != kept[g] and m not in mrp_words]
                    for g, mentions in groups.items()}
        usable = sorted(g for g, mentions in maskable.items() if mentions)
        if not usable:
            break  # every group is down to its one unmasked mention
        if group_choice == "by_size":
            sizes = np.asarray([len(maskable[g]) for g in usable], dtype=float)
            group = usable[int(rng.choice(len(usable), p=sizes / sizes.sum()))]
        else:
            group = usable[int(rng.integers(len(usable)))]
        mention = maskable[group][int(rng.integers(len(maskable[group])))]
        if used + len(words[mention]) > budget:
            break
        mrp_words.add(mention)
        used += len(words[mention])

    # MLM: whole words in a random order, never an MRP word nor (with MRP on) a group's kept mention.
    protected = set(kept.values()) if mrp_ratio > 0 else set()
    candidates = [w for w in sorted(words) if w not in mrp_words and w not in protected]
    mlm_words: set[int] = set()
    for index in rng.permutation(len(candidates)):
        word = candidates[int(index)]
        if used + len(words[word]) > budget:
            break
        mlm_words.add(word)
        used += len(words[word])

    # 80/10/10, decided once per masked word.
    masked_ids = input_ids.copy()
    for word in sorted(mrp_words | mlm_words):
        draw = rng.random()
        for position in words[word]:
            if draw < mask_replace_prob:
                masked_ids[position] = mask_token_id
            elif draw < mask_replace_prob + random_replace_prob:
                masked_ids[position] = random_token_ids[int(rng.integers(len(random_token_ids)))]
    return {"mrp_words": mrp_words, "mlm_words": mlm_words, "input_ids": masked_ids}
