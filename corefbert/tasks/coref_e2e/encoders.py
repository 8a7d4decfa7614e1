"""Word encoders of the end-to-end coreference model: per-sentence BiLSTM, LSL, ASL, and a transformer.

Each encoder maps one document to ``(context, head_inputs)``: ``context`` are the contextual word vectors
x*_t of Lee et al. (2017) (span endpoints, the head attention's scores), ``head_inputs`` the vectors x_t the
head attention averages (the word representations for the LSTMs, the hidden states themselves for BERT).

The recurrent encoders follow Luo & Glass (2018), "Learning word representations with cross-sentence
dependency for end-to-end co-reference resolution":

- **baseline** (Lee et al. 2017): one BiLSTM run on every sentence on its own, zero initial states.
- **LSL** (linear sentence linking): a 2-layer BiLSTM; the second layer's forward and backward initial
  states of sentence i are the first layer's final forward and backward outputs of sentence i-1
  (zeros for the first sentence). The cell states start at zero: the paper links the *outputs*.
- **ASL** (attentional sentence linking): the input of the LSTM at word t of sentence i is gated between the
  word x_t and an attention summary c_t of the words of sentence i-1 (eqs. 1-6 below).

Each has a literal per-step reference beside the tests (``tests/references.py``), which they compare against.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

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
        if pretrained is not None:  # the paper's GloVe vectors stay fixed
            self.words.weight.data.copy_(pretrained)
            self.words.weight.requires_grad_(False)
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


def final_outputs(outputs: torch.Tensor, lengths: torch.Tensor, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The final forward output (at the last word) and final backward output (at the first word) of each
    sentence of a BiLSTM's ``outputs`` [sentences, len, 2 * hidden] -> two [sentences, hidden]."""
    rows = torch.arange(outputs.shape[0], device=outputs.device)
    return outputs[rows, lengths - 1, :hidden], outputs[:, 0, hidden:]


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
    """LSL: layer 2 of sentence i starts from layer 1's final outputs of sentence i-1.

    Layer 1 runs on all sentences at once; layer 2 too, since its initial states depend on layer 1 only.
    """

    def __init__(self, input_dim: int, hidden: int = 200, dropout: float = 0.2):
        super().__init__()
        self.layer1 = nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True)
        self.layer2 = nn.LSTM(2 * hidden, hidden, batch_first=True, bidirectional=True)
        self.hidden, self.dropout, self.output_dim = hidden, nn.Dropout(dropout), 2 * hidden

    def initial_states(self, first: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer 2's (h0, c0), each [2 directions, sentences, hidden], from layer 1's outputs ``first``."""
        forward_final, backward_final = final_outputs(first, lengths, self.hidden)  # [sentences, hidden] each
        h0 = torch.stack([previous_sentence(forward_final), previous_sentence(backward_final)])
        return h0, torch.zeros_like(h0)

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        first = run_lstm(self.layer1, words, lengths)  # [sentences, len, 2 * hidden]
        state = self.initial_states(first, lengths)  # the outputs themselves: dropout is only between layers
        return self.dropout(run_lstm(self.layer2, self.dropout(first), lengths, state))


class AttentionalSentenceLinking(nn.Module):
    """ASL: a BiLSTM whose input at word t of sentence i is gated between x_t and an attention summary c_t
    of the words p_1..p_m of sentence i-1 (Luo & Glass 2018, eqs. 1-6):

        (1) e_tj = w_e · tanh(W_e [x_t ; p_j] + b_e)           one-hidden-layer MLP, 150 units
        (2) a_tj = exp(e_tj) / Σ_k exp(e_tk)
        (3) c_t  = Σ_j a_tj p_j
        (4) g_t  = σ(W_g [x_t ; c_t] + b_g)
        (5) x'_t = g_t ⊙ x_t + (1 − g_t) ⊙ c_t
        (6) h_t  = BiLSTM(x'_1..x'_n)_t                          200 units each way

    The first sentence has no previous one: x'_t = x_t.
    """

    def __init__(self, input_dim: int, hidden: int = 200, attention_hidden: int = 150, dropout: float = 0.2):
        super().__init__()
        self.attend_word = nn.Linear(input_dim, attention_hidden)  # W_e's half on x_t (with b_e)
        self.attend_previous = nn.Linear(input_dim, attention_hidden, bias=False)  # W_e's half on p_j
        self.attention_out = nn.Linear(attention_hidden, 1, bias=False)  # w_e
        self.gate = nn.Linear(2 * input_dim, input_dim)  # W_g, b_g
        self.lstm = nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True)
        self.dropout, self.output_dim = nn.Dropout(dropout), 2 * hidden

    def gated_inputs(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Eqs. 1-5: ``words`` [sentences, len, dim] -> x' [sentences, len, dim]."""
        previous = previous_sentence(words)  # [sentences, len_prev, dim]: p_j
        previous_lengths = previous_sentence(lengths)
        # Eq. 1 with W_e [x; p] = W_x x + W_p p: [sentences, len, 1, h] + [sentences, 1, len_prev, h]
        hidden = torch.tanh(self.attend_word(words).unsqueeze(2) + self.attend_previous(previous).unsqueeze(1))
        logits = self.attention_out(hidden).squeeze(-1)  # [sentences, len, len_prev]
        positions = torch.arange(words.shape[1], device=words.device)
        valid = positions[None, :] < previous_lengths[:, None]  # [sentences, len_prev]
        logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
        weights = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # eq. 2; the first sentence: all zero
        summary = weights @ previous  # eq. 3, [sentences, len, dim]
        gate = torch.sigmoid(self.gate(torch.cat([words, summary], dim=-1)))  # eq. 4
        gated = gate * words + (1 - gate) * summary  # eq. 5
        has_previous = (previous_lengths > 0)[:, None, None]
        return torch.where(has_previous, gated, words)

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.dropout(run_lstm(self.lstm, self.gated_inputs(words, lengths), lengths))  # eq. 6


def sentence_encoder(kind: str, input_dim: int, hidden: int = 200, attention_hidden: int = 150,
                     dropout: float = 0.2) -> nn.Module:
    """The recurrent encoder ``kind`` (bilstm, lsl, asl) over word representations of ``input_dim``."""
    if kind == "bilstm":
        return SentenceBiLSTM(input_dim, hidden, dropout)
    if kind == "lsl":
        return LinearSentenceLinking(input_dim, hidden, dropout)
    if kind == "asl":
        return AttentionalSentenceLinking(input_dim, hidden, attention_hidden, dropout)
    raise ValueError(kind)


def window_word_states(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       word_positions: torch.Tensor) -> torch.Tensor:
    """A transformer over overlapping windows: ``input_ids``/``attention_mask`` [windows, window_len];
    ``word_positions`` [words] index into the flattened windows (each word's first subword in the window
    where it sits farthest from an edge) -> [words, hidden]."""
    states = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [windows, len, h]
    return states.reshape(-1, states.shape[-1])[word_positions]
