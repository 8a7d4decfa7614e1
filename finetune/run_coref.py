"""Pronoun coreference (GAP, DPR/WSCR, WSC273, PDP, WinoGender, WikiCREM): zero-shot or fine-tuned.

Candidates are scored by the masked LM (the pronoun replaced by one mask per candidate token, mean log-prob)
and fine-tuned with the paper's eq. 5 (alpha 10, beta 0.2; LR 3e-5, batch 64, length 128, 10 epochs).
``--zero_shot copy`` ranks candidates with CorefBERT's MRP copy head instead.

Zero-shot, any masked-LM checkpoint::

    python finetune/run_coref.py --model_name_or_path CKPT --zero_shot mlm --do_eval \
        --validation_file dpr_dev_small.txt gap-validation.tsv --output_dir out/coref-zs

Fine-tune on DPR (+ GAP development) and evaluate::

    python finetune/run_coref.py --model_name_or_path CKPT --do_train --do_eval \
        --train_file dpr_train_small.txt gap-development.tsv \
        --validation_file dpr_dev_small.txt gap-validation.tsv --output_dir out/coref

N GPUs: ``accelerate launch --num_processes N finetune/run_coref.py ...`` (the same flags).
Writes ``all_results.json`` (``<file>_accuracy``; for GAP files the official scorer's ``<file>_f1``,
``_masculine_f1``, ``_feminine_f1``, ``_bias``), ``<split>_<file>_predictions.jsonl`` with every candidate's
score, and for GAP files ``<split>_<file>_gap.tsv`` in the official system format. Copy scoring adds
``<file>_unmatched_candidates`` / ``_loosely_matched_candidates`` / ``_undecided``. A ``WSCollection*.xml``
is read as WSC273 (its first 273 of 285 schemas; ``--wsc_schemas all`` for every one).
"""

from corefbert.tasks.registry import TASKS

main = TASKS["coref"].main

if __name__ == "__main__":
    main()
