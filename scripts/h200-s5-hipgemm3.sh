#!/usr/bin/env bash
# hipgemm3 device call: the mma GEMM (MXMOE_HIP_GEMM=mma): catalog, bench vs the default, ncu.
# As run on 2026-12-01 with the binary of d5740b6 (docs/h200-2026-12-01s5-hipgemm3); since then
# auto is mma for MXFP4 weights (so "default" below is mma too) and MXMOE_HIP_MMA_WARP is gone.
# Usage (device tool): binary at .dev-hipgemm3/mxmoe; carry [".gl", ".dev-hipgemm3"];
# command: bash .dev-hipgemm3/run.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; S0=$(date +%s); B=.dev-hipgemm3/mxmoe
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
left() { [ $(( $(date +%s) - S0 )) -lt "$1" ]; }
export MXMOE_REQUIRE_HIP=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
timeout 50 $B info > "$O/info.txt" 2>&1; st "info rc=$?"
MXMOE_HIP_GEMM=mma timeout 35 $B check --backend hip --suite full > "$O/check_mma.txt" 2>&1; st "check mma rc=$? $(tail -1 $O/check_mma.txt)"
grep -iE "fail|error" "$O/check_mma.txt" | head -20 | tee -a "$L"
G="--backend hip --shape gpt-oss-120b --iters 5"; D="--backend hip --shape deepseek-r1 --iters 5"
MXMOE_HIP_GEMM=mma timeout 40 $B bench $G --tokens 64,256,2048 > "$O/b_mma_gptoss.log" 2>&1; st "bench mma gpt-oss rc=$?"
left 170 && { timeout 20 $B bench $G --tokens 64,256,2048 --no-check > "$O/b_def_gptoss.log" 2>&1; st "bench default gpt-oss rc=$?"; }
left 170 && { MXMOE_HIP_GEMM=mma timeout 25 $B bench $D --tokens 64,512 > "$O/b_mma_dsr1.log" 2>&1; st "bench mma dsr1 64,512 rc=$?"; }
left 175 && { MXMOE_HIP_GEMM=mma timeout 15 $B bench $D --tokens 2048 --no-check >> "$O/b_mma_dsr1.log" 2>&1; st "bench mma dsr1 2048 rc=$?"; }
left 175 && { timeout 20 $B bench $D --tokens 64,512,2048 --no-check > "$O/b_def_dsr1.log" 2>&1; st "bench default dsr1 rc=$?"; }
left 180 && { MXMOE_HIP_GEMM=mma MXMOE_HIP_MMA_WARP=32 timeout 20 $B bench $G --tokens 2048 > "$O/b_w32.log" 2>&1; st "bench w32 gpt-oss rc=$?"; }
left 185 && { MXMOE_HIP_GEMM=mma MXMOE_HIP_MMA_WARP=32 timeout 12 $B bench $D --tokens 2048 --no-check >> "$O/b_w32.log" 2>&1; st "bench w32 dsr1 rc=$?"; }
grep -hE "M = [0-9]+: (wall|passes)|rel-L2" "$O"/b_*.log | cut -c1-240 | tee -a "$L"
left 175 && { MXMOE_HIP_GEMM=mma MXMOE_HIP_GEMV_PAIRS=0 timeout 25 $B check --backend hip --suite full > "$O/check_mma_pairs0.txt" 2>&1; st "check mma pairs0 rc=$? $(tail -1 $O/check_mma_pairs0.txt)"; grep -iE "fail|error" "$O/check_mma_pairs0.txt" | head -10 | tee -a "$L"; }
if command -v ncu > /dev/null && left 170; then
  S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis"
  MXMOE_HIP_GEMM=mma timeout 25 ncu --kernel-name regex:'moe_gemm' --launch-skip 2 --launch-count 2 $S \
    $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 1 --no-check > "$O/ncu_mma_2048.txt" 2>&1; st "ncu rc=$?"
  grep -hE "^  [a-z_0-9]+\(|^  moe_|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|Executed Ipc" "$O"/ncu_mma_2048.txt | cut -c1-150 | tee -a "$L"
else st "no ncu or no time"; fi
st done
