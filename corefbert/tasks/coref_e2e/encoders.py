"""Word encoders of the end-to-end coreference model: per-sentence BiLSTM, LSL, ASL, and a transformer.

Each encoder maps one document to ``(context, head_inputs)``: ``context`` are the contextual word vectors
x*_t of Lee et al. (2017) (span endpoints, the head attention's scores), ``head_inputs`` the vectors x_t the
head attention averages (the word representations for the LSTMs, the hidden states themselves for BERT).

The recurrent encoders follow Luo & Glass (2018), "Learning word representations with cross-sentence
dependency for end-to-end co-reference resolution" (docs/guides/coref_e2e.md, "Paper ↔ code"): the baseline
BiLSTM (Lee et al. 2017), LSL (:class:`LinearSentenceLinking`) and ASL (:class:`ASLDirection`; ``--asl_variant
static``: :class:`StaticAttentionalSentenceLinking`). Each has a literal per-step reference the tests compare
against: :func:`asl_reference` here (the benchmark times it too), LSL's and the static ASL's in
``tests/references.py``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from corefbert.training.memory import CHUNK_ELEMENTS, map_row_chunks

RECURRENT_ENCODERS = ("bilstm", "lsl", "asl")
TRANSFORMER_ENCODERS = ("bert",)
ENCODERS = RECURRENT_ENCODERS + TRANSFORMER_ENCODERS


class WordRepresentation(nn.Module):
    """Word embeddings (learned, or fixed GloVe vectors) concatenated with a character CNN (Lee et al. 2017:
    8-dimensional characters, windows 3, 4, 5 with 50 filters each), with lexical dropout 0.5."""

    def __init__(self, vocab_size: int, embedding_dim: int, num_chars: int, char_dim: int = 8,
                 char_widths: tuple[int, ...] = (3, 4, 5), char_filters: int = 50, dropout: float = 0.5,
                 pretrained: torch.Tensor | None = None):
        super().__init__()
        self.words = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        if pretrained is not None:  # kept fixed by build_model (config.fixed_embeddings)
            self.words.weight.data.copy_(pretrained)
        self.chars = nn.Embedding(num_chars, char_dim, padding_idx=0) if char_filters else None
        self.convs = nn.ModuleList(nn.Conv1d(char_dim, char_filters, w, padding=w - 1) for w in char_widths)
        self.dropout = nn.Dropout(dropout)
        self.output_dim = embedding_dim + (len(char_widths) * char_filters if char_filters else 0)

    def forward(self, word_ids: torch.Tensor, char_ids: torch.Tensor) -> torch.Tensor:
        """``word_ids`` [sentences, len], ``char_ids`` [sentences, len, chars] -> [sentences, len, dim]."""
        vectors = [self.words(word_ids)]
        if self.chars is not None:
            s, t, c = char_ids.shape
            chars = self.chars(char_ids.view(s * t, c)).transpose(1, 2)  # [words, char_dim, chars]
            pooled = [conv(chars).relu().max(dim=2).values for conv in self.convs]  # each [words, filters]
            vectors.append(torch.cat(pooled, dim=1).view(s, t, -1))
        return self.dropout(torch.cat(vectors, dim=-1))


def run_lstm(lstm: nn.LSTM, inputs: torch.Tensor, lengths: torch.Tensor, state=None) -> torch.Tensor:
    """``lstm`` over padded sentences ``inputs`` [sentences, len, dim] of ``lengths`` [sentences]."""
    packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, _ = lstm(packed, state)
    return pad_packed_sequence(out, batch_first=True, total_length=inputs.shape[1])[0]


def previous_sentence(values: torch.Tensor) -> torch.Tensor:
    """``values`` [sentences, ...] shifted by one sentence: row i holds row i-1, row 0 zeros."""
    return torch.cat([torch.zeros_like(values[:1]), values[:-1]], dim=0)


class SentenceBiLSTM(nn.Module):
    """The baseline: one BiLSTM (200 units each way) over every sentence on its own (Lee et al. 2017)."""

    def __init__(self, input_dim: int, hidden: int = 200, dropout: float = 0.2):
        super().__init__()
        self.lstm = nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True)
        self.dropout, self.output_dim = nn.Dropout(dropout), 2 * hidden

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``words`` [sentences, len, dim] -> [sentences, len, 2 * hidden]."""
        return self.dropout(run_lstm(self.lstm, words, lengths))


