"""Every encoder family with a masked-LM head: the copy head's loss is eq. 2-4 on each family's hidden
states, a tiny checkpoint of each pretrains with the real trainer, resumes exactly and round-trips through the stock
Auto classes, and per-document attention keeps each family's documents apart.

``family_dir`` (conftest) runs each test once per family of ``helpers.FAMILIES``, the family in the test id, so
``pytest -k "modernbert or deberta or electra or distilbert"`` selects the new families."""

from __future__ import annotations

import json
import shutil
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import synthetic_corpus, synthetic_rows
from references import mrp_loss_reference
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction
from corefbert.pretraining.families import PRETRAINING_CLASSES, load_pretraining_model
from corefbert.pretraining.pretraining_args import PretrainingArguments
from corefbert.pretraining.run import run_pretraining
from corefbert.training.checkpoints.folders import list_checkpoints


def _two_document_rows(tokenizer, n_rows: int, seed: int) -> list[dict]:
    """Rows that pack two synthetic documents with a separator between them (``--packing documents``' layout:
    the separator has word id -1 between two words, so the collator numbers the documents 0 and 1)."""
    first, second = synthetic_rows(tokenizer, n_rows, seed), synthetic_rows(tokenizer, n_rows, seed + 100)
    rows = []
    for i in range(n_rows):
        ids_a, ids_b = first["input_ids"][i], second["input_ids"][i]
        words_a, words_b = first["word_ids"][i], second["word_ids"][i]
        offset, word_offset = len(ids_a) - 1, max(words_a) + 1  # b's [CLS] is dropped; a's [SEP] separates
        groups_a = first["mention_groups"][i]
        group_offset = max(groups_a, default=-1) + 1
        rows.append({
            "input_ids": ids_a + ids_b[1:],
            "word_ids": words_a + [w + word_offset if w >= 0 else -1 for w in words_b[1:]],
            "mention_starts": first["mention_starts"][i] + [s + offset for s in second["mention_starts"][i]],
            "mention_ends": first["mention_ends"][i] + [e + offset for e in second["mention_ends"][i]],
            "mention_groups": groups_a + [g + group_offset for g in second["mention_groups"][i]],
        })
    return rows


def _batch(tokenizer, documents: int, seed: int = 0) -> dict:
    if documents == 1:
        columns = synthetic_rows(tokenizer, 3, seed)
        rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    else:
        rows = _two_document_rows(tokenizer, 3, seed)
    collator = DataCollatorForMentionReferencePrediction(tokenizer, mlm_probability=0.2, mrp_ratio=0.5, seed=seed)
    return collator(rows)


def _last_hidden(model, batch) -> tuple:
    """``(forward output, the body's last_hidden_state [batch, seq, hidden])``, the latter caught on its way out."""
    caught = {}

    def catch(module, args, output):  # returns None: the output goes on unchanged
        caught["h"] = output.last_hidden_state

    hook = model.base_model.register_forward_hook(catch)
    try:
        with torch.no_grad():
            out = model(**batch)
    finally:
        hook.remove()
    return out, caught["h"]


@pytest.mark.parametrize("documents", [1, 2], ids=["one document", "two documents"])
def test_copy_head_loss_is_the_literal_equations_on_each_family(family_dir, documents):
    """The family's model takes the real collator's batch (no token_type_ids where the family has none), and its
    MRP loss is the literal eq. 2-4 loop over its own final hidden states; with two documents per row the softmax
    stays in the query's document and the encoder attends within documents."""
    tokenizer = AutoTokenizer.from_pretrained(family_dir)
    model = load_pretraining_model(family_dir, mrp_attention_within_documents=documents == 2).eval()
    assert type(model) is PRETRAINING_CLASSES[model.config.model_type]
    batch = _batch(tokenizer, documents)
    assert int(batch["mrp_mention_mask"].sum()) >= 2
    assert int(batch["document_ids"].max()) == documents - 1
    with torch.no_grad():
        model.mrp.copy_vector.copy_(torch.randn_like(model.mrp.copy_vector))
    out, hidden = _last_hidden(model, batch)
    expected = mrp_loss_reference(hidden, model.mrp.copy_vector.detach(), batch)
    assert out.mrp_loss.item() == pytest.approx(expected, abs=1e-5)
    assert torch.isfinite(out.mlm_loss) and out.mrp_total.item() == int(batch["mrp_mention_mask"].sum())
    if model.config.model_type in ("distilbert", "modernbert"):  # no token types: refused, never dropped silently
        with pytest.raises(ValueError, match="takes no token_type_ids"):
            model(**batch, token_type_ids=torch.zeros_like(batch["input_ids"]))


