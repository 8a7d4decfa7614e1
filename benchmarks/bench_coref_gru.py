"""Coref-GRU: the batched scan (one loop over time for a whole batch and both directions, a per-cluster
memory) vs the obvious literal loop (one sequence at a time, token by token, h_{y_t} looked up by index).

    OMP_NUM_THREADS=1 python benchmarks/bench_coref_gru.py --backward      # the guide's table: B 32, T 60, H 64
    OMP_NUM_THREADS=1 python benchmarks/bench_coref_gru.py                 # forward only
    OMP_NUM_THREADS=1 python benchmarks/bench_coref_gru.py --length 200 --backward

Both run the same bidirectional layer on the same random batch with bAbI-like clusters (13 entities); the
script checks that they agree and prints the time of each and their ratio. A plain ``torch.nn.GRU`` of the
same size is timed as the floor a recurrent layer without coreference reaches on this machine, interleaved
call by call with the scan (median of each) so that a change of machine load mid-run shifts both alike.
``OMP_NUM_THREADS=1`` is part of the command: on a machine whose cores are busy, two threads per op make
the scan's many small ops wait on each other (4.4x literal/batched and 0.7x-3.1x nn.GRU measured so).
The first output line states the thread count and the load average the figures were taken under.

Each time is given twice: wall clock, and the CPU time of the calling thread (``time.thread_time``). On a
shared machine the wall clock also counts the time the process waits for a core, which grows with the number
of small operations a call issues and with the load; the CPU time counts only the work, so its ratio is the
one that carries from one machine state to another (it still moves a little with cache sharing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from timing import seconds_per_call

from corefbert.tasks.babi.coref_gru import BiCorefGRU, reference_coref_gru


def interleaved_seconds(fns: list, repeats: int) -> tuple[list[float], list[float]]:
    """Median wall seconds and median thread CPU seconds per call of each of ``fns``, called in turn ``repeats``
    times after a warm-up."""
    for fn in fns:
        fn()
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, spent_wall, spent_cpu in zip(fns, wall, cpu):
            start, start_cpu = time.perf_counter(), time.thread_time()
            fn()
            spent_cpu.append(time.thread_time() - start_cpu)
            spent_wall.append(time.perf_counter() - start)
    return [statistics.median(s) for s in wall], [statistics.median(s) for s in cpu]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=60)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--clusters", type=int, default=13)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--backward", action="store_true", help="Time forward + backward.")
    args = parser.parse_args()
    torch.manual_seed(0)
    inputs = torch.randn(args.batch, args.length, args.hidden, requires_grad=args.backward)
    lengths = torch.randint(args.length // 2, args.length + 1, (args.batch,))
    lengths[0] = args.length
    mask = torch.arange(args.length).unsqueeze(0) < lengths.unsqueeze(1)  # [B, T]
    # about a third of the tokens are entity mentions, as in bAbI stories
    clusters = torch.randint(1, args.clusters + 1, (args.batch, args.length))
    clusters = clusters * (torch.rand(args.batch, args.length) < 0.33) * mask
    layer = BiCorefGRU(args.hidden, args.hidden)
    gru = torch.nn.GRU(args.hidden, args.hidden, batch_first=True, bidirectional=True)

    def run(fn):
        def go():
            out = fn()
            if args.backward:
                out.sum().backward()
            return out
        return go

    def batched():
        return layer(inputs, mask, clusters)

    def literal():
        rows = []
        for b in range(args.batch):
            n, ids = int(lengths[b]), clusters[b, : int(lengths[b])].tolist()
            rows.append(torch.cat([reference_coref_gru(layer.forward_layer, inputs[b, :n], ids),
                                   reference_coref_gru(layer.backward_layer, inputs[b, :n], ids)], dim=-1))
        return rows

    with torch.no_grad():
        expected, got = literal(), batched()
    worst = max((got[b, : int(lengths[b])] - expected[b]).abs().max().item() for b in range(args.batch))
    assert worst < 1e-4, f"batched and literal disagree by {worst}"
    load = os.getloadavg()[0]
    t_literal = seconds_per_call(run(lambda: torch.stack([r.sum() for r in literal()])), max(1, args.repeats // 5))
    (t_batched, t_gru), (c_batched, c_gru) = interleaved_seconds([run(batched), run(lambda: gru(inputs)[0])],
                                                                 args.repeats)
    what = "forward+backward" if args.backward else "forward"
    print(f"{torch.get_num_threads()} thread(s), load average {load:.1f} -> {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    print(f"bidirectional C-GRU, B={args.batch} T={args.length} H={args.hidden}, {what} (max difference {worst:.1e})")
    print(f"  literal per-token loop : {t_literal * 1000:9.1f} ms wall")
    print(f"  batched scan           : {t_batched * 1000:9.1f} ms wall {c_batched * 1000:9.1f} ms CPU   "
          f"literal/batched = {t_literal / t_batched:.1f}x wall")
    print(f"  torch.nn.GRU (no coref): {t_gru * 1000:9.1f} ms wall {c_gru * 1000:9.1f} ms CPU   "
          f"batched/nn.GRU = {t_batched / t_gru:.1f}x wall, {c_batched / c_gru:.2f}x CPU")


if __name__ == "__main__":
    main()
