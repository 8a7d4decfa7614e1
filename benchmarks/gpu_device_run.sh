#!/usr/bin/env bash
# One device call for both GPU checks, inside its 10-minute limit and its 8 returned files:
# benchmarks/gpu_check.sh (capped at GPU_CHECK_BUDGET s, default 330), then benchmarks/gpu_ablation.sh with the
# time left (its training stops GPU_ABLATION_RESERVE s, default 90, before CALL_LIMIT s, default 575, to write
# its tables). Returns $OUT/gpu_check.md, $OUT/gpu_check_logs.tgz, $OUT/ablation_gpu.md, $OUT/ablation_gpu.tgz,
# $OUT/device.log. Prepared on CPU: gpu_check_prepare.sh, gpu_ablation_prepare.sh, then
# `tar czf .gpu_check/corpus512.tgz -C .gpu_check corpus512` (the tree that travels is limited to 64 MiB):
#   device run, carry [".gpu_check/corpus512.tgz", ".gpu_check/tokenizer", ".abl_gpu", ".whl"]:
#     bash benchmarks/gpu_device_run.sh
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
left=$(( ${CALL_LIMIT:-575} - SECONDS ))
OUT=$out GPU_ABLATION_BUDGET=$(( left - ${GPU_ABLATION_RESERVE:-90} )) capped "$left" bash benchmarks/gpu_ablation.sh
echo "gpu_ablation: exit $? after $SECONDS s"
