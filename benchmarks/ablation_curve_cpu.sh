#!/usr/bin/env bash
# The ablation curve on a 2-core CPU machine: the three arms (CorefBERT, MRM, WWM) from the CPU preset's trained base
# (2,000 steps of whole-word MLM), annealed points (each a cooldown branch off the constant-LR trunk), every probe at
# every point; one process of one thread per seed (seeds 42, 43, ...), all on one output folder. The first seed's
# process trains the shared base; the others wait for it (--base_seed: every seed continues the same base).
# Usage (repository root, venv active; takes hours, so under nohup):
#   nohup bash benchmarks/ablation_curve_cpu.sh PREPARED_CORPUS OUTPUT_DIR [POINTS] [SEEDS] [FLAGS...] > LOG 2>&1 &
# Resume after a kill (or a new working day): the same command. Extend: the same command with a longer POINTS
# (e.g. 1M,3M,10M): the trunks continue from their last fork. FLAGS go to every process (e.g. --curve_slow_probes
# all). Each process logs to OUTPUT_DIR/logs/seed_<seed>.log; when all have ended, one --collect_only writes
# OUTPUT_DIR/curve.md, curve.json and curve.png over every seed.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PREPARED_CORPUS OUTPUT_DIR [POINTS] [SEEDS] [FLAGS...]" >&2; exit 2; }
data=$1 out=$2 points=${3:-1M,3M} seeds=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
mkdir -p "$out/logs"
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
common=(--preset cpu --dataset_dir "$data" --output_dir "$out" --curve_tokens "$points" --disable_tqdm true
        --base_seed 42 --seeds 1 "$@")
curve() {  # curve SEED: one run_ablation process, every arm of one seed
    python pretrain/run_ablation.py "${common[@]}" --seed "$1" >> "$out/logs/seed_$1.log" 2>&1
    echo "$(date -u +%FT%TZ) seed $1: exit $?" >> "$out/logs/exits.txt"
}
curve 42 &
for ((k = 1; k < seeds; k++)); do
    (
        until [ -f "$out/base/ablation_run.json" ]; do sleep 60; done  # the base's record: written when it finished
        curve $((42 + k))
    ) &
done
wait
python pretrain/run_ablation.py "${common[@]}" --seed 42 --seeds "$seeds" --collect_only >> "$out/logs/collect.log" 2>&1
