#!/usr/bin/env bash
# One device call for both GPU checks of the standing order, inside the call's limit and its 8 returned files:
# benchmarks/gpu_check.sh (capped at GPU_CHECK_BUDGET s, default 330; GPU_CHECK_CAPS / GPU_CHECK_SKIP pass
# through), then the ablation curve (benchmarks/gpu_ablation_curve.sh) with the time left: its training stops
# GPU_CURVE_RESERVE s (default 80) before CALL_LIMIT s (default 545) so that its probes, table and archive still
# come back. Returns $OUT/gpu_check.md, $OUT/gpu_check_logs.tgz, $OUT/ablation_curve.md, $OUT/curve.png,
# $OUT/curve.json, $OUT/ablation_curve.tgz and $OUT/device.log. Prepared on CPU: gpu_check_prepare.sh,
# gpu_ablation_curve_prepare.sh, then `tar czf .gpu_check/corpus512.tgz -C .gpu_check corpus512` (the tree that
# travels is limited to 64 MiB):
#   device run, carry [".gpu_check/corpus512.tgz", ".gpu_check/tokenizer", ".abl_curve", ".whl"]:
#     bash benchmarks/gpu_device_run.sh
# (Until 2026-11-27 the second part was the single-point study, benchmarks/gpu_ablation.sh; docs/gpu_check.md.)
set -uo pipefail
out=${OUT:-gpu_device_out}
mkdir -p "$out" /tmp/gpu_check_out
exec > >(tee "$out/device.log") 2>&1
if ! command -v python > /dev/null; then  # the image names its interpreter python3 only
    mkdir -p /tmp/bin && ln -sf "$(command -v python3)" /tmp/bin/python && export PATH=/tmp/bin:$PATH
fi
capped() {  # capped SECONDS COMMAND...: stop the command *and its children* after SECONDS (timeout alone would
    # stop the shell script and leave its python running on the GPU beside the next part)
    local seconds=$1; shift
    setsid "$@" & local group=$!
    ( sleep "$seconds"; kill -TERM -- -"$group" 2> /dev/null ) & local watchdog=$!
    wait "$group"; local status=$?
    kill "$watchdog" 2> /dev/null
    return $status
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
[ -d .gpu_check/corpus512 ] || tar xzf .gpu_check/corpus512.tgz -C .gpu_check
OUT=/tmp/gpu_check_out capped "${GPU_CHECK_BUDGET:-330}" bash benchmarks/gpu_check.sh
echo "gpu_check: exit $? after $SECONDS s"
cp /tmp/gpu_check_out/gpu_check.md "$out/" 2>/dev/null
tar czf "$out/gpu_check_logs.tgz" -C /tmp gpu_check_out
left=$(( ${CALL_LIMIT:-545} - SECONDS ))
OUT=$out GPU_CURVE_BUDGET=$(( left - ${GPU_CURVE_RESERVE:-80} )) capped "$left" bash benchmarks/gpu_ablation_curve.sh
echo "gpu_ablation_curve: exit $? after $SECONDS s"