@pytest.mark.parametrize("within", [False, True], ids=["across documents", "within documents"])
def test_attention_within_documents_keeps_each_familys_documents_apart(family_dir, within):
    """Another text in the second document leaves the first document's final states as they were under
    ``--attention_within_documents`` (each family takes the per-document mask), and changes them without it."""
    tokenizer = AutoTokenizer.from_pretrained(family_dir)
    model = load_pretraining_model(family_dir, mrp_attention_within_documents=within).eval()
    batch = _batch(tokenizer, 2)
    other = dict(batch)
    second = batch["document_ids"] == 1  # [batch, seq]
    other["input_ids"] = torch.where(second, (batch["input_ids"] + 1) % len(tokenizer), batch["input_ids"])
    other["input_ids"] = torch.where(second & (other["input_ids"] < 5), 7, other["input_ids"])  # no special ids
    first = batch["document_ids"] == 0
    states = [_last_hidden(model, b)[1][first] for b in (batch, other)]
    difference = (states[0] - states[1]).abs().max().item()
    assert (difference < 1e-5) if within else (difference > 1e-4), difference


def test_modernbert_local_layers_keep_their_window_within_documents(tmp_path):
    """ModernBERT's sliding-window layers get the window and the document rule together, its global layers the
    document rule alone (a 4-D mask handed to both would drop the window)."""
    from helpers import save_tiny_family
    from transformers import AutoConfig

    from corefbert.pretraining.families import CorefModernBertForPreTraining

    folder = save_tiny_family("modernbert", tmp_path / "modernbert")
    model = load_pretraining_model(folder, mrp_attention_within_documents=True).eval()
    batch = _batch(AutoTokenizer.from_pretrained(folder), 2)
    masks = model.within_documents_mask(batch["attention_mask"], batch["document_ids"])
    full, local = masks["full_attention"][:, 0], masks["sliding_attention"][:, 0]  # [batch, seq, seq] bool (sdpa)
    docs = batch["document_ids"]
    length = docs.shape[1]
    distance = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).abs()  # [seq, seq]
    same = (docs[:, :, None] == docs[:, None, :]) & (docs[:, :, None] >= 0)  # words of one document
    far = distance > model.config.sliding_window
    assert (same & far).any() and (full & same & far).any()  # a long document: the window matters
    assert not (local & far).any()
    assert torch.equal(local, full & ~far)
    assert not (full & (docs[:, :, None] >= 0) & (docs[:, None, :] >= 0) & ~same).any()  # never across documents
    # The eager implementation takes the same rule as an additive mask: the same states on every real token.
    config = AutoConfig.from_pretrained(folder)
    config.mrp_attention_within_documents = True
    eager = CorefModernBertForPreTraining.from_pretrained(folder, config=config, attn_implementation="eager").eval()
    assert eager.config._attn_implementation == "eager" and model.config._attn_implementation == "sdpa"
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(_last_hidden(eager, batch)[1][real], _last_hidden(model, batch)[1][real],
                               rtol=0, atol=1e-5)


def _args(model_dir, out, **overrides) -> PretrainingArguments:
    values = dict(model_name_or_path=str(model_dir), output_dir=str(out), max_steps=3, per_device_train_batch_size=4,
                  per_device_eval_batch_size=8, learning_rate=1e-3, warmup_ratio=0.0, logging_steps=1,
                  mixed_precision="no", save_total_limit=3, seed=7, checkpointing_steps=1)
    values.update(overrides)
    return PretrainingArguments(**values)


