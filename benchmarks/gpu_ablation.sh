#!/usr/bin/env bash
# The ablation's GPU run from the CPU study's trained base, in one short run. BERT-base's
# trained weights cannot reach the GPU machine (no hub), so the GPU preset proper waits; this runs what the
# CPU cannot afford in a few hours, on the same base, corpus, held-out masks and QUOREF probe as the CPU preset:
#   long/       the >= 1M-token pair: corefbert and wwm, seed 42, 1,200 steps of 8 x 128 (4x the CPU preset),
#               evaluated every 200 steps; its start rows are ratio_1's (the same base and probes)
#   ratio_1/    the CPU preset's seed 42 (corefbert, wwm; 300 steps) on this GPU (a device-to-device check)
#   ratio_0.5/  corefbert at MRP : MLM = 1 : 2 (--mrp_loss_weight 0.5), and ratio_2/ at 2 : 1; each also holds a
#               copy of ratio_1's wwm and start rows so its table has the paired CI against WWM
# Six processes share the GPU (MiniLM at batch 8 is launch-bound, not compute-bound). Every study is written as
# study.md/json; the lot comes back as $OUT/ablation_gpu.tgz (no weights) beside $OUT/ablation_gpu.md.
# Prepare first on CPU: bash benchmarks/gpu_ablation_prepare.sh ...; carry .abl_gpu and .whl.
# GPU_ABLATION_BUDGET=S stops the training processes after S seconds (default 360), so the tables of what finished
# and the archive still come back inside the call's limit; a stopped run is listed with exit 124.
# GPU_ABLATION_SCALE=smoke: a few steps of each (a CPU check of this script; figures meaningless).
set -uo pipefail
out=${OUT:-gpu_ablation_out}
work=${GPU_ABLATION_WORK:-/tmp/ablation_gpu}
mkdir -p "$out" "$work/logs"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ! python -c "import datasets" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
if [ "${GPU_ABLATION_SCALE:-full}" = smoke ]; then
    long=4; short=2; extra=(--quoref_max_steps 2 --eval_steps 2 --checkpointing_steps 2 --probe_sequences 8)
else
    long=1200; short=300; extra=()
fi
[ -d "$work/corpus" ] || tar xzf .abl_gpu/corpus.tgz -C "$work"
python benchmarks/cast_weights.py .abl_gpu/base "$work/base" fp32
common=(--preset cpu --dataset_dir "$work/corpus" --model_name_or_path "$work/base" --base_mlm_steps 0 --seeds 1
        --quoref_train_file .abl_gpu/quoref/train.json --quoref_validation_file .abl_gpu/quoref/dev.json "${extra[@]}")
study() {  # study LOG_NAME FLAGS...: one run_ablation process, its log kept
    local name=$1; shift
    timeout "${GPU_ABLATION_BUDGET:-360}" python pretrain/run_ablation.py "${common[@]}" "$@" \
        > "$work/logs/$name.log" 2>&1
    echo "$name: exit $?" >> "$work/logs/exits.txt"
}
started=$SECONDS
# The long pair evaluates and saves less often (its curve needs no more points); its start rows come from ratio_1.
long_flags=(--max_steps $long --skip_backbone); [ "$long" -ge 400 ] && long_flags+=(--eval_steps 200 --checkpointing_steps 600)
study long_corefbert --output_dir "$work/long" --arms corefbert "${long_flags[@]}" &
study long_wwm --output_dir "$work/long" --arms wwm "${long_flags[@]}" &
study ratio_1_corefbert --output_dir "$work/ratio_1" --arms corefbert --max_steps $short &
study ratio_1_wwm --output_dir "$work/ratio_1" --arms wwm --max_steps $short --skip_backbone &
study ratio_0.5 --output_dir "$work/ratio_0.5" --arms corefbert --max_steps $short --mrp_loss_weight 0.5 --skip_backbone &
study ratio_2 --output_dir "$work/ratio_2" --arms corefbert --max_steps $short --mrp_loss_weight 2 --skip_backbone &
wait
trained=$((SECONDS - started))
# Tables with the paired CI against WWM: every study folder gets ratio_1's wwm and start rows where it lacks them.
for weight in 0.5 2; do
    for folder in wwm backbone; do
        [ -d "$work/ratio_$weight/$folder" ] || cp -r "$work/ratio_1/$folder" "$work/ratio_$weight/$folder"
    done
done
[ -d "$work/long/backbone" ] || cp -r "$work/ratio_1/backbone" "$work/long/backbone"
{
    echo "# gpu_ablation ($(date -u +%Y-%m-%dT%H:%MZ), scale ${GPU_ABLATION_SCALE:-full}; six studies side by side in $trained s)"
    python -c "import torch; print('-', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', '| torch', torch.__version__)"
    cat "$work/logs/exits.txt"
} > "$out/ablation_gpu.md"
for name in long:$long ratio_1:$short ratio_0.5:$short ratio_2:$short; do
    folder=${name%%:*} steps=${name##*:}
    weight=1; [ "$folder" = ratio_0.5 ] && weight=0.5; [ "$folder" = ratio_2 ] && weight=2
    python pretrain/run_ablation.py "${common[@]}" --output_dir "$work/$folder" --arms corefbert,wwm \
        --max_steps "$steps" --mrp_loss_weight $weight --collect_only > "$work/logs/collect_$folder.log" 2>&1
    { echo; echo "## $folder"; cat "$work/$folder/study.md" 2>/dev/null || tail -n 5 "$work/logs/collect_$folder.log"; } \
        >> "$out/ablation_gpu.md"
done
tar czf "$out/ablation_gpu.tgz" -C "$work" --exclude=final --exclude=checkpoints --exclude='*.safetensors' \
    --exclude=corpus --exclude=base logs long ratio_1 ratio_0.5 ratio_2
cat "$out/ablation_gpu.md"
