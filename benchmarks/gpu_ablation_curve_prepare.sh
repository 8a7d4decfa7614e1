#!/usr/bin/env bash
# Prepare, on a CPU machine, what benchmarks/gpu_ablation_curve.sh needs on a bare GPU machine, in .abl_curve/
# (carried; the whole tree that travels must stay under 64 MiB):
#   .abl_curve/base/         the CPU curve's trained base (output_dir/base/final), weights rounded to fp16 for the
#                            trip (45.8 MB instead of 91.6; the device script widens them back to fp32)
#   .abl_curve/corpus.tgz    the curve's prepared corpus (--dataset_dir), gzipped
#   .abl_curve/pronoun/      the zero-shot pronoun files scored at every point (DPR dev, GAP validation)
# and .whl/ (the wheels of datasets for the device image; benchmarks/gpu_check_prepare.sh makes them).
# Usage (repository root, venv active):
#   bash benchmarks/gpu_ablation_curve_prepare.sh CURVE_DIR/base/final PREPARED_CORPUS_DIR [PRONOUN_FILE ...]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BASE_FINAL_DIR PREPARED_CORPUS_DIR [PRONOUN_FILE ...]" >&2; exit 2; }
base=$1 corpus=$2; shift 2
pronoun=("$@")
[ ${#pronoun[@]} -gt 0 ] || pronoun=(../shared/data/dpr/dpr_dev_small.txt ../shared/data/gap/gap-validation.tsv)
rm -rf .abl_curve && mkdir -p .abl_curve/base .abl_curve/pronoun
python "$(dirname "$0")/cast_weights.py" "$base" .abl_curve/base fp16
tar czf .abl_curve/corpus.tgz -C "$(dirname "$corpus")" --transform "s,^$(basename "$corpus"),corpus," \
    "$(basename "$corpus")"
cp "${pronoun[@]}" .abl_curve/pronoun/
du -sh .abl_curve .abl_curve/* .whl 2>/dev/null || true