def _train_losses(out) -> list[tuple[int, float]]:
    records = map(json.loads, (Path(out) / "log.jsonl").read_text().splitlines())
    return [(r["step"], r["loss"]) for r in records if r["split"] == "train"]


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_each_family_pretrains_resumes_exactly_and_round_trips(family_dir, tmp_path, monkeypatch):
    """A tiny checkpoint of each family pretrains 3 steps with the real trainer; a run stopped by SIGTERM after
    step 2 resumes to the uninterrupted run's losses; the final checkpoint gives the stock encoder (equal hidden
    states), the stock masked LM (equal logits) and, through AutoModelForPreTraining, the family's CorefBERT class."""
    from accelerate.state import AcceleratorState, GradientState

    from corefbert.training.outputs.runlog import RunLog

    splits = synthetic_corpus(AutoTokenizer.from_pretrained(family_dir), n_train=12, n_eval=4)
    args = _args(family_dir, tmp_path / "full")
    run_pretraining(args, splits=splits)
    expected = _train_losses(args.output_dir)
    assert [step for step, _ in expected] == [1, 2, 3]

    stopped = replace(args, output_dir=str(tmp_path / "stopped"))
    real_log = RunLog.log

    def log(self, record):
        real_log(self, record)
        if record.get("split") == "train" and record["step"] == 2:
            signal.raise_signal(signal.SIGTERM)

    with monkeypatch.context() as patch:
        patch.setattr(RunLog, "log", log)
        with pytest.raises(SystemExit):
            run_pretraining(stopped, splits=splits)
    assert [s for s, _ in list_checkpoints(stopped.output_dir)] == [1, 2]
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    run_pretraining(replace(stopped, resume_from_checkpoint="latest"), splits=splits)
    resumed = _train_losses(stopped.output_dir)
    assert [step for step, _ in resumed] == [1, 2, 3]
    for (step, want), (_, have) in zip(expected, resumed):
        assert have == pytest.approx(want, abs=1e-6), step

    final = tmp_path / "full" / "final"
    coref = AutoModelForPreTraining.from_pretrained(final).eval()
    assert type(coref) is PRETRAINING_CLASSES[coref.config.model_type]
    assert type(load_pretraining_model(final)) is type(coref)
    batch = _batch(AutoTokenizer.from_pretrained(final), 1)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    out, hidden = _last_hidden(coref, inputs)
    encoder, info = AutoModel.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"]
    with torch.no_grad():
        torch.testing.assert_close(encoder.eval()(**inputs).last_hidden_state, hidden, rtol=0, atol=1e-6)
    masked_lm, info = AutoModelForMaskedLM.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"]
    assert {k for k in info["unexpected_keys"] if ".pooler." not in k} == {"mrp.copy_vector"}  # BERT's pooler aside
    with torch.no_grad():
        torch.testing.assert_close(masked_lm.eval()(**inputs).logits, out.logits, rtol=0, atol=1e-5)
    shutil.rmtree(tmp_path / "stopped")


