"""The C-GRU layer: batched scan == the paper's equations token by token; no links == a standard GRU;
gradients reach the coreferent branch."""

from __future__ import annotations

import pytest
import torch

from corefbert.tasks.babi.coref_gru import BiCorefGRU, CorefGRU, antecedent_indices, reference_coref_gru

# Two sequences, right-padded: clusters repeat (links), the second is shorter.
CLUSTERS = [[0, 1, 2, 0, 1, 0, 2, 1], [3, 0, 3, 1, 0, 0, 0, 0]]
LENGTHS = [8, 5]


def _batch(input_size=6, seed=0):
    torch.manual_seed(seed)
    inputs = torch.randn(2, 8, input_size)
    mask = torch.tensor([[t < n for t in range(8)] for n in LENGTHS])
    clusters = torch.tensor(CLUSTERS) * mask
    return inputs, mask, clusters


def test_antecedents_are_the_latest_earlier_mention():
    assert antecedent_indices([0, 1, 2, 0, 1, 0, 2, 1]) == [None, None, None, None, 1, None, 2, 4]


@pytest.mark.parametrize("memory", ["split", "full"])
@pytest.mark.parametrize("reverse", [False, True])
def test_batched_scan_equals_literal_equations(memory, reverse):
    inputs, mask, clusters = _batch()
    layer = CorefGRU(6, 10, memory=memory, reverse=reverse)
    outputs, alpha = layer(inputs, mask, clusters)
    for b, length in enumerate(LENGTHS):
        expected = reference_coref_gru(layer, inputs[b, :length], clusters[b, :length].tolist())
        torch.testing.assert_close(outputs[b, :length], expected, rtol=1e-5, atol=1e-6)
    # α = 1 exactly where there is no antecedent, < 1 where a link exists (descendant links when reversed)
    links = antecedent_indices(CLUSTERS[0][::-1])[::-1] if reverse else antecedent_indices(CLUSTERS[0])
    for t, y_t in enumerate(links):
        assert (alpha[0, t].item() == 1.0) == (y_t is None)


def test_no_links_full_memory_equals_torch_gru():
    inputs, mask, _ = _batch()
    layer = CorefGRU(6, 10, memory="full")
    gru = torch.nn.GRU(6, 10, batch_first=True)
    with torch.no_grad():
        w_r, w_z, w_h = layer.input_proj.weight.split(10)
        b_r, b_z, b_h = layer.input_proj.bias.split(10)
        u_r, u_z, u_h = layer.recurrent_proj.weight.split(10)
        # torch's h' = (1 - z') n + z' h is the paper's h = (1 - z) m + z h̃ with z' = 1 - z: negate z's weights
        gru.weight_ih_l0.copy_(torch.cat([w_r, -w_z, w_h]))
        gru.bias_ih_l0.copy_(torch.cat([b_r, -b_z, b_h]))
        gru.weight_hh_l0.copy_(torch.cat([u_r, -u_z, u_h]))
        gru.bias_hh_l0.zero_()
    outputs, alpha = layer(inputs, mask, torch.zeros_like(mask, dtype=torch.long))
    expected, _ = gru(inputs)
    torch.testing.assert_close(outputs[0], expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outputs[1, :5], expected[1, :5], rtol=1e-5, atol=1e-6)
    assert torch.all(alpha[mask] == 1.0)


def test_no_links_split_memory_is_a_gru_cell_on_the_sequential_half():
    """The paper's layer without links: a GRU cell whose previous state is φ_s(h_{t−1}) ‖ 0."""
    inputs, mask, _ = _batch()
    layer = CorefGRU(6, 10, memory="split")
    outputs, _ = layer(inputs, mask, torch.zeros_like(mask, dtype=torch.long))
    cell = torch.nn.GRUCell(6, 10)
    with torch.no_grad():
        w_r, w_z, w_h = layer.input_proj.weight.split(10)
        b_r, b_z, b_h = layer.input_proj.bias.split(10)
        u_r, u_z, u_h = layer.recurrent_proj.weight.split(10)
        cell.weight_ih.copy_(torch.cat([w_r, -w_z, w_h]))
        cell.bias_ih.copy_(torch.cat([b_r, -b_z, b_h]))
        cell.weight_hh.copy_(torch.cat([u_r, -u_z, u_h]))
        cell.bias_hh.zero_()
    state = torch.zeros(1, 10)
    for t in range(8):
        state = cell(inputs[0, t:t + 1], torch.cat([state[:, :5], torch.zeros(1, 5)], dim=-1))
        torch.testing.assert_close(outputs[0, t], state[0], rtol=1e-5, atol=1e-6)


def test_gradients_flow_through_the_coreferent_branch():
    inputs, mask, clusters = _batch()
    inputs.requires_grad_(True)
    layer = CorefGRU(6, 10)
    outputs, _ = layer(inputs, mask, clusters)
    # Sequence 0: token 7 links back to token 4 (cluster 1). Through the coreference edge, h_7 depends on the
    # keys (α_7) and on x_4 by a path that the sequential edge alone would also give; the keys are the
    # coreference-only parameter: their gradient is zero without links and non-zero with them.
    outputs[0, 7].sum().backward()
    assert layer.keys.grad is not None and layer.keys.grad.abs().sum() > 0
    layer.zero_grad()
    no_links, _ = layer(inputs, mask, torch.zeros_like(clusters))
    no_links[0, 7].sum().backward()
    assert layer.keys.grad is None or layer.keys.grad.abs().sum() == 0
    # x_4 (the antecedent of token 7) reaches h_7 through the coreference edge too: its gradient changes
    linked = torch.autograd.grad(layer(inputs, mask, clusters)[0][0, 7].sum(), inputs)[0][0, 4]
    plain = torch.autograd.grad(layer(inputs, mask, torch.zeros_like(clusters))[0][0, 7].sum(), inputs)[0][0, 4]
    assert not torch.allclose(linked, plain)


def test_bidirectional_shapes_and_padding():
    inputs, mask, clusters = _batch()
    layer = BiCorefGRU(6, 8)
    out = layer(inputs, mask, clusters)
    assert out.shape == (2, 8, 16)
    # the backward half of sequence 1 ignores its padding: equal to running the unpadded sequence alone
    alone = layer(inputs[1:, :5], mask[1:, :5], clusters[1:, :5])
    torch.testing.assert_close(out[1, :5], alone[0], rtol=1e-5, atol=1e-6)
