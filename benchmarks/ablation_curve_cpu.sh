#!/usr/bin/env bash
# The ablation curve on a 2-core CPU machine (issue 35): one seed, the three arms from the CPU preset's trained
# base (2,000 steps of whole-word MLM), points 0.3M, 1M and 3M non-padding tokens per arm, every point probed
# (held-out repeated mentions / other words, zero-shot DPR and GAP with the MLM head and the copy head).
# Two processes, one thread each: CorefBERT in one; WWM then MRM in the other (CorefBERT - WWM, the contrast that
# matters most, finishes point by point first). The second waits for the first to finish the shared base.
# Usage (repository root, venv active; takes hours, so under nohup):
#   nohup bash benchmarks/ablation_curve_cpu.sh PREPARED_CORPUS OUTPUT_DIR [POINTS] > OUTPUT_DIR.log 2>&1 &
# Resume after a kill (or a new working day): the same command. Extend: the same command with a longer POINTS
# (e.g. 0.3M,1M,3M,10M): the runs continue from their last point. Each process logs to OUTPUT_DIR/logs/<arm>.log;
# OUTPUT_DIR/curve.md and curve.png are rewritten after every point.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PREPARED_CORPUS OUTPUT_DIR [POINTS]" >&2; exit 2; }
data=$1 out=$2 points=${3:-0.3M,1M,3M}
mkdir -p "$out/logs"
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
curve() {  # curve LOG FLAGS...: one run_ablation process of the curve
    local log=$1; shift
    python pretrain/run_ablation.py --preset cpu --seeds 1 --dataset_dir "$data" --output_dir "$out" \
        --curve_tokens "$points" --disable_tqdm true "$@" >> "$out/logs/$log.log" 2>&1
    echo "$(date -u +%FT%TZ) $log: exit $?" >> "$out/logs/exits.txt"
}
curve corefbert --arms corefbert &
(
    until [ -f "$out/base/ablation_run.json" ]; do sleep 60; done  # the base's record: written when it finished
    curve wwm --arms wwm --skip_backbone
    curve mrm --arms mrm --skip_backbone
) &
wait
