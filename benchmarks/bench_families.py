"""Pretraining-step throughput and peak memory of ModernBERT-base against BERT-base, both as CorefBERT models.

    HF_HUB_OFFLINE=1 python benchmarks/bench_families.py --threads 2                # CPU: 512 and 2048, batch 1
    HF_HUB_OFFLINE=1 python benchmarks/bench_families.py --lengths 512 2048 8192   # CUDA: batch 8, bf16

Random-init base configs: ``BertConfig()`` (12 x 768, vocab 30522; ``max_position_embeddings`` raised to the
longest length, as a long-context BERT would need) and ``ModernBertConfig()`` (22 x 768, vocab 50368, local
attention over 128 tokens in two layers of three, 8192 positions). A step is zero_grad + forward + backward +
AdamW step on a collator-format batch (``bench_step.synthetic_batch``: whole-word masking, MRP mentions), the MLM
head on the masked rows only, as the trainer runs it. Rows are full (packed corpora have next to no padding),
so this measures the encoders themselves. Each (family, length) runs in a fresh process, so that its peak
resident memory (``ru_maxrss``: weights, AdamW state, activations) is its own. Prints tokens/s (wall and, on CPU,
per CPU second), the peak, and ModernBERT / BERT ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

FAMILIES = ("bert", "modernbert")


def _one(family: str, length: int, batch_size: int, steps: int, warmup: int, device_name: str) -> dict:
    """Time ``steps`` training steps of ``family`` at ``length`` in this process; its numbers as a dict."""
    import torch
    from bench_step import synthetic_batch
    from transformers import BertConfig, ModernBertConfig

    from corefbert.pretraining.families import PRETRAINING_CLASSES

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    if family == "bert":
        config = BertConfig(max_position_embeddings=max(512, length))
    else:
        config = ModernBertConfig()
        if length > config.max_position_embeddings:
            raise SystemExit(f"error: --lengths {length} exceeds ModernBERT's {config.max_position_embeddings} "
                             "positions; give shorter lengths")
    torch.manual_seed(0)
    model = PRETRAINING_CLASSES[config.model_type](config).to(device).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    gen = torch.Generator().manual_seed(0)
    batches = [{k: v.to(device) for k, v in synthetic_batch(gen, batch_size, length, config.vocab_size,
                                                              mask_id=config.vocab_size - 1).items()}
               for _ in range(2)]
    walls, cpus = [], []
    for i in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize(device)
        wall, cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = model(**batches[i % 2], masked_logits_only=True).loss
        loss.backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize(device)
        if i >= warmup:
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    tokens = batch_size * length
    peak = (torch.cuda.max_memory_allocated(device) if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # ru_maxrss is in KiB on Linux
    return {"family": family, "length": length, "parameters": sum(p.numel() for p in model.parameters()),
            "wall_s": statistics.median(walls), "tokens_per_s": tokens / statistics.median(walls),
            "tokens_per_cpu_s": tokens / statistics.median(cpus), "peak_mib": peak / 2**20,
            "attention": model.config._attn_implementation}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--batch_size", type=int, default=None, help="default 8 on CUDA, 1 on CPU")
    parser.add_argument("--steps", type=int, default=None, help="timed steps; default 10 CUDA, 2 CPU")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads; default torch's own")
    parser.add_argument("--device", default=None, help="default cuda when available, else cpu")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one (family, length) run
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    batch_size = args.batch_size or (8 if cuda else 1)
    steps = args.steps or (10 if cuda else 2)
    if args.one:
        print(json.dumps(_one(args.one, args.lengths[0], batch_size, steps, args.warmup, device)))
        return

    results = {}
    for length in args.lengths:
        for family in FAMILIES:
            command = [sys.executable, __file__, "--one", family, "--lengths", str(length), "--batch_size",
                       str(batch_size), "--steps", str(steps), "--warmup", str(args.warmup), "--device", device]
            if args.threads:
                command += ["--threads", str(args.threads)]
            run = subprocess.run(command, capture_output=True, text=True, check=False)
            if run.returncode != 0:
                raise SystemExit(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "error: a run failed")
            results[family, length] = json.loads(run.stdout.strip().splitlines()[-1])
    where = torch.cuda.get_device_name(0) if cuda else f"CPU, {args.threads or torch.get_num_threads()} threads"
    print(f"batch {batch_size}, {'bf16' if cuda else 'fp32'}, {where}; median of {steps} steps after {args.warmup} "
          f"warm-up; peak = {'CUDA max allocated' if cuda else 'process max RSS'}")
    print(f"{'family':<12}{'length':>8}{'params':>10}{'attention':>11}{'s/step':>10}{'tokens/s':>11}"
          f"{'tok/cpu-s':>11}{'peak MiB':>10}")
    for (family, length), r in results.items():
        print(f"{family:<12}{length:>8}{r['parameters'] / 1e6:>9.0f}M{r['attention']:>11}{r['wall_s']:>10.2f}"
              f"{r['tokens_per_s']:>11.0f}{r['tokens_per_cpu_s']:>11.0f}{r['peak_mib']:>10.0f}")
    for length in args.lengths:
        bert, modern = results["bert", length], results["modernbert", length]
        print(f"ModernBERT / BERT at {length}: tokens/s {modern['tokens_per_s'] / bert['tokens_per_s']:.2f}x "
              f"(per CPU second {modern['tokens_per_cpu_s'] / bert['tokens_per_cpu_s']:.2f}x), "
              f"peak memory {modern['peak_mib'] / bert['peak_mib']:.2f}x")


if __name__ == "__main__":
    main()
