#!/usr/bin/env bash
# The ablation curve on one GPU, in one device call of under 9 minutes: CorefBERT, MRM and WWM, two pretraining seeds
# each, continue the CPU curve's trained base to 30M non-padding tokens per arm, the points (3M and 30M) annealed
# (each a cooldown branch off the constant-LR trunk, --curve_cooldown 0.2), six run_ablation processes side by side
# on the one GPU, every probe of the curve at every point: held-out MLM and the same-candidate mention recovery,
# zero-shot DPR and GAP by the MLM head, the copy head and the copy head with V untrained, the frozen probe at every
# layer; at the last point and the start also eq. 5 on GAP (development -> validation, two fine-tuning seeds) and
# end-to-end coreference on the LitBank split. The sizing is in docs/guides/ablation.md ("The curve on a GPU").
# Checkpoints and point weights stay on the device; what comes back: $OUT/ablation_curve.md (curve.md, the exits and
# each run's throughput), $OUT/curve.png, $OUT/curve.json and $OUT/ablation_curve.tgz (logs, point records, probe
# results; no weights).
# Prepare first on CPU: bash benchmarks/gpu_ablation_curve_prepare.sh ...; carry .abl_curve and .whl:
#   device run, carry [".abl_curve", ".whl"]:  bash benchmarks/gpu_ablation_curve.sh
# GPU_CURVE_BUDGET=S stops the processes after S seconds (default 480; SIGTERM saves a checkpoint), so the table of
# what finished still comes back inside the call; rerunning the script on the same warm machine continues the curve
# (same $GPU_CURVE_WORK). GPU_CURVE_POINTS replaces the point list, GPU_CURVE_ARMS the arms (default corefbert mrm
# wwm), GPU_CURVE_SEEDS the seeds (default 42 43).
# GPU_CURVE_SCALE=smoke: a CPU check of this script (tiny points, batch 4, fp32; figures meaningless);
# GPU_CURVE_INPUTS=DIR replaces .abl_curve (the tests give a tiny model and corpus there).
set -uo pipefail
out=${OUT:-gpu_curve_out}
work=${GPU_CURVE_WORK:-/tmp/ablation_curve}
inputs=${GPU_CURVE_INPUTS:-.abl_curve}
mkdir -p "$out" "$work/logs"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ! command -v python > /dev/null; then  # the device image names its interpreter python3 only
    mkdir -p /tmp/bin && ln -sf "$(command -v python3)" /tmp/bin/python && export PATH=/tmp/bin:$PATH
fi
if ! python -c "import datasets" 2>/dev/null; then
    python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
if [ "${GPU_CURVE_SCALE:-full}" = smoke ]; then
    points=${GPU_CURVE_POINTS:-200,400}
    scale=(--per_device_train_batch_size 4 --per_device_eval_batch_size 8 --mixed_precision no --num_workers 0
           --eval_steps 2 --checkpointing_steps 2 --logging_steps 1 --max_eval_samples 6 --probe_sequences 6
           --curve_warmup_steps 0 --bootstrap_samples 100 --finetune_max_steps 1 --finetune_batch_size 2
           --coref_e2e_max_steps 2)
else
    # 256 rows of 128 (~31k non-padding tokens) a step: 30M tokens are ~970 steps (the 3M point branches off step
    # 78, the 30M point off 774). bf16; workers keep the masking (Python, per row) off the GPU's critical path;
    # evaluations and periodic saves are rare (every segment still ends in a checkpoint). The frozen probe's
    # classifiers fit on the CPU: 40k training pairs a layer keep six processes' fits within the call.
    points=${GPU_CURVE_POINTS:-3M,30M}
    scale=(--per_device_train_batch_size 256 --per_device_eval_batch_size 128 --mixed_precision bf16
           --num_workers 2 --eval_steps 1000 --checkpointing_steps 1000 --logging_steps 20 --max_eval_samples 256
           --finetune_max_steps 125 --finetune_batch_size 16 --frozen_max_train_pairs 40000)
