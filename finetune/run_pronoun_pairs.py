"""Pronoun-replacement entailment classifiers on the pairs of ``python -m corefbert.tasks.pronoun_pairs.builder``.

From scratch (Decomposable Attention; ``--model lstmn`` / ``bilstm`` likewise), one CPU or GPU:
    python finetune/run_pronoun_pairs.py --model da --train_file pairs/train.jsonl \
        --validation_file pairs/dev.jsonl --do_train --do_eval --output_dir out/da
A BERT / RoBERTa / CorefBERT sequence-pair classifier (N GPUs: ``accelerate launch`` the same line):
    python finetune/run_pronoun_pairs.py --model bert --model_name_or_path CKPT --train_file pairs/train.jsonl \
        --validation_file pairs/dev.jsonl --do_train --do_eval --output_dir out/bert
The ablation the paper warns about (no in-scope negatives in training, tested on in-scope ones):
    python finetune/run_pronoun_pairs.py --model da --train_types correct,out_of_scope \
        --eval_types correct,in_scope ... --do_train --do_eval --output_dir out/da-ablation
"""

from corefbert.tasks.registry import TASKS

main = TASKS["pronoun-pairs"].main

if __name__ == "__main__":
    main()