def test_a_family_without_a_class_here_gets_one_from_its_masked_lm(tmp_path):
    """ALBERT has no class in this package: load_pretraining_model makes one from ``AlbertForMaskedLM``, whose
    logits are the stock model's, whose MRP loss is eq. 2-4, and whose masked-rows-only loss is the same."""
    from helpers import fixture_tokenizer
    from transformers import AlbertConfig, AlbertForMaskedLM

    tokenizer = fixture_tokenizer("wordpiece")
    config = AlbertConfig(vocab_size=len(tokenizer), embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    AlbertForMaskedLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model = load_pretraining_model(tmp_path).eval()
    assert type(model).__name__ == "CorefAlbertForPreTraining" and PRETRAINING_CLASSES["albert"] is type(model)
    batch = _batch(tokenizer, 1)
    out, hidden = _last_hidden(model, batch)
    assert out.mrp_loss.item() == pytest.approx(mrp_loss_reference(hidden, model.mrp.copy_vector, batch), abs=1e-5)
    with torch.no_grad():
        stock = AlbertForMaskedLM.from_pretrained(tmp_path).eval()(input_ids=batch["input_ids"],
                                                                      attention_mask=batch["attention_mask"])
        torch.testing.assert_close(out.logits, stock.logits, rtol=0, atol=1e-5)
        masked = model(**batch, masked_logits_only=True)
    assert masked.loss.item() == pytest.approx(out.loss.item(), abs=1e-6)
    assert masked.logits.shape[0] == int((batch["labels"] != -100).sum())
    model.save_pretrained(tmp_path / "coref")
    assert type(AutoModelForPreTraining.from_pretrained(tmp_path / "coref")) is type(model)


def test_an_encoder_decoder_masked_lm_is_refused_in_one_line(tmp_path):
    """BART has an ``AutoModelForMaskedLM`` class, but its logits come from a decoder: not an encoder to copy from."""
    from transformers import BartConfig

    from corefbert.errors import CorefBertError

    BartConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
               decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32).save_pretrained(tmp_path)
    with pytest.raises(CorefBertError, match="model_type 'bart' is not supported") as err:
        load_pretraining_model(tmp_path)
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


def _long_modernbert(folder: Path, positions: int) -> Path:
    """The tiny ModernBERT of ``helpers.tiny_config`` with ``positions`` positions (ModernBERT's own: 8192)."""
    from helpers import FAMILIES, fixture_tokenizer, tiny_config

    tokenizer = fixture_tokenizer(FAMILIES["modernbert"])
    config = tiny_config("modernbert", tokenizer)
    config.max_position_embeddings = positions
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_modernbert_pretrains_on_1024_token_rows_with_candidates_in_their_documents(tmp_path, capsys):
    """Beyond BERT's 512: rows of up to 1024 tokens packing several documents (the real packer) train a ModernBERT
    with per-document attention; the copy softmax of each query is still its own document's (eq. 2-4 literal
    loop); --max_seq_length beyond the model's positions is refused in one line before any work."""
    import datasets
    from helpers import load_cli, training_text
    from test_corpus import RegexTagger

    from corefbert.corpus.mentions import MentionExtractor
    from corefbert.corpus.packing import pack_texts

    folder = _long_modernbert(tmp_path / "modernbert", 1100)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = [" ".join(training_text()[i::4]) for i in range(4)] * 6
    rows = pack_texts(texts, tokenizer, MentionExtractor(RegexTagger()), max_seq_length=1024, short_seq_prob=0)
    assert max(len(row["input_ids"]) for row in rows) > 900
    model = load_pretraining_model(folder, mrp_attention_within_documents=True).eval()
    collator = DataCollatorForMentionReferencePrediction(tokenizer, mlm_probability=0.15, mrp_ratio=0.5, seed=0)
    batch = collator(rows[:1])
    assert int(batch["document_ids"].max()) >= 1 and int(batch["mrp_mention_mask"].sum()) >= 2
    out, hidden = _last_hidden(model, batch)
    assert out.mrp_loss.item() == pytest.approx(mrp_loss_reference(hidden, model.mrp.copy_vector, batch), abs=1e-5)

    splits = datasets.DatasetDict(train=datasets.Dataset.from_list(rows), validation=datasets.Dataset.from_list(rows[:2]))
    metrics = run_pretraining(_args(folder, tmp_path / "run", max_steps=1, per_device_train_batch_size=2,
                                    attention_within_documents=True), splits=splits)
    assert metrics["mrp_accuracy"] >= 0 and (tmp_path / "run" / "final" / "config.json").exists()

    argv = ["--train_file", tmp_path / "text.txt", "--model_name_or_path", folder, "--output_dir", tmp_path / "out",
            "--max_seq_length", "1101"]
    (tmp_path / "text.txt").write_text(texts[0], encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        load_cli("pretrain/prepare_corpus.py").main([str(a) for a in argv])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert exit_info.value.code == 2 and len(errors) == 1, errors
    assert "max_seq_length 1101 exceeds the 1100 positions" in errors[0]
    assert not (tmp_path / "out").exists()