fi
[ -d "$work/corpus" ] || tar xzf "$inputs/corpus.tgz" -C "$work"
[ -d "$work/litbank" ] || tar xzf "$inputs/litbank.tgz" -C "$work"
[ -d "$work/base" ] || python benchmarks/cast_weights.py "$inputs/base" "$work/base" fp32
python - "$work/litbank" > "$work/split.yaml" <<'PY'
import sys
from pathlib import Path
import yaml
root = Path(sys.argv[1])
print(yaml.safe_dump({f"{part}_file": sorted(str(p) for p in (root / part).glob("*")) for part in
                      ("train", "validation", "test")}))
PY
gap_dev=$(ls "$inputs"/finetune/* | head -n 1)
gap_val=$(ls "$inputs"/pronoun/* | grep -i gap | head -n 1)
common=(--preset cpu --dataset_dir "$work/corpus" --model_name_or_path "$work/base" --base_mlm_steps 0 --seeds 1
        --output_dir "$work/curve" --curve_tokens "$points" --curve_cooldown 0.2 --zero_shot_file "$inputs"/pronoun/*
        --finetune "$gap_dev=$gap_val" --finetune_seeds 2 --coref_split_config "$work/split.yaml"
        --no_curve_default_zero_shot "${scale[@]}")
arms=(${GPU_CURVE_ARMS:-corefbert mrm wwm})
seeds=(${GPU_CURVE_SEEDS:-42 43})
started=$SECONDS
for seed in "${seeds[@]}"; do
    for arm in "${arms[@]}"; do  # one process per arm and seed; the first arm of each seed probes its start
        skip=(); [ "$arm" = "${arms[0]}" ] || skip=(--skip_backbone)
        ( timeout "${GPU_CURVE_BUDGET:-480}" python pretrain/run_ablation.py "${common[@]}" --seed "$seed" \
              --arms "$arm" "${skip[@]}" > "$work/logs/${arm}_$seed.log" 2>&1
          echo "$arm, seed $seed: exit $? after $((SECONDS - started)) s" >> "$work/logs/exits.txt" ) &
    done
done
wait
trained=$((SECONDS - started))
python pretrain/run_ablation.py "${common[@]}" --seed "${seeds[0]}" --seeds "${#seeds[@]}" \
    --arms "$(IFS=,; echo "${arms[*]}")" --collect_only > "$work/logs/collect.log" 2>&1
{
    echo "# gpu_ablation_curve ($(date -u +%Y-%m-%dT%H:%MZ), scale ${GPU_CURVE_SCALE:-full}; ${#arms[@]} arms x ${#seeds[@]} seeds side by side in $trained s)"
    python -c "import torch; print('-', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', '| torch', torch.__version__)"
    cat "$work/logs/exits.txt"
    # Throughput as each trunk logged it (tokens/s of its last records, MFU where the card is known).
    for seed in "${seeds[@]}"; do
        for arm in "${arms[@]}"; do
            tail -n 40 "$work/curve/$arm/seed_$seed/log.jsonl" 2>/dev/null | python -c "
import json, sys
rows = [json.loads(l) for l in sys.stdin if '\"train\"' in l]
if rows:
    r = rows[-1]
    print(f'- $arm, seed $seed: trunk step {r[\"step\"]}, {r.get(\"tokens\", 0):,} tokens, {r.get(\"tokens_per_s\", 0):,.0f} tokens/s, MFU {r.get(\"mfu\", \"?\")}')
"
        done
    done
    echo
    cat "$work/curve/curve.md" 2>/dev/null || tail -n 5 "$work/logs/collect.log"
} > "$out/ablation_curve.md"
cp "$work/curve/curve.json" "$work/curve/curve.png" "$out/" 2>/dev/null
tar czf "$out/ablation_curve.tgz" -C "$work" --exclude=final --exclude=checkpoints --exclude='*.safetensors' \
    --exclude='*.bin' --exclude='*.pt' --exclude='tokenizer*' --exclude=vocab.txt --exclude=special_tokens_map.json \
    --exclude=corpus --exclude=base --exclude=litbank logs curve
cat "$out/ablation_curve.md"