class LinearSentenceLinking(nn.Module):
    """LSL: a 2-layer BiLSTM whose layer 2 of sentence i starts from layer 1's final forward and backward
    outputs of sentence i-1 (zeros for the first sentence; the cell states start at zero: the paper links the
    *outputs*). Both layers run on all sentences at once: layer 2's initial states depend on layer 1 only."""

    def __init__(self, input_dim: int, hidden: int = 200, dropout: float = 0.2):
        super().__init__()
        self.layer1 = nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True)
        self.layer2 = nn.LSTM(2 * hidden, hidden, batch_first=True, bidirectional=True)
        self.hidden, self.dropout, self.output_dim = hidden, nn.Dropout(dropout), 2 * hidden

    def initial_states(self, first: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer 2's (h0, c0), each [2 directions, sentences, hidden], from layer 1's outputs ``first``: its
        final forward output (at the last word) and final backward output (at the first word)."""
        rows, h = torch.arange(first.shape[0], device=first.device), self.hidden
        forward_final, backward_final = first[rows, lengths - 1, :h], first[:, 0, h:]  # each [sentences, h]
        h0 = torch.stack([previous_sentence(forward_final), previous_sentence(backward_final)])
        return h0, torch.zeros_like(h0)

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        first = run_lstm(self.layer1, words, lengths)  # [sentences, len, 2 * hidden]
        state = self.initial_states(first, lengths)  # the outputs themselves: dropout is only between layers
        return self.dropout(run_lstm(self.layer2, self.dropout(first), lengths, state))


class ASLDirection(nn.Module):
    """One direction of ASL (Luo & Glass 2018, section 3.2.2): an LSTM whose input at word t of sentence i is
    gated between x_{i,t} and an attention summary of the previous sentence's words, both read with the
    LSTM's previous hidden state h_{t-1}, so attention and gate sit inside the recurrence:

        (2) c_k = f_c([x_{i,t}; h_{t-1}; x_{i-1,k}])     f_c: one hidden layer of ``attention_hidden`` (150) tanh
                                                          units, then a linear score
        (1) α_j = exp(c_j) / Σ_k exp(c_k)
        (3) v   = Σ_j α_j x_{i-1,j}
        (4) g_t = σ(f_g([x_{i,t}; h_{t-1}; v]))          f_g: linear, one gate per input dimension
        (5) x̂_t = g_t ⊙ x_{i,t} + (1 − g_t) ⊙ v
        (6) h_t, c_t = f_lstm(x̂_t, h_{t-1}, c_{t-1})     ``hidden`` (200) units, zero initial state

    The first sentence of a document (or crop) has no previous one: x̂_t = x_{i,t}. The backward direction reads
    the words last to first, so its h_{t-1} is the state after word t+1.

    Batched over sentences: every sentence attends to its own previous sentence's word vectors (inputs, not
    states), so only the loop over t remains. f_c's hidden layer is linear in the concatenation, W [x; h; p] =
    W_x x + W_h h + W_p p, so the x and p parts are computed for every word once, outside the loop; f_g is
    split the same way. :func:`asl_direction_reference` is the literal version the tests pin this to.
    """

    def __init__(self, input_dim: int, hidden: int, attention_hidden: int, reverse: bool):
        super().__init__()
        self.input_dim, self.hidden, self.reverse = input_dim, hidden, reverse
        concat = 2 * input_dim + hidden  # [x_{i,t}; h_{t-1}; x_{i-1,k}] and [x_{i,t}; h_{t-1}; v]
        self.score_hidden = nn.Linear(concat, attention_hidden)  # f_c's hidden layer
        self.score_out = nn.Linear(attention_hidden, 1, bias=False)  # f_c's output (a bias cancels in eq. 1)
        self.gate = nn.Linear(concat, input_dim)  # f_g
        self.cell = nn.LSTMCell(input_dim, hidden)  # f_lstm, section 3.2.1

    def _split(self, layer: nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``layer``'s weight as its parts on x_{i,t}, h_{t-1} and the third block: [out, D], [out, H], [out, D]."""
        d, h = self.input_dim, self.hidden
        return layer.weight[:, :d], layer.weight[:, d:d + h], layer.weight[:, d + h:]

    def forward(self, words: torch.Tensor, lengths: torch.Tensor, previous: torch.Tensor,
                previous_lengths: torch.Tensor) -> torch.Tensor:
        """``words`` [S, T, D] of ``lengths`` [S]; ``previous`` [S, T, D] row i = sentence i-1 (zeros, length 0
        for a first sentence) -> outputs [S, T, hidden], zero past each sentence's end."""
        s, t_max, _ = words.shape
        score_x, score_h, score_p = self._split(self.score_hidden)
        gate_x, gate_h, gate_v = self._split(self.gate)
        word_scores = words @ score_x.T + self.score_hidden.bias  # [S, T, A]: W_x x_{i,t} + b, every word once
        previous_scores = previous @ score_p.T  # [S, T_prev, A]: W_p x_{i-1,k}
        word_gates = words @ gate_x.T + self.gate.bias  # [S, T, D]
        has_previous = (previous_lengths > 0)[:, None]  # [S, 1]
        positions = torch.arange(previous.shape[1], device=words.device)
        # A first sentence attends uniformly over zeros (v = 0) and is then bypassed: no -inf-only softmax row.
        attendable = (positions[None, :] < previous_lengths[:, None]) | ~has_previous  # [S, T_prev]
        h = words.new_zeros(s, self.hidden)
        c = words.new_zeros(s, self.hidden)
        outputs = [None] * t_max
        for t in (reversed(range(t_max)) if self.reverse else range(t_max)):
            hidden = torch.tanh(word_scores[:, t, None] + (h @ score_h.T)[:, None] + previous_scores)  # [S, T_prev, A]
            scores = self.score_out(hidden).squeeze(-1).masked_fill(~attendable, float("-inf"))  # eq. 2, [S, T_prev]
            alpha = torch.softmax(scores, dim=-1)  # eq. 1
            summary = (alpha.unsqueeze(1) @ previous).squeeze(1)  # eq. 3, [S, D]
            gate = torch.sigmoid(word_gates[:, t] + h @ gate_h.T + summary @ gate_v.T)  # eq. 4, [S, D]
            x = words[:, t]
            gated = torch.where(has_previous, gate * x + (1 - gate) * summary, x)  # eq. 5
            h_new, c_new = self.cell(gated, (h, c))  # eq. 6
            live = (t < lengths)[:, None]  # [S, 1]: a sentence's state moves only over its own words
            h, c = torch.where(live, h_new, h), torch.where(live, c_new, c)
            outputs[t] = torch.where(live, h_new, torch.zeros_like(h_new))
        return torch.stack(outputs, dim=1)


