"""Coref-GRU (C-GRU): a GRU whose previous state mixes the previous token's state with the state of the
token's most recent coreferent mention (Dhingra, Jin, Yang, Cohen, Salakhutdinov, NAACL 2018, appendix).

The paper's equations, for token t with input x_t and coreference antecedent index y_t (0: none):

    m_t = α_t · φ_s(h_{t−1}) ‖ (1 − α_t) · φ_c(h_{y_t})
    α_t = exp(x_tᵀ k_1) / (exp(x_tᵀ k_1) + exp(x_tᵀ k_2)),   α_t = 1 where y_t = 0
    r_t = σ(W_r x_t + U_r m_t + b_r)
    z_t = σ(W_z x_t + U_z m_t + b_z)
    h̃_t = tanh(W_h x_t + r_t ⊙ (U_h m_t) + b_h)
    h_t = (1 − z_t) ⊙ m_t + z_t ⊙ h̃_t

φ_s and φ_c take the first and the second half of the hidden state (``memory="split"``, the paper's layer and
its official code): the sequential edge carries the first half, the coreference edge the second, so even
without links the second half never recurs and the layer is *not* a plain GRU over its whole state.
``memory="full"`` (beyond the paper) uses φ_s = φ_c = identity, the convex mix m_t = α_t h_{t−1} + (1 − α_t)
h_{y_t}: with no links exactly a standard GRU. The reset gate multiplies ``U_h m_t`` (as the official code and
cuDNN/PyTorch do), not ``m_t`` before U_h.

Batched form (:class:`CorefGRU`): each token carries a cluster id (0: none) instead of y_t, and a memory of
the latest state per cluster replaces the look-up h_{y_t}: one scan over time, batched over sequences and
clusters. Cost: O(T · B · (H² + H·D)) for the gates plus O(T · B · C · H) for the out-of-place memory writes,
memory O(B · C · H) on top of the O(T · B · H) outputs (T tokens, B sequences, C clusters, D input, H hidden).
The backward direction runs the same scan on the time-reversed sequence (descendant links).
:func:`reference_coref_gru` is the literal per-token version with explicit y_t, which the batched one is
tested against.
"""

from __future__ import annotations

import torch
from torch import nn

MEMORY_KINDS = ("split", "full")


class CorefGRU(nn.Module):
    """One direction of the C-GRU layer (equations and cost: the module docstring): input size D, hidden
    size H (even for ``memory="split"``); ``reverse`` runs right to left (antecedents become descendants)."""

    def __init__(self, input_size: int, hidden_size: int, memory: str = "split", reverse: bool = False):
        super().__init__()
        if memory not in MEMORY_KINDS:
            raise ValueError(f"memory must be one of {MEMORY_KINDS}, not {memory!r}")
        if memory == "split" and hidden_size % 2:
            raise ValueError("memory='split' needs an even hidden_size (two halves)")
        self.input_size, self.hidden_size, self.memory, self.reverse = input_size, hidden_size, memory, reverse
        self.input_proj = nn.Linear(input_size, 3 * hidden_size)  # [W_r; W_z; W_h], biases b_r, b_z, b_h
        self.recurrent_proj = nn.Linear(hidden_size, 3 * hidden_size, bias=False)  # [U_r; U_z; U_h]
        self.keys = nn.Parameter(torch.randn(2, input_size) * 0.1)  # k_1 (sequential), k_2 (coreferent)

    def sequential_weight(self, inputs: torch.Tensor) -> torch.Tensor:
        """α_t before the no-antecedent rule: softmax over the two keys, ``[..., D] -> [...]``."""
        return torch.softmax(inputs @ self.keys.t(), dim=-1)[..., 0]

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor, clusters: torch.Tensor) -> tuple[torch.Tensor,
                                                                                                  torch.Tensor]:
        """``inputs [B, T, D]`` right-padded, ``mask [B, T]`` bool (False: padding), ``clusters [B, T]`` (0:
        none, 1..C a cluster id) -> ``(outputs [B, T, H], alpha [B, T])``, zero at padded positions."""
        outputs, alpha = coref_scan([self], inputs, mask, clusters)
        return outputs[0], alpha[0]


class BiCorefGRU(nn.Module):
    """Bidirectional C-GRU: forward along antecedent links, backward along descendant links, outputs
    concatenated ``[B, T, 2H]``; both directions in one scan (half the per-token Python overhead of two)."""

    def __init__(self, input_size: int, hidden_size: int, memory: str = "split"):
        super().__init__()
        self.forward_layer = CorefGRU(input_size, hidden_size, memory)
        self.backward_layer = CorefGRU(input_size, hidden_size, memory, reverse=True)

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor, clusters: torch.Tensor) -> torch.Tensor:
        outputs, _ = coref_scan([self.forward_layer, self.backward_layer], inputs, mask, clusters)  # [2, B, T, H]
        return torch.cat([outputs[0], outputs[1]], dim=-1)


