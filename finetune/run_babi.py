"""bAbI-1k with the Gated-Attention reader and Coref-GRU (Dhingra et al., NAACL 2018), trained from scratch.

One CPU, GA reader with C-GRU on tasks 2, 3 and 16, three seeds (output_dir/qaN/seed_k, then babi_table.md):
    python finetune/run_babi.py --data_dir ../shared/data/babi/en-1k --task_ids 2 3 16 --seeds 3 \\
        --model ga_cgru --do_train --do_eval --output_dir out/babi_cgru
The plain-GRU reader: --model ga_gru. Clusters from a JSONL file of character spans:
    --coref_source file --coref_file clusters.jsonl
Resume an interrupted table (finished runs are kept): add --resume_from_checkpoint latest.
"""

from corefbert.tasks.registry import TASKS

main = TASKS["babi"].main

if __name__ == "__main__":
    main()
