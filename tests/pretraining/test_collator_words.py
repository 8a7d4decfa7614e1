"""Whole-word masking for every tokenizer family: rows prepared from real text with each committed tiny
tokenizer (tests/fixtures/tokenizers/), masked by the collator, never mask part of a word, where a word is what the
literal reference (``references.words_reference``) finds from the text, spaCy and the tokenizer's own offsets and
word ids, not from the rows; and on those rows the collator's batched sampler matches the paper's loop in
distribution (``references.mrp_masking_reference``, through ``test_collator_distribution``'s statistics).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES, TOKENIZER_KINDS, fixture_tokenizer
from references import words_reference
from test_collator_distribution import _tally_collator, _tally_loop, distribution_differences

from corefbert.corpus.mentions import MentionExtractor, load_spacy_pipeline
from corefbert.corpus.packing import pack_texts
from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction
from corefbert.text.tokenizers import special_token_frame

STORIES = FIXTURES / "collator" / "stories.txt"
DRAWS = 500  # per row and sampler (a multiple of _tally_collator's 100 copies)


@pytest.fixture(scope="module")
def nlp():
    return load_spacy_pipeline()


@pytest.fixture(scope="module", params=list(TOKENIZER_KINDS), ids=list(TOKENIZER_KINDS))
def packed(request, nlp):
    """``(tokenizer, rows, words)``: the fixture stories packed one document per row, and for each row the
    reference word of each of its tokens (-1 on special tokens), numbered over the row's document."""
    tokenizer = fixture_tokenizer(request.param)
    texts = [p for p in STORIES.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    rows = pack_texts(texts, tokenizer, MentionExtractor(nlp), max_seq_length=96, short_seq_prob=0, packing="single")
    prefix, suffix = special_token_frame(tokenizer)
    words, r = [], 0
    for text, doc in zip(texts, nlp.pipe(texts)):
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        chars = [(t.idx, t.idx + len(t)) for t in doc if not t.is_space]
        word_of_token = words_reference(text, chars, [tuple(o) for o in encoding["offset_mapping"]],
                                        encoding.word_ids())[0]
        done = 0
        while done < len(word_of_token):  # this document's rows, in order: its tokens, contiguous
            inner = rows[r]["input_ids"][len(prefix):len(rows[r]["input_ids"]) - len(suffix)]
            assert inner == encoding["input_ids"][done:done + len(inner)]
            words.append([-1] * len(prefix) + word_of_token[done:done + len(inner)] + [-1] * len(suffix))
            done, r = done + len(inner), r + 1
    assert r == len(rows)
    return tokenizer, rows, words


def test_whole_word_masks_never_split_a_word(packed):
    tokenizer, rows, words = packed
    collator = DataCollatorForMentionReferencePrediction(tokenizer, seed=0)
    masked_words = 0
    for _ in range(20):
        out = collator(rows)
        labels = out["labels"].numpy()
        for b, row_words in enumerate(words):
            row_words = np.asarray(row_words)
            masked = labels[b, :len(row_words)] != -100
            for word in np.unique(row_words[row_words >= 0]):
                inside = masked[row_words == word]
                assert inside.all() or not inside.any(), (b, word)
                masked_words += int(inside.all())
            slots = out["mrp_mention_mask"][b].numpy()
            for start, end in zip(out["mrp_mention_starts"][b].numpy()[slots], out["mrp_mention_ends"][b].numpy()[slots]):
                tokens = np.flatnonzero(row_words == row_words[start])  # an MRP mention is one whole word
                assert (tokens[0], tokens[-1]) == (start, end)
    assert masked_words > 100


def test_the_collator_matches_the_papers_loop_on_rows_of_every_kind(packed):
    tokenizer, rows, _ = packed
    rich = sorted(range(len(rows)), key=lambda i: -len(set(rows[i]["mention_groups"])))[:3]  # most groups
    sample = [rows[i] for i in rich]
    assert all(len(set(row["mention_groups"])) >= 2 for row in sample)
    assert distribution_differences(_tally_collator(sample, tokenizer, DRAWS, seed=1),
                                    _tally_loop(sample, tokenizer, DRAWS, seed=2), DRAWS) == []
