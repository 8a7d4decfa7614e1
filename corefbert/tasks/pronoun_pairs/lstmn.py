"""The Long Short-Term Memory-Network (Cheng, Dong and Lapata, EMNLP 2016, "Long Short-Term Memory-Networks
for Machine Reading"): an LSTM whose single memory cell is replaced by a memory tape it attends over.

:class:`LSTMN` runs a whole batch, one time step at a time (the recurrence allows nothing else), with every
projection that does not depend on the step computed once: ``W_x x_t`` for all ``t`` before the scan, and
``W_h h_i`` once when ``h_i`` is written to the tape (a "key tape"). :func:`lstmn_reference` is the literal
reading of the equations for one example, term by term, that the tests hold the batched one to.

With ``fusion=True`` the layer is the decoder of the paper's section 3.3 "deep fusion": it also attends over
the tapes of an already read source sequence (inter-attention) and gates the attended source memory into its
own memory cell (eq. 13-14).
"""

from __future__ import annotations

import torch
from torch import nn


class LSTMN(nn.Module):
    """One LSTMN layer (``fusion=False``: eq. 4-9) or a deep-fusion decoder layer (``fusion=True``: eq. 4-15).

    Tapes of a step ``t`` hold the steps ``1..t-1``; at ``t = 1`` the tape is empty and the attended summaries
    ``h̃_1``, ``c̃_1`` are zero vectors (the sum of eq. 6 over no term). ``h̃_0`` (and ``γ̃_0``) are zero.
    """

    def __init__(self, input_size: int, hidden_size: int, fusion: bool = False):
        super().__init__()
        self.input_size, self.hidden_size, self.fusion = input_size, hidden_size, fusion
        # eq. 4: a_i^t = v^T tanh(W_h h_i + W_x x_t + W_h̃ h̃_{t-1})  (the paper writes no bias)
        self.attend_h = nn.Linear(hidden_size, hidden_size, bias=False)
        self.attend_x = nn.Linear(input_size, hidden_size, bias=False)
        self.attend_summary = nn.Linear(hidden_size, hidden_size, bias=False)
        self.attend_v = nn.Linear(hidden_size, 1, bias=False)
        # eq. 7: [i_t; f_t; o_t; ĉ_t] = [σ; σ; σ; tanh] W · [h̃_t, x_t]
        self.gates = nn.Linear(hidden_size + input_size, 4 * hidden_size)
        if fusion:
            # eq. 10: b_j^t = u^T tanh(W_γ γ_j + W_x x_t + W_γ̃ γ̃_{t-1})
            self.inter_gamma = nn.Linear(hidden_size, hidden_size, bias=False)
            self.inter_x = nn.Linear(input_size, hidden_size, bias=False)
            self.inter_summary = nn.Linear(hidden_size, hidden_size, bias=False)
            self.inter_u = nn.Linear(hidden_size, 1, bias=False)
            # eq. 13: r_t = σ(W_r · [γ̃_t, x_t])
            self.source_gate = nn.Linear(hidden_size + input_size, hidden_size)

    def forward(self, inputs: torch.Tensor, source: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs`` ``[batch, time, input]`` (right-padded: a step never sees a later one, so padding changes
        no real step); ``source`` = (hidden tape γ ``[batch, src, hidden]``, memory tape α ``[batch, src,
        hidden]``, mask ``[batch, src]`` with 1 on real steps), required when ``fusion``.
        Returns the hidden and memory tapes ``[batch, time, hidden]`` each."""
        batch, steps, _ = inputs.shape
        zeros = inputs.new_zeros(batch, self.hidden_size)  # [batch, hidden]
        x_keys = self.attend_x(inputs)  # [batch, time, hidden]: W_x x_t for every t at once
        if source is not None:
            gamma, alpha, source_mask = source
            gamma_keys = self.inter_gamma(gamma)  # [batch, src, hidden]: W_γ γ_j, fixed over the whole scan
            x_inter = self.inter_x(inputs)  # [batch, time, hidden]
            source_blocked = source_mask == 0  # [batch, src]
            gamma_summary = zeros
        hidden_tape, memory_tape, key_tape = [], [], []
        for t in range(steps):
            x_t = inputs[:, t]  # [batch, input]
            if t == 0:
                summary, memory_summary = zeros, zeros  # over the empty tape (eq. 6 over no term)
            else:
                keys = torch.stack(key_tape, 1)  # [batch, t, hidden]: W_h h_i, i < t
                scores = self.attend_v(torch.tanh(
                    keys + (x_keys[:, t] + self.attend_summary(summary))[:, None])).squeeze(-1)  # [batch, t]
                weights = scores.softmax(-1)[:, None]  # [batch, 1, t]  (eq. 5)
                summary = (weights @ torch.stack(hidden_tape, 1)).squeeze(1)  # [batch, hidden]  (eq. 6)
                memory_summary = (weights @ torch.stack(memory_tape, 1)).squeeze(1)  # [batch, hidden]
            gate_i, gate_f, gate_o, candidate = self.gates(torch.cat([summary, x_t], -1)).chunk(4, -1)
            memory = gate_f.sigmoid() * memory_summary + gate_i.sigmoid() * candidate.tanh()  # eq. 8
            if source is not None:
                scores = self.inter_u(torch.tanh(
                    gamma_keys + (x_inter[:, t] + self.inter_summary(gamma_summary))[:, None])).squeeze(-1)
                weights = scores.masked_fill(source_blocked, float("-inf")).softmax(-1)[:, None]  # [batch, 1, src]
                gamma_summary = (weights @ gamma).squeeze(1)  # γ̃_t [batch, hidden]  (eq. 12)
                alpha_summary = (weights @ alpha).squeeze(1)  # α̃_t [batch, hidden]
                gate_r = self.source_gate(torch.cat([gamma_summary, x_t], -1)).sigmoid()  # eq. 13
                memory = gate_r * alpha_summary + memory  # eq. 14
            hidden = gate_o.sigmoid() * memory.tanh()  # eq. 9 / 15
            hidden_tape.append(hidden)
            memory_tape.append(memory)
            key_tape.append(self.attend_h(hidden))
        return torch.stack(hidden_tape, 1), torch.stack(memory_tape, 1)


def _softmax(scores: list[torch.Tensor]) -> list[torch.Tensor]:
    """softmax over a list of scalars, written out: exp(a_i) / Σ_k exp(a_k) (shifted by the max for range)."""
    top = max(float(s.detach()) for s in scores)
    exps = [torch.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def lstmn_reference(layer: LSTMN, inputs: torch.Tensor,
                    source: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The equations of the paper for ONE unpadded example, one term at a time: ``inputs`` ``[time, input]``,
    ``source`` = (γ ``[src, hidden]``, α ``[src, hidden]``). Returns the hidden and memory tapes
    ``[time, hidden]``. Slow on purpose: it recomputes every attention term from the tapes at every step."""
    hidden_tape: list[torch.Tensor] = []
    memory_tape: list[torch.Tensor] = []
    summary = inputs.new_zeros(layer.hidden_size)  # h̃_0
    gamma_summary = inputs.new_zeros(layer.hidden_size)  # γ̃_0
    for x_t in inputs:
        if not hidden_tape:
            summary = memory_summary = inputs.new_zeros(layer.hidden_size)  # eq. 6 over an empty tape
        else:
            # eq. 4 for every i < t, then eq. 5 and eq. 6
            scores = [layer.attend_v(torch.tanh(layer.attend_h(h_i) + layer.attend_x(x_t)
                                                + layer.attend_summary(summary)))[0] for h_i in hidden_tape]
            weights = _softmax(scores)
            summary = sum(s * h_i for s, h_i in zip(weights, hidden_tape))
            memory_summary = sum(s * c_i for s, c_i in zip(weights, memory_tape))
        gates = layer.gates(torch.cat([summary, x_t]))
        size = layer.hidden_size
        gate_i, gate_f = torch.sigmoid(gates[:size]), torch.sigmoid(gates[size:2 * size])
        gate_o, candidate = torch.sigmoid(gates[2 * size:3 * size]), torch.tanh(gates[3 * size:])
        memory = gate_f * memory_summary + gate_i * candidate  # eq. 8
        if source is not None:
            gamma, alpha = source
            # eq. 10 for every source step j, eq. 11, eq. 12
            scores = [layer.inter_u(torch.tanh(layer.inter_gamma(g_j) + layer.inter_x(x_t)
                                               + layer.inter_summary(gamma_summary)))[0] for g_j in gamma]
            weights = _softmax(scores)
            gamma_summary = sum(p * g_j for p, g_j in zip(weights, gamma))
            alpha_summary = sum(p * a_j for p, a_j in zip(weights, alpha))
            gate_r = torch.sigmoid(layer.source_gate(torch.cat([gamma_summary, x_t])))  # eq. 13
            memory = gate_r * alpha_summary + gate_f * memory_summary + gate_i * candidate  # eq. 14
        hidden = gate_o * torch.tanh(memory)  # eq. 9 / 15
        hidden_tape.append(hidden)
        memory_tape.append(memory)
    return torch.stack(hidden_tape), torch.stack(memory_tape)
