"""Peak memory of ``corefbert resolve`` on a long text, per encoder, against the static ASL's attention in one
call (what it did before its sentences were attended in bounded chunks).

Untrained model folders at the README quick command's sizes (100-d embeddings + character CNN, 100-unit LSTMs,
FFNNs of 100, span width 8, K = 50; the 150-unit ASL attention): memory does not depend on the weights. The
text is synthetic: sentences of 5 to 64 words in a fixed cycle, every 40th of 160 words (LitBank's longest
sentence), in paragraphs of five; ``resolve`` reads it in windows of up to 5,000 words. Each configuration runs
in a fresh process, whose peak resident memory (``ru_maxrss``) is printed, and its growth over the loaded model.

    python benchmarks/bench_resolve_memory.py [--words 1925 20000] [--encoders static_one_call static asl lsl]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

BASE = "Anna met Tom at the station and she gave him the letter from her mother".split()
CONFIGS = {"static_one_call": ("asl", "static"), "static": ("asl", "static"), "asl": ("asl", "recurrent"),
           "lsl": ("lsl", "recurrent")}

CHILD = """
import resource, sys, time
from corefbert.tasks.coref_e2e import encoders
from corefbert.tasks.coref_e2e.resolve import main

model, text, one_call = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if one_call:  # every sentence of a window in one chunk, cut to the window's longest: the attention before chunks
    encoders.CHUNK_ELEMENTS = 1 << 62
main(["--model", model, "--spacy_model", "blank", "--text", "Anna met Tom. She gave him a letter."])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
main(["--model", model, "--spacy_model", "blank", "--input_file", text])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"{peak / 1024:.0f} {(peak - before) / 1024:.0f} {time.perf_counter() - start:.1f}")
"""


def synthetic_text(words: int) -> str:
    sentences, total = [], 0
    while total < words:
        n = min(160 if len(sentences) % 40 == 39 else 5 + (len(sentences) * 7) % 60, words - total)
        sentences.append(" ".join(BASE[k % len(BASE)] for k in range(len(sentences), len(sentences) + n)) + ".")
        total += n
    return "\n\n".join(" ".join(sentences[i:i + 5]) for i in range(0, len(sentences), 5))


def model_folder(encoder: str, variant: str, root: str) -> str:
    from corefbert.tasks.coref_e2e.config import CorefE2EConfig
    from corefbert.tasks.coref_e2e.documents import build_vocabulary
    from corefbert.tasks.coref_e2e.model import build_model, save_model
    from corefbert.tasks.coref_e2e.span_ranking import SpanRankingConfig
    from corefbert.text.conll import ConllDocument

    ranker = SpanRankingConfig(context_dim=0, head_dim=0, max_span_width=8, ffnn_size=100, max_antecedents=50)
    config = CorefE2EConfig(encoder=encoder, ranker=ranker, embedding_dim=100, lstm_size=100, asl_variant=variant)
    words = [[*BASE, "."]]
    vocab = build_vocabulary([ConllDocument("d", "d", "0", words, [["-"] * len(words[0])], "", [])])
    out = os.path.join(root, f"{encoder}_{variant}")
    save_model(build_model(config, vocab).eval(), out, vocab)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, nargs="+", default=[1925, 20000])
    parser.add_argument("--encoders", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as root:
        for words in args.words:
            text = os.path.join(root, f"text_{words}.txt")
            with open(text, "w", encoding="utf-8") as handle:
                handle.write(synthetic_text(words))
            for name in args.encoders:
                folder = model_folder(*CONFIGS[name], root)
                done = subprocess.run([sys.executable, "-c", CHILD, folder, text, str(int(name == "static_one_call"))],
                                      capture_output=True, text=True, env=env)
                if done.returncode != 0:
                    print(f"{words:6d} words  {name:16s} failed: {done.stderr.strip().splitlines()[-1]}")
                    continue
                peak, growth, seconds = done.stdout.split()[-3:]
                print(f"{words:6d} words  {name:16s} peak RSS {peak:>6s} MB  growth {growth:>6s} MB  {seconds:>6s} s")


if __name__ == "__main__":
    main()
