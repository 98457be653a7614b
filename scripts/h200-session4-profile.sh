#!/usr/bin/env bash
# Session 4, profile call (HIP backend through the CUDA driver; ncu cannot see Vulkan kernels):
# Nsight Compute on the default decode kernels at 1 and 16 gpt-oss tokens and on the middle-range
# GEMM at 256 tokens, plus the GEMV forced at 32 and 64 tokens (is the crossover still right with
# the v3 GEMV?). Usage (device tool): binary at .dev-main/mxmoe, this script as
# .dev-main/profile.sh; carry [".dev-main"]; command: bash .dev-main/profile.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; S0=$(date +%s); B=.dev-main/mxmoe
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
export MXMOE_REQUIRE_HIP=1
$B info > /dev/null 2>&1; st "info (JIT) rc=$?"
MXMOE_HIP_MOE_PATH=gemv timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 32,64 --iters 20 > "$O/forced_gemv.log" 2>&1; st "forced gemv rc=$?"
timeout 30 $B bench --backend hip --shape gpt-oss-120b --tokens 32 --iters 20 --no-check >> "$O/forced_gemv.log" 2>&1; st "default at 32 rc=$?"
if command -v ncu > /dev/null; then
  S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis"
  timeout 70 ncu --kernel-name regex:'moe_' --launch-skip 9 --launch-count 3 $S \
    $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 8 --no-check > "$O/ncu_1tok.txt" 2>&1; st "ncu 1 token rc=$?"
  timeout 70 ncu --kernel-name regex:'moe_' --launch-skip 12 --launch-count 4 $S \
    $B bench --backend hip --shape gpt-oss-120b --tokens 16 --iters 8 --no-check > "$O/ncu_16tok.txt" 2>&1; st "ncu 16 tokens rc=$?"
  timeout 70 ncu --kernel-name regex:'moe_gemm' --launch-skip 2 --launch-count 2 $S \
    $B bench --backend hip --shape gpt-oss-120b --tokens 256 --iters 4 --no-check > "$O/ncu_256tok.txt" 2>&1; st "ncu 256 tokens rc=$?"
  grep -hE "^  [a-z_0-9]+\(|^  moe_|Duration|DRAM Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Grid Size|Waves Per SM" "$O"/ncu_*.txt | cut -c1-150
else st "no ncu"; fi
grep -hE "M = [0-9]+: (wall|passes)" "$O/forced_gemv.log" | cut -c1-170
