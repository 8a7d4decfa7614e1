#!/usr/bin/env bash
# Pretraining throughput on a GPU in one short run (<= 8 minutes with loading), on a bare single-GPU machine:
# bench_step (model-only, ours vs BertForMaskedLM); bench_trainer eager with the trainer's defaults
# (--num_workers auto: persistent loader workers, pinned batches in one host-to-device copy) against the
# model-only step on the same batches; bench_trainer with --torch_compile (the repeated encoder layer compiled
# once, its first-step time and graph count) and a torch.profiler table of one compiled step (the top kernels by
# device time); and a 60-step run_mrp with a checkpoint at step 30, killed there and resumed, checked against an
# uninterrupted run. One summary file: $OUT/gpu_check.md (or ./gpu_check_out/gpu_check.md), beside each part's log.
# Prepare first on CPU: bash benchmarks/gpu_check_prepare.sh; then carry .gpu_check and .whl:
#   device run, carry [".gpu_check", ".whl"]: bash benchmarks/gpu_check.sh
# GPU_CHECK_SCALE=smoke runs every part at toy sizes (random 2-layer BERT, batch 2; a CPU check of this script
# that runs end to end in a few minutes; figures meaningless):
#   GPU_CHECK_SCALE=smoke OUT=/tmp/gpu_check_smoke bash benchmarks/gpu_check.sh
# Measured on an H100 80GB (docs/gpu_check.md, with the earlier defaults: no loader workers, the whole model
# compiled): bench_step 30 s, eager 54 s, whole-model compiled over 250 s, resume 95 s; the regional compile's
# first step took 12.3 s on an H200.
set -uo pipefail
out=${OUT:-gpu_check_out}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ! python -c "import datasets" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
scale=${GPU_CHECK_SCALE:-full}
if [ "$scale" = smoke ]; then
    batch=2; steps=6; every=3; bench_args=(--seq_len 64 --steps 2 --warmup 1); model=bert-tiny; blocks=1; cblocks=1
else
    batch=32; steps=60; every=30; bench_args=(--batch_size 32 --steps 20 --warmup 5); model=bert-base; blocks=3; cblocks=2
fi
# Each part's cap in s (bench_step, eager, compiled, resume): GPU_CHECK_CAPS="60 90 150 120"; 0 = none.
read -r -a caps <<< "${GPU_CHECK_CAPS:-0 0 0 0}"
corpus=.gpu_check/corpus512
summary="$out/gpu_check.md"
{
    echo "# gpu_check ($(date -u +%Y-%m-%dT%H:%MZ), scale $scale)"
    python -c "import torch, transformers, accelerate; print('-', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', '| torch', torch.__version__, '| transformers', transformers.__version__, '| accelerate', accelerate.__version__)"
} > "$summary"

part() {  # part NAME CAP COMMAND...: run (stopped after CAP s, so that one slow part leaves the later ones their
    # time; 0 = no cap), keep the log, put its last lines in the summary; a name in GPU_CHECK_SKIP is not run
    local name=$1 cap=$2; shift 2
    case " ${GPU_CHECK_SKIP:-} " in *" $name "*) { echo; echo "## $name (skipped: GPU_CHECK_SKIP)"; } >> "$summary"; return;; esac
    local started=$SECONDS
    # timeout runs the part in a process group of its own, which a caller's group kill (gpu_device_run.sh's
    # GPU_CHECK_BUDGET) does not reach: keep the caps' sum under that budget. Uncapped parts stay in the caller's group.
    if [ "$cap" -gt 0 ]; then timeout -k 10 "$cap" "$@" > "$out/$name.log" 2>&1; else "$@" > "$out/$name.log" 2>&1; fi
    local rc=$?
    { echo; echo "## $name (exit $rc, $((SECONDS - started)) s)"; echo '```'; tail -n 12 "$out/$name.log"; echo '```'; } >> "$summary"
}

part bench_step "${caps[0]:-0}" python benchmarks/bench_step.py "${bench_args[@]}"
part bench_trainer_eager "${caps[1]:-0}" python benchmarks/bench_trainer.py --model $model --tokenizer .gpu_check/tokenizer \
    --dataset_dir $corpus --batch_size $batch --steps $steps --blocks $blocks --output_json "$out/bench_trainer_eager.json"
part bench_trainer_compiled "${caps[2]:-0}" python benchmarks/bench_trainer.py --model $model --tokenizer .gpu_check/tokenizer \
    --dataset_dir $corpus --batch_size $batch --steps $steps --torch_compile --blocks $cblocks \
    --profile_table "$out/profile_compiled_step.txt" --output_json "$out/bench_trainer_compiled.json"
{ echo; echo "## torch.profiler: one compiled trainer step, top operators by own device (CPU: host) time"
  echo '```'; head -n 32 "$out/profile_compiled_step.txt" 2>/dev/null || echo "(no table)"; echo '```'; } >> "$summary"
part resume "${caps[3]:-0}" python benchmarks/resume_check.py --model $model --tokenizer .gpu_check/tokenizer --dataset_dir $corpus \
    --batch_size $batch --steps $steps --checkpointing_steps $every --work /tmp/gpu_check_resume
cat "$summary"
