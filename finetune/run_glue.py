"""Fine-tune a (Coref)BERT/RoBERTa checkpoint on a GLUE task from the official TSV files.

One CPU or GPU:
    python finetune/run_glue.py --model_name_or_path CKPT --task_name rte --data_dir glue/RTE \
        --do_train --do_eval --output_dir out/rte
N GPUs (or ``ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2`` on CPU):
    accelerate launch finetune/run_glue.py --config my_glue.yaml
Test predictions in the GLUE submission format (``<TASK>.tsv``; MNLI writes MNLI-m.tsv and MNLI-mm.tsv):
    python finetune/run_glue.py --model_name_or_path out/rte/best --task_name rte --data_dir glue/RTE \
        --do_predict --output_dir out/rte-test
"""

from corefbert.tasks.registry import TASKS

main = TASKS["glue"].main

if __name__ == "__main__":
    main()
