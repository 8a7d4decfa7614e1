#!/usr/bin/env bash
# Prepare, on a CPU machine, what benchmarks/gpu_ablation.sh needs on a bare GPU machine, in .abl_gpu/ (carried;
# the whole tree that travels must stay under 64 MiB, so the two big pieces are shrunk losslessly or nearly):
#   .abl_gpu/base/          the CPU study's trained base (output_dir/base/final), weights rounded to fp16 for the
#                           trip (45.8 MB instead of 91.6; gpu_ablation.sh widens them back to fp32 before use)
#   .abl_gpu/corpus.tgz     the study's prepared corpus (--dataset_dir), gzipped (25 MB of arrow -> ~6 MB)
#   .abl_gpu/quoref/        the QUOREF probe's train and dev files
# Usage (repository root, venv active):
#   bash benchmarks/gpu_ablation_prepare.sh STUDY_DIR/base/final PREPARED_CORPUS_DIR QUOREF_TRAIN QUOREF_DEV
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: $0 BASE_FINAL_DIR PREPARED_CORPUS_DIR QUOREF_TRAIN QUOREF_DEV" >&2; exit 2; }
base=$1 corpus=$2 quoref_train=$3 quoref_dev=$4
rm -rf .abl_gpu && mkdir -p .abl_gpu/base .abl_gpu/quoref
python benchmarks/cast_weights.py "$base" .abl_gpu/base fp16
tar czf .abl_gpu/corpus.tgz -C "$(dirname "$corpus")" --transform "s,^$(basename "$corpus"),corpus," "$(basename "$corpus")"
cp "$quoref_train" .abl_gpu/quoref/train.json
cp "$quoref_dev" .abl_gpu/quoref/dev.json
du -sh .abl_gpu .abl_gpu/*
