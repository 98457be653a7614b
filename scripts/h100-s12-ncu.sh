#!/usr/bin/env bash
# Session 12, second call: the wgmma GEMM's catalog after the block-wide decode choice, then
# Nsight Compute on one gemm1 launch of each GEMM (DeepSeek-R1 2048 tokens: t64; gpt-oss-120b
# 2048 tokens: t64 split), to see where the step time goes. Results in $OUT/ncu.tgz.
# Usage (device tool): .dev-main/s12/mxmoe.gz; carry [".gl", ".dev-main/s12"];
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash scripts/h100-s12-ncu.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; W=/tmp/ncu; mkdir -p "$O" $W; S0=$(date +%s); BUDGET="${BUDGET:-500}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
pack() { (cd $W && tar czf "$O/ncu.tgz" .); }
L="$W/steps.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$W/gpu.txt"
gunzip -c .dev-main/s12/mxmoe.gz > /tmp/mxmoe; chmod +x /tmp/mxmoe; B=/tmp/mxmoe
export MXMOE_REQUIRE_HIP=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" | tee -a "$L"
MXMOE_HIP_MMA_VARIANT=wg MXMOE_HIP_GEMV_PAIRS=0 timeout 150 $B check --backend hip --suite full --filter moe/ > "$W/check_wg.txt" 2>&1
echo "$(el)s wg GEMM forced rc=$? $(tail -1 $W/check_wg.txt | cut -c1-160)" | tee -a "$L"; pack
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis"
prof() { # name variant shape kernel-regex
  left 70 || return
  MXMOE_HIP_MMA_VARIANT=$2 timeout 120 $NCU -k "regex:$4" --launch-skip 2 --launch-count 1 $SEC \
    $B bench --backend hip --shape $3 --tokens 2048 --iters 2 --no-check > "$W/ncu_$1.txt" 2>&1
  echo "$(el)s ncu $1 rc=$?" | tee -a "$L"; pack
}
prof ds_wg wg deepseek-r1 'moe_gemm1_mma_t64_wg_cb4'
prof ds_mma "" deepseek-r1 'moe_gemm1_mma_t64_cb4'
prof go_wg wg gpt-oss-120b 'moe_gemm1_mma_t64_split_wg_cb4'
prof go_mma "" gpt-oss-120b 'moe_gemm1_mma_t64_split_v0_cb4'
pack
