"""Pair classifiers (corefbert/tasks/pronoun_pairs/models.py, corefbert/tasks/pronoun_pairs/lstmn.py) (their metrics: tests/metrics/test_metrics_pairs.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import FIXTURES, load_cli

from corefbert.tasks.pronoun_pairs.lstmn import LSTMN, lstmn_reference
from corefbert.tasks.pronoun_pairs.models import (
    PAIR_FOLDER,
    PairModelConfig,
    build_pair_model,
    distance_buckets,
)
from corefbert.text.vocabulary import Vocabulary

PAIRS16 = FIXTURES / "pronoun_pairs" / "pairs16.jsonl"


def _padded_batch(lengths, size, generator):
    inputs = torch.randn(len(lengths), max(lengths), size, generator=generator)  # [batch, time, size]
    mask = torch.tensor([[1] * n + [0] * (max(lengths) - n) for n in lengths])  # [batch, time]
    return inputs, mask


def test_batched_lstmn_agrees_with_the_literal_equations():
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    encoder, decoder = LSTMN(5, 4), LSTMN(5, 4, fusion=True)
    source, source_mask = _padded_batch([6, 3, 1], 5, generator)
    target, _ = _padded_batch([7, 7, 7], 5, generator)
    hidden, memory = encoder(source)
    decoded, decoded_memory = decoder(target, source=(hidden, memory, source_mask))
    for b, n in enumerate([6, 3, 1]):
        ref_hidden, ref_memory = lstmn_reference(encoder, source[b, :n])
        torch.testing.assert_close(hidden[b, :n], ref_hidden, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(memory[b, :n], ref_memory, rtol=1e-5, atol=1e-6)
        # the decoder attends over the real source steps only: padding of the source changes nothing
        ref_decoded, ref_decoded_memory = lstmn_reference(decoder, target[b], (ref_hidden, ref_memory))
        torch.testing.assert_close(decoded[b], ref_decoded, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(decoded_memory[b], ref_decoded_memory, rtol=1e-5, atol=1e-6)


def test_lstmn_gradients_agree_with_the_literal_equations():
    torch.manual_seed(1)
    layer = LSTMN(3, 4)
    inputs = torch.randn(1, 5, 3)
    layer(inputs)[0].sum().backward()
    batched = {name: p.grad.clone() for name, p in layer.named_parameters()}
    layer.zero_grad()
    lstmn_reference(layer, inputs[0])[0].sum().backward()
    for name, p in layer.named_parameters():
        torch.testing.assert_close(batched[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_lstmn_first_step_reads_an_empty_tape():
    """Eq. 6 sums over i < t: at t = 1 both summaries are zero, so h_1 is an LSTM step from a zero state."""
    torch.manual_seed(2)
    layer = LSTMN(3, 2)
    x = torch.randn(1, 1, 3)
    hidden, memory = layer(x)
    i, f, o, c = layer.gates(torch.cat([torch.zeros(2), x[0, 0]])).chunk(4)
    expected_memory = torch.sigmoid(i) * torch.tanh(c)
    torch.testing.assert_close(memory[0, 0], expected_memory)
    torch.testing.assert_close(hidden[0, 0], torch.sigmoid(o) * torch.tanh(expected_memory))


def test_distance_bias_buckets():
    buckets = distance_buckets(14, 10)
    assert buckets[0, 0] == 10 and buckets[3, 1] == 12 and buckets[1, 3] == 8
    assert buckets[12, 2] == 20 and buckets[2, 12] == 0  # |i - j| = 10: still its own bias
    assert buckets[13, 1] == buckets[1, 13] == buckets[13, 0] == 21  # beyond 10: one shared bias


@pytest.mark.parametrize("model_type,intra", [("da", False), ("da", True), ("lstmn", False), ("bilstm", False)])
def test_padding_changes_no_prediction(model_type, intra):
    torch.manual_seed(3)
    config = PairModelConfig(model_type, 30, embedding_dim=8, hidden_size=6, intra_attention=intra, max_distance=2)
    model = build_pair_model(config).eval()
    source, target = torch.randint(2, 30, (1, 5)), torch.randint(2, 30, (1, 4))
    alone = model(source, torch.ones_like(source), target, torch.ones_like(target)).logits
    padded_source = torch.cat([source, torch.zeros(1, 3, dtype=torch.long)], 1)
    padded_target = torch.cat([target, torch.zeros(1, 2, dtype=torch.long)], 1)
    mask_source = (padded_source > 0).long()
    mask_target = (padded_target > 0).long()
    padded = model(padded_source, mask_source, padded_target, mask_target).logits
    torch.testing.assert_close(alone, padded, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_type", ["da", "lstmn", "bilstm"])
def test_save_and_load_give_the_same_model(tmp_path, model_type):
    torch.manual_seed(4)
    config = PairModelConfig(model_type, 30, embedding_dim=8, hidden_size=6, dropout=0.0)
    model = build_pair_model(config).eval()
    vocabulary = Vocabulary.build([[f"w{i}" for i in range(28)]])
    PAIR_FOLDER.save_pretrained(str(tmp_path), model, vocabulary)
    twin, saved_config, saved_vocabulary, _ = PAIR_FOLDER.from_pretrained(str(tmp_path))
    assert saved_config == config and saved_vocabulary == vocabulary and not twin.training
    ids, mask = torch.randint(1, 30, (2, 4)), torch.ones(2, 4, dtype=torch.long)
    torch.testing.assert_close(model(ids, mask, ids, mask).logits, twin(ids, mask, ids, mask).logits)


@pytest.mark.slow
@pytest.mark.parametrize("model,extra", [("da", []), ("da", ["--intra_attention"]), ("lstmn", []), ("bilstm", [])])
def test_each_model_overfits_the_16_pairs(tmp_path, fresh_accelerate_state, model, extra):
    """Through the training core, as the CLI trains: 100 full-batch steps reach 100% on the training pairs (with
    Adam, for every model alike; the DA's own Adagrad recipe has the test below)."""
    main = load_cli("finetune/run_pronoun_pairs.py").main
    results = main(["--model", model, *extra, "--train_file", str(PAIRS16), "--validation_file", str(PAIRS16),
                    "--do_train", "--do_eval", "--output_dir", str(tmp_path / model), "--num_train_epochs", "100",
                    "--per_device_train_batch_size", "16", "--hidden_size", "32", "--embedding_dim", "16",
                    "--dropout", "0", "--learning_rate", "1e-2", "--lr_scheduler_type", "constant",
                    "--optim", "adamw_torch", "--intra_attention", "true" if extra else "false",
                    "--eval_steps", "1000", "--disable_tqdm", "true", "--seed", "0"])
    assert results["train_loss"] < 0.5
    assert results["eval_accuracy"] == 100.0
    assert results["eval_kappa"] == pytest.approx(1.0)
    assert (results["eval_tp"], results["eval_tn"], results["eval_fp"], results["eval_fn"]) == (6, 10, 0, 0)


@pytest.mark.slow
def test_the_decomposable_attention_learns_the_16_pairs_with_its_paper_recipe(tmp_path, fresh_accelerate_state):
    """The DA's default recipe (intra-attention, Adagrad at 0.05 with batch 4, dropout 0.2, constant
    rate), only smaller, fits the 16 pairs: the optimizer the paper's DA used can train it."""
    main = load_cli("finetune/run_pronoun_pairs.py").main
    results = main(["--model", "da", "--train_file", str(PAIRS16), "--validation_file", str(PAIRS16), "--do_train",
                    "--do_eval", "--output_dir", str(tmp_path / "da"), "--num_train_epochs", "120",
                    "--hidden_size", "32", "--embedding_dim", "16", "--eval_steps", "1000", "--disable_tqdm", "true",
                    "--seed", "0"])
    assert results["eval_accuracy"] == 100.0
