#!/usr/bin/env bash
# Session 6, helper wgpu6 (issue 8): the wgpu forward's host path (inputs through a kept,
# mapped upload buffer; one compute pass per untimed forward; bind groups kept) and kernel
# k64pw as the cooperative GEMM's default, in ONE device call:
#   1. the forced-GEMM catalog with k64pw (every MoE case over 4 tokens through the GEMM)
#   2. bench gpt-oss-120b 1,4,64,2048: new binary, then the old one (branch base 290ffa4),
#      both with MXMOE_HOST_PROFILE (host steps and the round trip of a minimal submission)
#   3. the full catalog with the new defaults
#   4. bench DeepSeek-R1 1,2048 (new), gpt-oss 2048 with MXMOE_COOP_KERNEL=k64 (new binary),
#      DeepSeek-R1 1,2048 (old) while the budget lasts
# Usage (device tool): binaries at .dev-wgpu6/mxmoe (new) and .dev-wgpu6/mxmoe.old, this script
# at .dev-wgpu6/run.sh; carry [".gl", ".dev-wgpu6"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-wgpu6/run.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O/r"; R="$O/r"; S0=$(date +%s)
N=.dev-wgpu6/mxmoe; OLD=.dev-wgpu6/mxmoe.old; BUDGET="${BUDGET:-205}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/steps.txt"; el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$L"; }
left() { [ $(( BUDGET - $(el) )) -ge "$1" ]; }
rows() { grep -h -E "^ +[0-9]+ +[0-9.]+ " "$1" | cut -c1-120 | tr -s ' ' | tr '\n' ';'; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; lscpu | grep -m1 "Model name"; $N info; } > "$R/info.txt" 2>&1
st "info rc=$? $(grep -m1 'prefill GEMM' $R/info.txt | cut -c1-200)"
left 60 && { MXMOE_COOP_KERNEL=k64pw MXMOE_GEMV_PAIRS=0 timeout 70 $N check --backend wgpu --suite full --filter moe/ > "$R/check_forced_gemm_k64pw.txt" 2>&1; st "check moe/ forced GEMM k64pw rc=$? $(tail -1 $R/check_forced_gemm_k64pw.txt)"; }
bench() { # name bin shape tokens timeout [env...]
  local n=$1 bin=$2 shape=$3 tok=$4 to=$5; shift 5
  env "$@" MXMOE_HOST_PROFILE=200 timeout "$to" $bin bench --backend wgpu --shape "$shape" --tokens "$tok" --iters 20 --json "$R/bench_$n.json" > "$R/bench_$n.log" 2>&1
  st "bench $n rc=$? $(rows $R/bench_$n.log)"
}
left 30 && bench gptoss_new $N gpt-oss-120b 1,4,64,2048 40
left 30 && bench gptoss_old $OLD gpt-oss-120b 1,4,64,2048 40
left 30 && { timeout 45 $N check --backend wgpu --suite full > "$R/check_full.txt" 2>&1; st "check full (new defaults) rc=$? $(tail -1 $R/check_full.txt)"; }
left 30 && bench dsr1_new $N deepseek-r1 1,2048 40
left 12 && bench gptoss2048_k64_new $N gpt-oss-120b 2048 15 MXMOE_COOP_KERNEL=k64
left 25 && bench dsr1_old $OLD deepseek-r1 1,2048 $(( BUDGET - $(el) ))
st done
tar czf "$O/results.tgz" -C "$O" r steps.txt