class AttentionalSentenceLinking(nn.Module):
    """ASL as Luo & Glass (2018) state it: two :class:`ASLDirection`, each with its own f_c and f_g (the two
    h_{t-1} live in different spaces)."""

    variant = "recurrent"

    def __init__(self, input_dim: int, hidden: int = 200, attention_hidden: int = 150, dropout: float = 0.2):
        super().__init__()
        self.forward_direction = ASLDirection(input_dim, hidden, attention_hidden, reverse=False)
        self.backward_direction = ASLDirection(input_dim, hidden, attention_hidden, reverse=True)
        self.dropout, self.output_dim = nn.Dropout(dropout), 2 * hidden

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``words`` [sentences, len, dim] -> [sentences, len, 2 * hidden]."""
        previous, previous_lengths = previous_sentence(words), previous_sentence(lengths)
        forward = self.forward_direction(words, lengths, previous, previous_lengths)  # [S, T, hidden]
        backward = self.backward_direction(words, lengths, previous, previous_lengths)
        return self.dropout(torch.cat([forward, backward], dim=-1))


def asl_direction_reference(direction: ASLDirection, words: torch.Tensor, previous: torch.Tensor | None
                            ) -> torch.Tensor:
    """One direction of ASL (Luo & Glass 2018, eqs. 1-6) for ONE sentence, one word and one previous word at a
    time, the LSTM equations of section 3.2.1 spelled out with the cell's weights. ``words`` [len, D],
    ``previous`` [len_prev, D] or None for a first sentence -> [len, hidden]. Slow and obvious on purpose."""
    cell = direction.cell
    h, c = torch.zeros(direction.hidden), torch.zeros(direction.hidden)
    outputs = [None] * len(words)
    for t in (reversed(range(len(words))) if direction.reverse else range(len(words))):
        x = words[t]
        if previous is None:
            x_hat = x
        else:
            scores = [direction.score_out(torch.tanh(direction.score_hidden(torch.cat([x, h, p]))))[0]
                      for p in previous]  # eq. 2: c_k = f_c([x_{i,t}; h_{t-1}; x_{i-1,k}])
            total = sum(torch.exp(score) for score in scores)
            alphas = [torch.exp(score) / total for score in scores]  # eq. 1
            v = sum(alpha * p for alpha, p in zip(alphas, previous))  # eq. 3
            g = torch.sigmoid(direction.gate(torch.cat([x, h, v])))  # eq. 4
            x_hat = g * x + (1 - g) * v  # eq. 5
        i, f, g_, o = (cell.weight_ih @ x_hat + cell.bias_ih + cell.weight_hh @ h + cell.bias_hh).chunk(4)  # eq. 6
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g_)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs[t] = h
    return torch.stack(outputs)


def asl_reference(module: AttentionalSentenceLinking, sentences: list[torch.Tensor]) -> list[torch.Tensor]:
    """The paper's ASL sentence by sentence: each direction per :func:`asl_direction_reference` -> [len_i,
    2 * hidden] per sentence (eval mode: no dropout)."""
    out = []
    for i, words in enumerate(sentences):
        previous = sentences[i - 1] if i > 0 else None
        out.append(torch.cat([asl_direction_reference(module.forward_direction, words, previous),
                              asl_direction_reference(module.backward_direction, words, previous)], dim=-1))
    return out


class StaticAttentionalSentenceLinking(nn.Module):
    """``--asl_variant static`` (never the default): a BiLSTM whose input at word t of sentence i is gated
    between x_t and an attention summary c_t of the words p_1..p_m of sentence i-1 (Luo & Glass 2018):

        (1) e_tj = w_e · tanh(W_e [x_t ; p_j] + b_e)           one-hidden-layer MLP, 150 units
        (2) a_tj = exp(e_tj) / Σ_k exp(e_tk)
        (3) c_t  = Σ_j a_tj p_j
        (4) g_t  = σ(W_g [x_t ; c_t] + b_g)
        (5) x'_t = g_t ⊙ x_t + (1 − g_t) ⊙ c_t
        (6) h_t  = BiLSTM(x'_1..x'_n)_t                          200 units each way

    The first sentence has no previous one: x'_t = x_t. It differs from the paper in one place: attention and
    gate read [x_t; ·] without the LSTM's h_{t-1}, so they run for every word at once before the LSTM (faster,
    ``benchmarks/bench_asl.py``).
    """

    variant = "static"

    def __init__(self, input_dim: int, hidden: int = 200, attention_hidden: int = 150, dropout: float = 0.2):
        super().__init__()
        self.attend_word = nn.Linear(input_dim, attention_hidden)  # W_e's half on x_t (with b_e)
        self.attend_previous = nn.Linear(input_dim, attention_hidden, bias=False)  # W_e's half on p_j
        self.attention_out = nn.Linear(attention_hidden, 1, bias=False)  # w_e
        self.gate = nn.Linear(2 * input_dim, input_dim)  # W_g, b_g
        self.lstm = nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True)
        self.dropout, self.output_dim = nn.Dropout(dropout), 2 * hidden

    def summaries(self, start: int, end: int, words: torch.Tensor, lengths: torch.Tensor, previous: torch.Tensor,
                  previous_lengths: torch.Tensor) -> torch.Tensor:
        """Eqs. 1-3 for sentences ``start:end``: c_t [end - start, len, dim], zero past each sentence's end;
        cut to the longest sentence and previous sentence among these rows (one long one pads no other's)."""
        t_max = words.shape[1]
        own = max(1, int(lengths[start:end].max()))
        prior_lengths = previous_lengths[start:end]
        prior = previous[start:end, :max(1, int(prior_lengths.max()))]  # [rows, len_prev, dim]: p_j
        # Eq. 1 with W_e [x; p] = W_x x + W_p p: [rows, len, 1, h] + [rows, 1, len_prev, h]
        hidden = torch.tanh(self.attend_word(words[start:end, :own]).unsqueeze(2)
                            + self.attend_previous(prior).unsqueeze(1))
        logits = self.attention_out(hidden).squeeze(-1)  # [rows, len, len_prev]
        positions = torch.arange(prior.shape[1], device=words.device)
        valid = positions[None, :] < prior_lengths[:, None]  # [rows, len_prev]
        logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
        weights = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # eq. 2; the first sentence: all zero
        return nn.functional.pad(weights @ prior, (0, 0, 0, t_max - own))  # eq. 3

    def gated_inputs(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Eqs. 1-5: ``words`` [sentences, len, dim] -> x' [sentences, len, dim]. Eq. 1's tanh layer is [len,
        len_prev, h] floats a sentence, so sentences are attended :data:`CHUNK_ELEMENTS` floats at a time
        (:func:`map_row_chunks`; recomputed in the backward pass; ``benchmarks/bench_resolve_memory.py``)."""
        previous = previous_sentence(words)  # [sentences, len_prev, dim]: p_j
        previous_lengths = previous_sentence(lengths)
        per_sentence = words.shape[1] ** 2 * self.attend_word.out_features
        summary = map_row_chunks(self.summaries, words.shape[0], per_sentence, CHUNK_ELEMENTS, words, lengths,
                                 previous, previous_lengths)  # [sentences, len, dim]
        gate = torch.sigmoid(self.gate(torch.cat([words, summary], dim=-1)))  # eq. 4
        gated = gate * words + (1 - gate) * summary  # eq. 5
        has_previous = (previous_lengths > 0)[:, None, None]
        return torch.where(has_previous, gated, words)

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.dropout(run_lstm(self.lstm, self.gated_inputs(words, lengths), lengths))  # eq. 6


ASL_VARIANTS = {cls.variant: cls for cls in (AttentionalSentenceLinking, StaticAttentionalSentenceLinking)}


def sentence_encoder(kind: str, input_dim: int, hidden: int = 200, attention_hidden: int = 150,
                     dropout: float = 0.2, asl_variant: str = "recurrent") -> nn.Module:
    """The recurrent encoder ``kind`` (ASL in ``asl_variant``) over word representations of ``input_dim``."""
    if kind == "asl":
        return ASL_VARIANTS[asl_variant](input_dim, hidden, attention_hidden, dropout)
    return {"bilstm": SentenceBiLSTM, "lsl": LinearSentenceLinking}[kind](input_dim, hidden, dropout)


WINDOW_BATCH_SIZE = 4  # transformer windows per encoder call (--window_batch_size)


def window_word_states(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       word_positions: torch.Tensor, window_batch_size: int | None = None) -> torch.Tensor:
    """A transformer over the windows of :func:`~corefbert.tasks.coref_e2e.documents.subword_windows` ->
    [words, hidden], ``window_batch_size`` (None: :data:`WINDOW_BATCH_SIZE`) windows at a time
    (:func:`map_row_chunks`: in training each group is recomputed in the backward pass, same dropout)."""

    def chunk(start: int, end: int, input_ids, attention_mask) -> torch.Tensor:
        return encoder(input_ids=input_ids[start:end], attention_mask=attention_mask[start:end]).last_hidden_state

    states = map_row_chunks(chunk, input_ids.shape[0], 1, window_batch_size or WINDOW_BATCH_SIZE, input_ids,
                            attention_mask)  # [windows, len, h]
    return states.reshape(-1, states.shape[-1])[word_positions]
