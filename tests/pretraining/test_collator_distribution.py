"""The collator's batched sampler against the paper's loop (tests/references.py), in distribution.

Both mask the same fixture rows many times over, seeded; the test compares how often each word is masked, how
often it is masked for MRP, the MRP : MLM split per row and the 80/10/10 shares, each with a chi-square
statistic against its quantile at 1e-6 (a failure is a real difference, not bad luck). Deliberately biased
variants of the loop must fail the same check: that is what shows it can fail.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from references import mrp_masking_reference
from scipy.stats import chi2

from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction

DRAWS = 1000  # per row and sampler; a bug in the tests below fails by 5-50x its bound at this size
P_FAIL = 1e-6  # the chance that a correct sampler fails one statistic


def _row(word_lengths: list[int], groups: dict[int, int], seed: int, tokenizer) -> dict:
    """A packed row ``[CLS] words [SEP]``: word ``w`` has ``word_lengths[w]`` tokens; ``groups`` maps a word to
    its mention group (a word absent from it is not a mention)."""
    rng = np.random.default_rng(seed)
    vocab = np.setdiff1d(np.arange(len(tokenizer)), tokenizer.all_special_ids)
    ids, word_ids, starts, ends, mention_groups = [tokenizer.cls_token_id], [-1], [], [], []
    for w, length in enumerate(word_lengths):
        if w in groups:
            starts.append(len(ids))
            ends.append(len(ids) + length - 1)
            mention_groups.append(groups[w])
        ids.extend(int(t) for t in rng.choice(vocab, size=length))
        word_ids.extend([w] * length)
    ids.append(tokenizer.sep_token_id)
    word_ids.append(-1)
    return {"input_ids": ids, "word_ids": word_ids, "mention_starts": starts, "mention_ends": ends,
            "mention_groups": mention_groups}


@pytest.fixture(scope="module")
def fixture_rows(bert_tokenizer) -> list[dict]:
    """Rows that make the sampler's choices visible: groups of unequal size (uniform group vs uniform mention),
    multi-token words and mentions, a row without mentions (all MLM), a row whose budget is one token."""
    lengths_a = [1, 2, 1, 1, 3, 1, 1, 2, 1, 1] * 4
    groups_a = {0: 0, 5: 0, 12: 0, 20: 0, 33: 0, 3: 1, 27: 1, 8: 2, 16: 2, 38: 2}
    lengths_b = [1] * 20
    groups_b = {2: 0, 11: 0}
    lengths_d = [1, 3, 1, 1, 2, 1] * 10
    groups_d = {1: 0, 19: 0, 4: 1, 22: 1, 40: 1, 58: 1, 7: 2, 13: 2, 25: 2, 31: 2, 43: 2, 49: 2}
    return [
        _row(lengths_a, groups_a, 0, bert_tokenizer),
        _row(lengths_b, groups_b, 1, bert_tokenizer),
        _row([1, 2] * 15, {}, 2, bert_tokenizer),
        _row(lengths_d, groups_d, 3, bert_tokenizer),
        _row([1, 1, 2, 1, 1, 1], {0: 0, 4: 0}, 4, bert_tokenizer),
    ]


class _Tally:
    """Counts over many draws of masks for a fixed list of rows."""

    def __init__(self, rows: list[dict], mask_token_id: int):
        self.masked = [np.zeros(max(r["word_ids"]) + 1) for r in rows]  # per row and word: times masked
        self.mrp = [np.zeros(max(r["word_ids"]) + 1) for r in rows]  # ... times masked for MRP
        self.n_mrp = [[] for _ in rows]  # per row: MRP words in each draw
        self.n_mlm = [[] for _ in rows]
        self.fates = np.zeros(3)  # masked words that became [MASK] / a random token / stayed unchanged
        self.rows = rows
        self.mask_token_id = mask_token_id

    def add(self, i: int, mrp_words: set, mlm_words: set, masked_ids: np.ndarray):
        row = self.rows[i]
        self.masked[i][sorted(mrp_words | mlm_words)] += 1
        self.mrp[i][sorted(mrp_words)] += 1
        self.n_mrp[i].append(len(mrp_words))
        self.n_mlm[i].append(len(mlm_words))
        word_ids = np.asarray(row["word_ids"])
        original = np.asarray(row["input_ids"])
        for word in mrp_words | mlm_words:
            tokens = word_ids == word
            if (masked_ids[tokens] == self.mask_token_id).all():
                self.fates[0] += 1
            elif (masked_ids[tokens] == original[tokens]).all():
                self.fates[2] += 1
            else:
                self.fates[1] += 1


def _tally_collator(rows, tokenizer, draws: int, seed: int) -> _Tally:
    tally = _Tally(rows, tokenizer.mask_token_id)
    collator = DataCollatorForMentionReferencePrediction(tokenizer, seed=seed)
    copies = 100  # every copy of a row in a batch is an independent draw
    for _ in range(draws // copies):
        out = collator(rows * copies)
        labels, input_ids = out["labels"].numpy(), out["input_ids"].numpy()
        starts, slots = out["mrp_mention_starts"].numpy(), out["mrp_mention_mask"].numpy()
        for b in range(len(rows) * copies):
            i = b % len(rows)
            word_ids = np.asarray(rows[i]["word_ids"])
            n = len(word_ids)
            masked = set(word_ids[:n][labels[b, :n] != -100].tolist())
            mrp_words = set(word_ids[starts[b][slots[b]]].tolist())
            tally.add(i, mrp_words, masked - mrp_words, input_ids[b, :n])
    return tally


def _tally_loop(rows, tokenizer, draws: int, seed: int, sampler: Callable = mrp_masking_reference) -> _Tally:
    tally = _Tally(rows, tokenizer.mask_token_id)
    rng = np.random.default_rng(seed)
    random_ids = np.setdiff1d(np.arange(len(tokenizer)), tokenizer.all_special_ids)
    for _ in range(draws):
        for i, row in enumerate(rows):
            out = sampler(row, rng, random_ids, tokenizer.mask_token_id)
            tally.add(i, out["mrp_words"], out["mlm_words"], out["input_ids"])
    return tally


def _two_sample_chi2(a: np.ndarray, b: np.ndarray, n: int) -> tuple[float, int]:
    """Sum over cells of the squared two-proportion z statistic: ``a``, ``b`` are per-cell counts out of ``n``
    draws each; cells that neither sampler ever (or always) hits carry no information and are left out."""
    p = (a + b) / (2 * n)
    informative = (p > 0) & (p < 1)
    z2 = (a - b)[informative] ** 2 / (2 * n * p[informative] * (1 - p[informative]))
    return float(z2.sum()), int(informative.sum())


def _mean_chi2(xs: list[list[int]], ys: list[list[int]]) -> tuple[float, int]:
    """Sum over rows of the squared Welch z statistic of the difference of two means."""
    total, df = 0.0, 0
    for x, y in zip(xs, ys):
        x, y = np.asarray(x, float), np.asarray(y, float)
        variance = x.var(ddof=1) / x.size + y.var(ddof=1) / y.size
        if variance > 0:
            total += (x.mean() - y.mean()) ** 2 / variance
            df += 1
    return total, df


def distribution_differences(a: _Tally, b: _Tally, n: int) -> list[str]:
    """The statistics on which ``a`` and ``b`` differ beyond their 1e-6 chi-square quantile (empty: agree)."""
    checks = {
        "per-word masking frequency": _two_sample_chi2(np.concatenate(a.masked), np.concatenate(b.masked), n),
        "per-word MRP frequency": _two_sample_chi2(np.concatenate(a.mrp), np.concatenate(b.mrp), n),
        "MRP words per row": _mean_chi2(a.n_mrp, b.n_mrp),
        "MLM words per row": _mean_chi2(a.n_mlm, b.n_mlm),
    }
    # 80/10/10: a 2 x 3 contingency table of the masked words' fates (df 2).
    table = np.stack([a.fates, b.fates])
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    checks["80/10/10 shares"] = (float(((table - expected) ** 2 / expected).sum()), 2)
    return [f"{name}: chi2 {x:.1f} > {chi2.isf(P_FAIL, df):.1f} (df {df})"
            for name, (x, df) in checks.items() if df and x > chi2.isf(P_FAIL, df)]


@pytest.fixture(scope="module")
def collator_tally(fixture_rows, bert_tokenizer):
    return _tally_collator(fixture_rows, bert_tokenizer, DRAWS, seed=1)


@pytest.fixture(scope="module")
def loop_tally(fixture_rows, bert_tokenizer):
    return _tally_loop(fixture_rows, bert_tokenizer, DRAWS, seed=2)


def test_the_fast_sampler_matches_the_papers_loop_in_distribution(collator_tally, loop_tally):
    assert distribution_differences(collator_tally, loop_tally, DRAWS) == []


def test_the_loop_itself_is_the_paper(loop_tally, fixture_rows, bert_tokenizer):
    """The reference's own shares: 80/10/10, MRP about a fifth of the masked words where groups abound, no
    MRP without a group, and one mention of every group always left unmasked."""
    assert np.allclose(loop_tally.fates / loop_tally.fates.sum(), [0.8, 0.1, 0.1], atol=0.02)
    rich = (0, 3)  # the rows with several usable groups
    mrp = sum(sum(loop_tally.n_mrp[i]) for i in rich)
    mlm = sum(sum(loop_tally.n_mlm[i]) for i in rich)
    assert 0.15 < mrp / (mrp + mlm) < 0.25
    assert sum(loop_tally.n_mrp[2]) == 0  # no mention at all: the whole budget went to MLM
    rng = np.random.default_rng(3)
    for row in fixture_rows:
        word_ids = np.asarray(row["word_ids"])
        for _ in range(200):
            out = mrp_masking_reference(row, rng, np.arange(5, 50), bert_tokenizer.mask_token_id)
            for group in set(row["mention_groups"]):
                mentions = {int(word_ids[s]) for s, g in zip(row["mention_starts"], row["mention_groups"]) if g == group}
                assert mentions - out["mrp_words"] - out["mlm_words"]


def _groups_by_size(row, rng, random_ids, mask_id):
    """A plausible bug: the MRP mention drawn uniformly over all maskable mentions, so a group is picked in
    proportion to its size instead of uniformly."""
    return mrp_masking_reference(row, rng, random_ids, mask_id, group_choice="by_size")


def _split_by_tokens(row, rng, random_ids, mask_id):
    """A plausible bug: MLM : MRP = 4 : 1 by tokens instead of by words (fewer MRP words where mentions are
    long)."""
    return mrp_masking_reference(row, rng, random_ids, mask_id, split_by="tokens")


def _per_token_replacement(row, rng, random_ids, mask_id):
    """A plausible bug: 80/10/10 drawn per token, so multi-token words come out mixed."""
    out = mrp_masking_reference(row, rng, random_ids, mask_id, mask_replace_prob=0.0, random_replace_prob=0.0)
    word_ids = np.asarray(row["word_ids"])
    for position in np.flatnonzero(np.isin(word_ids, sorted(out["mrp_words"] | out["mlm_words"]))):
        draw = rng.random()
        if draw < 0.8:
            out["input_ids"][position] = mask_id
        elif draw < 0.9:
            out["input_ids"][position] = random_ids[int(rng.integers(len(random_ids)))]
    return out


@pytest.mark.parametrize("biased", [_groups_by_size, _split_by_tokens, _per_token_replacement])
def test_a_biased_loop_fails_the_same_check(biased, collator_tally, fixture_rows, bert_tokenizer):
    tally = _tally_loop(fixture_rows, bert_tokenizer, DRAWS, seed=2, sampler=biased)
    assert distribution_differences(collator_tally, tally, DRAWS) != []
