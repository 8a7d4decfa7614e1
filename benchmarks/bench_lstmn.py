"""LSTMN scan (corefbert/tasks/pronoun_pairs/lstmn.py): the batched layer against the literal per-example equations, and against the
same batched scan without its key tape (``W_h h_i`` recomputed over the whole tape at every step).

Forward + backward of an encoder LSTMN and a deep-fusion decoder over a batch of pairs, as one training step
of ``--model lstmn`` runs them; prints the time of each and the ratios. The literal reference runs on
``--reference_examples`` examples and is scaled to the batch.

    python benchmarks/bench_lstmn.py [--batch 32] [--length 40] [--hidden 200] [--input 300] [--repeats 3]
"""

from __future__ import annotations

import argparse

import torch
from timing import seconds_per_call

from corefbert.tasks.pronoun_pairs.lstmn import LSTMN, lstmn_reference


def _without_key_tape(layer: LSTMN, inputs: torch.Tensor) -> torch.Tensor:
    """The obvious batched scan: eq. 4 with ``W_h`` applied to the whole hidden tape at every step."""
    batch, steps, _ = inputs.shape
    zeros = inputs.new_zeros(batch, layer.hidden_size)
    hidden_tape, memory_tape, summary = [], [], zeros
    for t in range(steps):
        x_t = inputs[:, t]
        if t == 0:
            summary, memory_summary = zeros, zeros
        else:
            tape = torch.stack(hidden_tape, 1)  # [batch, t, hidden]
            scores = layer.attend_v(torch.tanh(layer.attend_h(tape) + (layer.attend_x(x_t)
                                               + layer.attend_summary(summary))[:, None])).squeeze(-1)
            weights = scores.softmax(-1)[:, None]  # [batch, 1, t]
            summary = (weights @ tape).squeeze(1)
            memory_summary = (weights @ torch.stack(memory_tape, 1)).squeeze(1)
        i, f, o, c = layer.gates(torch.cat([summary, x_t], -1)).chunk(4, -1)
        memory = f.sigmoid() * memory_summary + i.sigmoid() * c.tanh()
        hidden_tape.append(o.sigmoid() * memory.tanh())
        memory_tape.append(memory)
    return torch.stack(hidden_tape, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=200)
    parser.add_argument("--input", type=int, default=300)
    parser.add_argument("--reference_examples", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    encoder, decoder = LSTMN(args.input, args.hidden), LSTMN(args.input, args.hidden, fusion=True)
    source = torch.randn(args.batch, args.length, args.input)  # [batch, src, input]
    target = torch.randn(args.batch, args.length, args.input)  # [batch, tgt, input]
    mask = torch.ones(args.batch, args.length, dtype=torch.long)

    def batched():
        hidden, memory = encoder(source)
        decoded, _ = decoder(target, source=(hidden, memory, mask))
        decoded.sum().backward()

    def no_key_tape():
        _without_key_tape(encoder, source).sum().backward()

    def encoder_only():
        encoder(source)[0].sum().backward()

    def literal():
        for b in range(args.reference_examples):
            hidden, memory = lstmn_reference(encoder, source[b])
            lstmn_reference(decoder, target[b], (hidden, memory))[0].sum().backward()

    fast = seconds_per_call(batched, args.repeats)
    reference = seconds_per_call(literal, 1) * args.batch / args.reference_examples
    encoder_time, plain = seconds_per_call(encoder_only, args.repeats), seconds_per_call(no_key_tape, args.repeats)
    print(f"batch {args.batch} x {args.length} steps, hidden {args.hidden}, input {args.input}, "
          f"{torch.get_num_threads()} thread(s), forward + backward")
    print(f"encoder + fusion decoder, batched        {fast * 1000:9.1f} ms")
    print(f"encoder + fusion decoder, literal        {reference * 1000:9.1f} ms  (scaled from "
          f"{args.reference_examples} examples)  ratio {reference / fast:6.1f}x")
    print(f"encoder, batched with key tape           {encoder_time * 1000:9.1f} ms")
    print(f"encoder, batched, W_h over the whole tape {plain * 1000:8.1f} ms  ratio {plain / encoder_time:6.2f}x")


if __name__ == "__main__":
    main()