def reverse_padded(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row of ``values [B, T, ...]`` within its length, padding staying at the end (an involution)."""
    steps = values.size(1)
    positions = torch.arange(steps, device=values.device).unsqueeze(0)  # [1, T]
    index = torch.where(positions < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - positions, positions)  # [B, T]
    index = index.view(*index.shape, *([1] * (values.dim() - 2))).expand_as(values)
    return values.gather(1, index)


def has_antecedent(clusters: torch.Tensor) -> torch.Tensor:
    """``[N, T]`` bool: y_t != 0, i.e. an earlier token of the same (non-zero) cluster exists."""
    one_hot = torch.nn.functional.one_hot(clusters, int(clusters.max()) + 1 if clusters.numel() else 1)  # [N, T, C+1]
    earlier = one_hot.cumsum(1) - one_hot  # [N, T, C+1]: mentions of each cluster before t
    return (earlier.gather(2, clusters.unsqueeze(-1)).squeeze(-1) > 0) & (clusters > 0)


def coref_scan(layers: list[CorefGRU], inputs: torch.Tensor, mask: torch.Tensor,
               clusters: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One time loop for ``len(layers)`` = L directions (same sizes): ``[L, B, T, H]`` outputs and ``[L, B, T]`` α.

    What does not depend on the state is computed before the loop: the input half of the gates, α_t, the
    mixing coefficients and the memory-write slots. A reverse layer reads its rows reversed within their
    lengths, so padding is always at the end: padded steps write no memory and their outputs are zeroed. The
    step is 10 operations, since on a CPU each one's fixed dispatch (and autograd node) outweighs its
    arithmetic at bAbI's sizes (docs/guides/babi.md, Speed): m_t = s_t ⊙ h_{t−1} + c_t ⊙ M[y_t] with
    precomputed coefficients (``split``: s_t = α_t on the first half and 0 on the second, c_t = 0 and 1 − α_t,
    the φ_s ‖ φ_c concatenation; ``full``: α_t and 1 − α_t everywhere), r and z from one ``baddbmm``, h̃ from
    one ``addcmul``, h_t as one ``lerp``.
    """
    hidden, memory_kind = layers[0].hidden_size, layers[0].memory
    num_layers = len(layers)
    lengths = mask.sum(1)
    batch, steps, _ = inputs.shape
    num_slots = int(clusters.max()) + 1 if clusters.numel() else 1
    ordered = [(reverse_padded(inputs, lengths), reverse_padded(clusters, lengths)) if layer.reverse
               else (inputs, clusters) for layer in layers]
    x = torch.stack([layer.input_proj(xs) for layer, (xs, _) in zip(layers, ordered)])  # [L, B, T, 3H]
    cl = torch.stack([cs for _, cs in ordered])  # [L, B, T]
    keys = torch.stack([layer.sequential_weight(xs) for layer, (xs, _) in zip(layers, ordered)])  # [L, B, T]
    linked = has_antecedent(cl.flatten(0, 1)).view_as(cl)  # [L, B, T]
    alpha = torch.where(linked, keys, torch.ones_like(keys))  # [L, B, T]: α_t = 1 where y_t = 0
    a = alpha.transpose(1, 2).unsqueeze(-1)  # [L, T, B, 1]
    if memory_kind == "split":  # φ_s = first half of h_{t−1}, φ_c = second half of h_{y_t}
        first_half = torch.arange(hidden, device=inputs.device) < hidden // 2  # [H]
        seq_coef = torch.where(first_half, a, 0.0)  # [L, T, B, H]
        coref_coef = torch.where(first_half, 0.0, 1 - a)  # [L, T, B, H]
    else:
        seq_coef, coref_coef = a.expand(-1, -1, -1, hidden), (1 - a).expand(-1, -1, -1, hidden)
    recurrent = torch.stack([layer.recurrent_proj.weight.t() for layer in layers])  # [L, H, 3H]
    recurrent_rz, recurrent_h = recurrent[..., : 2 * hidden], recurrent[..., 2 * hidden:]  # [L, H, 2H], [L, H, H]
    n = num_layers * batch
    flat_cl = cl.reshape(n, steps)  # [N, T]
    # slot 0 (no cluster) is read, never written, so it stays zero; a token outside every cluster (or padding)
    # writes to the extra slot C+1, which is never read: every row writes each step, one index_put
    write_slot = torch.where((flat_cl > 0) & mask.repeat(num_layers, 1), flat_cl, num_slots)  # [N, T]
    rows = torch.arange(n, device=inputs.device)
    state = inputs.new_zeros(num_layers, batch, hidden)  # [L, B, H]
    memory = inputs.new_zeros(n, num_slots + 1, hidden)  # [N, C+2, H]: the latest state of each cluster
    outputs = []
    # unbind once: indexing x[:, :, t] in the loop would make its backward allocate a full [L, B, T, 3H]
    # gradient per step (O(T²) time)
    x_rz_steps, x_h_steps = x[..., : 2 * hidden].unbind(2), x[..., 2 * hidden:].unbind(2)  # T x [L, B, 2H], [L, B, H]
    seq_steps, coref_steps = seq_coef.unbind(1), coref_coef.unbind(1)  # T x [L, B, H]
    write_steps, cluster_steps = write_slot.unbind(1), flat_cl.unbind(1)  # T x [N], [N]
    for t in range(steps):
        coref = memory[rows, cluster_steps[t]].view(num_layers, batch, hidden)  # h_{y_t} (zeros when y_t = 0)
        mixed = torch.addcmul(state * seq_steps[t], coref, coref_steps[t])  # m_t [L, B, H]
        gates = torch.sigmoid(torch.baddbmm(x_rz_steps[t], mixed, recurrent_rz))  # [r_t ‖ z_t] [L, B, 2H]
        candidate = torch.tanh(torch.addcmul(x_h_steps[t], gates[..., :hidden], torch.bmm(mixed, recurrent_h)))
        state = torch.lerp(mixed, candidate, gates[..., hidden:])  # (1 − z_t) ⊙ m_t + z_t ⊙ h̃_t
        # out of place: the read above keeps the old memory for its backward; a copy of N x (C+2) x H floats
        # costs less than a masked select over it (torch.where was a third of the step)
        memory = memory.index_put((rows, write_steps[t]), state.reshape(n, hidden))
        outputs.append(state)
    out = torch.stack(outputs, dim=2) if outputs else inputs.new_zeros(num_layers, batch, 0, hidden)  # [L, B, T, H]
    out = out * mask.unsqueeze(-1)
    reverse = [layer.reverse for layer in layers]  # those rows back in the input's order
    out = torch.stack([reverse_padded(o, lengths) if r else o for r, o in zip(reverse, out)])
    alpha = torch.stack([reverse_padded(a, lengths) if r else a for r, a in zip(reverse, alpha)])
    return out, alpha * mask


def antecedent_indices(clusters: list[int]) -> list[int | None]:
    """y_t for one sequence, literally: the last earlier position in the same cluster (None for y_t = 0)."""
    result: list[int | None] = []
    for t, cluster in enumerate(clusters):
        earlier = [s for s in range(t) if cluster > 0 and clusters[s] == cluster]
        result.append(earlier[-1] if earlier else None)
    return result


def reference_coref_gru(layer: CorefGRU, inputs: torch.Tensor, clusters: list[int]) -> torch.Tensor:
    """The paper's equations token by token for ONE unpadded sequence ``inputs [T, D]`` with explicit
    antecedents h_{y_t}; returns ``[T, H]`` (in the input's order, also for a reverse layer)."""
    if layer.reverse:
        return reference_coref_gru(_forward_twin(layer), inputs.flip(0), clusters[::-1]).flip(0)
    hidden, half = layer.hidden_size, layer.hidden_size // 2
    w_r, w_z, w_h = layer.input_proj.weight.split(hidden)  # each [H, D]
    b_r, b_z, b_h = layer.input_proj.bias.split(hidden)
    u_r, u_z, u_h = layer.recurrent_proj.weight.split(hidden)  # each [H, H]
    k_1, k_2 = layer.keys[0], layer.keys[1]
    states: list[torch.Tensor] = []
    previous = inputs.new_zeros(hidden)
    for t, y_t in enumerate(antecedent_indices(clusters)):
        x_t = inputs[t]
        if y_t is None:
            alpha = torch.tensor(1.0)
            coref = inputs.new_zeros(half if layer.memory == "split" else hidden)
        else:
            alpha = torch.exp(x_t @ k_1) / (torch.exp(x_t @ k_1) + torch.exp(x_t @ k_2))
            coref = states[y_t][half:] if layer.memory == "split" else states[y_t]
        if layer.memory == "split":
            m_t = torch.cat([alpha * previous[:half], (1 - alpha) * coref])
        else:
            m_t = alpha * previous + (1 - alpha) * coref
        r_t = torch.sigmoid(w_r @ x_t + u_r @ m_t + b_r)
        z_t = torch.sigmoid(w_z @ x_t + u_z @ m_t + b_z)
        candidate = torch.tanh(w_h @ x_t + r_t * (u_h @ m_t) + b_h)
        previous = (1 - z_t) * m_t + z_t * candidate
        states.append(previous)
    return torch.stack(states) if states else inputs.new_zeros(0, hidden)


def _forward_twin(layer: CorefGRU) -> CorefGRU:
    """A forward layer sharing ``layer``'s parameters (the reference runs a reverse layer on flipped input)."""
    twin = CorefGRU(layer.input_size, layer.hidden_size, layer.memory)
    twin.input_proj, twin.recurrent_proj, twin.keys = layer.input_proj, layer.recurrent_proj, layer.keys
    return twin
