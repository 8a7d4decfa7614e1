"""Cost of resume-exact masking: SeededCollate (per-batch RNG, global RNG preserved) vs the bare collator.

    python benchmarks/bench_seeded_collate.py [--batch_size 32 --seq_len 512 --batches 50]

Both collate the same synthetic packed rows (docs/contracts.md schema) with the same tokenizer; prints
milliseconds per batch and the ratio seeded / bare. The wrapper adds a shallow copy of the collator, a
seeded numpy generator and a save/restore of the python, numpy and torch CPU RNG states per batch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # helpers: the builders tests share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from helpers import synthetic_rows
    from transformers import AutoTokenizer

    from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction
    from corefbert.pretraining.data import ROW_KEY, SeededCollate
    from corefbert.pretraining.pretraining_args import default_backbone

    tokenizer = AutoTokenizer.from_pretrained(default_backbone())
    words = args.seq_len * 2 // 3  # words of 1-2 subwords (1.5 on average): about seq_len tokens
    columns = synthetic_rows(tokenizer, args.batch_size, seed=0, min_words=words - 4, max_words=words - 2)
    rows = [{k: v[i] for k, v in columns.items()} for i in range(args.batch_size)]
    indexed = [{**row, ROW_KEY: i} for i, row in enumerate(rows)]
    collator = DataCollatorForMentionReferencePrediction(tokenizer, seed=0)
    seeded = SeededCollate(collator, seed=0)

    def timed(fn, batch) -> float:
        fn(batch)  # warm-up
        start = time.perf_counter()
        for _ in range(args.batches):
            fn(batch)
        return (time.perf_counter() - start) / args.batches * 1000

    bare_ms = min(timed(collator, rows) for _ in range(3))
    seeded_ms = min(timed(seeded, indexed) for _ in range(3))
    print(f"batch {args.batch_size} x ~{len(rows[0]['input_ids'])} tokens, {args.batches} batches, best of 3")
    print(f"bare collator     {bare_ms:8.2f} ms/batch")
    print(f"SeededCollate     {seeded_ms:8.2f} ms/batch")
    print(f"ratio seeded/bare {seeded_ms / bare_ms:8.3f}")


if __name__ == "__main__":
    main()
