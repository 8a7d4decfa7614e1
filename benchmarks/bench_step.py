"""Training-step time of CorefBertForPreTraining against plain BertForMaskedLM on identical batches.

    HF_HUB_OFFLINE=1 python benchmarks/bench_step.py                          # CUDA: batch 16, bf16
    HF_HUB_OFFLINE=1 python benchmarks/bench_step.py --threads 1             # CPU: batch 1, 6 steps

A step is zero_grad + forward + backward + AdamW step, BERT-base shape (random weights) at --seq_len.
Both models see the same synthetic batch each step: whole-word masking of 15% of the tokens, one in
five masked words an MRP mention with 1-3 unmasked referents (the collator's output format), the
other masked words MLM; the baseline gets the same input_ids / attention_mask / labels. Steps
alternate between the two models (which goes first alternates too), so load drifting on a shared
machine hits both alike; medians are reported, with process CPU time beside wall time on CPU.
Target: ratio (ours / baseline) <= 1.03. With CUDA also tokens/s and model FLOPs utilization (MFU).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from transformers import BertConfig, BertForMaskedLM

from corefbert.pretraining.modeling import CorefBertForPreTraining
from corefbert.training.loop.throughput import PEAK_BF16_TFLOPS, transformer_training_flops


def synthetic_batch(gen: torch.Generator, batch: int, length: int, vocab: int, mask_id: int = 103) -> dict:
    """A collator-format batch: [CLS] words of 1-2 tokens [SEP], 15% of tokens masked as whole words."""
    input_ids = torch.randint(1000, vocab, (batch, length), generator=gen)
    input_ids[:, 0], input_ids[:, -1] = 101, 102
    word_ids = torch.full((batch, length), -1, dtype=torch.long)
    labels = torch.full((batch, length), -100, dtype=torch.long)
    copy_mask = torch.zeros(batch, length, dtype=torch.bool)
    rows = []
    for b in range(batch):
        words, pos = [], 1
        while pos < length - 1:
            size = min(1 + int(torch.randint(2, (1,), generator=gen)), length - 1 - pos)
            word_ids[b, pos : pos + size] = len(words)
            words.append((pos, pos + size - 1))
            pos += size
        order = torch.randperm(len(words), generator=gen).tolist()
        budget, masked = round(0.15 * (length - 2)), []
        for w in order:
            if budget <= 0:
                break
            masked.append(w)
            budget -= words[w][1] - words[w][0] + 1
        kept = [w for w in order if w not in set(masked)]
        copy_mask[b, 1 : length - 1] = True
        for w in masked:
            s, e = words[w]
            labels[b, s : e + 1] = input_ids[b, s : e + 1]
            input_ids[b, s : e + 1] = mask_id
            copy_mask[b, s : e + 1] = False
        mentions = []
        for w in masked[: max(1, len(masked) // 5)]:  # MLM : MRP = 4 : 1 in words
            n_ref = 1 + int(torch.randint(3, (1,), generator=gen))
            mentions.append((words[w], [words[kept[int(i)]] for i in torch.randint(len(kept), (n_ref,), generator=gen)]))
        rows.append(mentions)
    m, r = max(len(x) for x in rows), 3
    mrp = {key: torch.zeros(batch, m, dtype=torch.long) for key in ("mrp_mention_starts", "mrp_mention_ends")}
    mrp["mrp_mention_mask"] = torch.zeros(batch, m, dtype=torch.bool)
    for key in ("mrp_referent_starts", "mrp_referent_ends"):
        mrp[key] = torch.zeros(batch, m, r, dtype=torch.long)
    mrp["mrp_referent_mask"] = torch.zeros(batch, m, r, dtype=torch.bool)
    for b, mentions in enumerate(rows):
        for i, ((s, e), refs) in enumerate(mentions):
            mrp["mrp_mention_starts"][b, i], mrp["mrp_mention_ends"][b, i], mrp["mrp_mention_mask"][b, i] = s, e, True
            for j, (rs, re_) in enumerate(dict.fromkeys(refs)):
                mrp["mrp_referent_starts"][b, i, j], mrp["mrp_referent_ends"][b, i, j] = rs, re_
                mrp["mrp_referent_mask"][b, i, j] = True
    return {
        "input_ids": input_ids, "attention_mask": torch.ones(batch, length, dtype=torch.long),
        "labels": labels, "word_ids": word_ids, "copy_mask": copy_mask, **mrp,
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_size", type=int, default=None, help="default 16 on CUDA, 1 on CPU")
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per model; default 20 CUDA, 6 CPU")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps per model; default 5 CUDA, 1 CPU")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="autocast; default bf16 on CUDA")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads; default torch's own")
    parser.add_argument("--full_logits", action="store_true",
                        help="run our MLM head over every position, as BertForMaskedLM does (the trainer does not)")
    parser.add_argument("--peak_tflops", type=float, default=None, help="for MFU; default from the GPU name")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    batch_size = args.batch_size or (16 if cuda else 1)
    steps = args.steps or (20 if cuda else 6)
    warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    dtype = args.dtype or ("bf16" if cuda else "fp32")

    config = BertConfig(max_position_embeddings=max(512, args.seq_len))  # BERT-base: 12 x 768, vocab 30522
    torch.manual_seed(0)
    ours = CorefBertForPreTraining(config).to(device).train()
    baseline = BertForMaskedLM(config).to(device).train()
    baseline.load_state_dict(ours.state_dict(), strict=False)  # same weights; ours adds pooler and V
    models = {"ours": ours, "baseline": baseline}
    optimizers = {name: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-5)
                  for name, m in models.items()}
    gen = torch.Generator().manual_seed(0)
    batches = [synthetic_batch(gen, batch_size, args.seq_len, config.vocab_size) for _ in range(4)]
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    plain_keys = ("input_ids", "attention_mask", "labels")

    def step(name: str, batch: dict) -> tuple[float, float]:
        # Ours runs as the trainer runs it: the MLM head on the masked rows only (unless --full_logits).
        inputs = ({**batch, "masked_logits_only": not args.full_logits} if name == "ours"
                  else {k: batch[k] for k in plain_keys})
        _sync(device)
        wall, cpu = time.perf_counter(), time.process_time()
        optimizers[name].zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = models[name](**inputs).loss
        loss.backward()
        optimizers[name].step()
        _sync(device)
        return time.perf_counter() - wall, time.process_time() - cpu

    times = {name: {"wall": [], "cpu": []} for name in models}
    for i in range(warmup + steps):
        order = ["ours", "baseline"] if i % 2 == 0 else ["baseline", "ours"]
        for name in order:
            wall, cpu = step(name, batches[i % len(batches)])
            if i >= warmup:
                times[name]["wall"].append(wall)
                times[name]["cpu"].append(cpu)

    med = {name: {kind: statistics.median(v) for kind, v in t.items()} for name, t in times.items()}
    where = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"BERT-base, batch {batch_size} x seq {args.seq_len}, {dtype}, {where}; median of {steps} steps "
          f"after {warmup} warm-up")
    print(f"{'model':<28}{'wall s/step':>14}{'cpu s/step':>14}")
    for name, label in (("baseline", "BertForMaskedLM"), ("ours", "CorefBertForPreTraining")):
        print(f"{label:<28}{med[name]['wall']:>14.4f}{med[name]['cpu']:>14.4f}")
    print(f"step-time ratio ours/baseline: wall {med['ours']['wall'] / med['baseline']['wall']:.3f}"
          + ("" if cuda else f", cpu {med['ours']['cpu'] / med['baseline']['cpu']:.3f}") + "  (target <= 1.03)")
    if cuda:
        tokens = batch_size * args.seq_len
        flops = transformer_training_flops(config, batch_size, args.seq_len)
        peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in where), None)
        for name in ("baseline", "ours"):
            line = f"{name}: {tokens / med[name]['wall']:,.0f} tokens/s"
            if peak:
                line += f", MFU {flops / med[name]['wall'] / (peak * 1e12):.1%} of {peak:.0f} TFLOP/s bf16"
            print(line)


if __name__ == "__main__":
    main()
