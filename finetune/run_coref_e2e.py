"""End-to-end coreference resolution (Lee et al. 2017) on CoNLL-2012 files, with the baseline BiLSTM, LSL or
ASL encoders of Luo & Glass (2018), or a (Coref)BERT/RoBERTa checkpoint over overlapping windows.

Train a recurrent model from scratch (no checkpoint needed) and score it on held-out documents:
    python finetune/run_coref_e2e.py --encoder asl --train_file 'litbank/*.conll' \
        --validation_split_percentage 15 --do_train --do_eval --output_dir out/asl
Fine-tune CorefBERT and write test predictions as CoNLL files:
    python finetune/run_coref_e2e.py --encoder bert --model_name_or_path CKPT --train_file 'train/*_conll' \
        --validation_file 'dev/*_conll' --test_file 'test/*_conll' --do_train --do_eval --do_predict --output_dir out/bert
Evaluate a trained model again, or resolve raw text with it:
    python finetune/run_coref_e2e.py --encoder asl --model_name_or_path out/asl/best --validation_file dev.conll \
        --do_eval --output_dir out/asl-dev
    python -m corefbert.tasks.coref_e2e.resolve --model out/asl/best --text "Anna met Tom. She liked him."
"""

from corefbert.tasks.registry import TASKS

main = TASKS["coref-e2e"].main

if __name__ == "__main__":
    main()
