#!/usr/bin/env bash
# Session 7, routing by warps (MXMOE_HIP_ROUTE=v6, hip/route_warp.h): the HIP catalog with the
# new default, the MoE cases again with every route unfused (MXMOE_HIP_FUSED_ROUTE=0: the
# separate route kernels at one token too) and with v5 (the previous default), then bench on
# both shapes with v6 and v5 in the same call; an ncu pass over the route kernels if time is left.
# Usage (device tool): binary at .dev-hiproute7/mxmoe, this script as .dev-hiproute7/route.sh;
# carry [".dev-hiproute7"]; command: bash .dev-hiproute7/route.sh (~3 minutes).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; O=/tmp/r7/r; mkdir -p "$O" "$OUT"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-hiproute7/mxmoe}"
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
export MXMOE_REQUIRE_HIP=1 CUDA_CACHE_MAXSIZE=4294967296
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$O/info.txt" 2>&1
timeout 80 $B check --backend hip --suite full > "$O/check_hip.txt" 2>&1; st "check hip v6 rc=$? $(tail -1 $O/check_hip.txt | cut -c1-90)"
bench() {  # variant, shape, tokens, timeout, file, extra flags
  MXMOE_HIP_ROUTE=$1 timeout $4 $B bench --backend hip --shape $2 --tokens $3 --iters 20 $6 --json "$O/$5_$1.json" > "$O/$5_$1.log" 2>&1; st "bench $2 $1 rc=$?"
}
bench v6 gpt-oss-120b 1,4,16,256,2048 40 gptoss ""
bench v6 deepseek-r1 1,8,64,2048 45 dsr1 ""
MXMOE_HIP_FUSED_ROUTE=0 timeout 25 $B check --backend hip --suite full --filter moe/ > "$O/check_hip_unfused.txt" 2>&1; st "check hip v6 unfused rc=$? $(tail -1 $O/check_hip_unfused.txt | cut -c1-90)"
MXMOE_HIP_FUSED_ROUTE=1 bench v6 gpt-oss-120b 4,16 15 gptoss_unfused --no-check
bench v5 gpt-oss-120b 1,4,16,256,2048 25 gptoss --no-check
bench v5 deepseek-r1 1,8,64,2048 30 dsr1 --no-check
MXMOE_HIP_ROUTE=v5 timeout 20 $B check --backend hip --suite full > "$O/check_hip_v5.txt" 2>&1; st "check hip v5 rc=$? $(tail -1 $O/check_hip_v5.txt | cut -c1-90)"
grep -h "FAIL" "$O"/check_*.txt | head -10 | cut -c1-200 | tee -a "$L"
grep -h -E "^bench|M = [0-9]+: passes" "$O"/gptoss_v6.log "$O"/gptoss_unfused_v6.log "$O"/gptoss_v5.log "$O"/dsr1_v6.log "$O"/dsr1_v5.log | cut -c1-170 | tee -a "$L"
tar czf "$OUT/route7.tgz" -C /tmp/r7 r; st "tar done"
if [ $(( $(date +%s) - S0 )) -lt 180 ] && command -v ncu > /dev/null; then
  for v in v6; do
    MXMOE_HIP_ROUTE=$v timeout 22 ncu --kernel-name regex:route --launch-skip 20 --launch-count 2 $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 2 --no-check > "$O/ncu_gptoss_$v.txt" 2>&1; st "ncu gpt-oss $v rc=$?"
  done
fi
tar czf "$OUT/route7.tgz" -C /tmp/r7 r; st "tar done"
