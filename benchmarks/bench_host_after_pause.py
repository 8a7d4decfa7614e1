"""The loop's own host work per optimizer step, back to back against after a pause as long as a step.

    python benchmarks/bench_host_after_pause.py [--pause_ms 60] [--steps 60]

``bench_trainer.py --simulated_step_ms T`` counts every microsecond of host work the loop does around its stand-in
step (backward, gradient clipping, the fused AdamW step, the schedule, the non-finite flag), so the simulated ratio
depends on how fast that work runs right after the host waited T ms. This times that work on the same one-parameter
stand-in with the trainer's optimizer, schedule and accelerate wrappers: back to back (the obvious measure), then
after a ``time.sleep`` of ``--pause_ms`` (what the stand-in does) and after spinning as long (the core stays busy,
so a slowdown there is not the core's sleep state). Prints the median per step of each and the ratios to back to
back; then the same for one operation alone (a scalar add: torch's dispatch and nothing else). Kept out of the test
suite's pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corefbert.pretraining.pretraining_args import PretrainingArguments
from corefbert.training.loop.optimization import build_optimizer, build_scheduler
from corefbert.training.loop.setup import build_accelerator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause_ms", type=float, default=60.0)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_host_") as tmp:
        train_args = PretrainingArguments(output_dir=tmp, max_steps=10 * args.steps, learning_rate=1e-4,
                                          warmup_ratio=0.1, mixed_precision="no", disable_tqdm=True)
        accelerator = build_accelerator(train_args)
        weight = torch.nn.Parameter(torch.zeros(()))  # [] the stand-in's one parameter
        model = torch.nn.ParameterList([weight])
        optimizer = build_optimizer(model, train_args)
        model, optimizer = accelerator.prepare(model, optimizer)
        scheduler = build_scheduler(optimizer, train_args, 10 * args.steps)

        def step() -> None:
            with accelerator.accumulate(model):
                loss = (weight - 1.0) ** 2  # [] the stand-in's loss
                flag = torch.isfinite(loss).logical_not_()  # [] the loop's non-finite flag
                accelerator.backward(loss)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            del flag

        pause = args.pause_ms / 1000

        def spin() -> None:
            until = time.perf_counter() + pause
            while time.perf_counter() < until:
                pass

        waits = {"back to back": lambda: None, f"after sleep({args.pause_ms:g} ms)": lambda: time.sleep(pause),
                 f"after spinning {args.pause_ms:g} ms": spin}
        one = torch.zeros(())  # [] for the single operation
        works = {"the loop's step": step, "one scalar add": lambda: one + 1.0}
        for what, work in works.items():
            medians = {}
            for name, wait in waits.items():
                times = []
                for n in range(args.steps + 5):  # 5 untimed
                    wait()
                    started = time.perf_counter()
                    work()
                    if n >= 5:
                        times.append(time.perf_counter() - started)
                medians[name] = statistics.median(times) * 1e6
            base = medians["back to back"]
            print(what)
            for name, median in medians.items():
                print(f"  {name:28s} {median:7.0f} us  ({median / base:.2f}x back to back)")


if __name__ == "__main__":
    main()
