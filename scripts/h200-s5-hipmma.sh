#!/usr/bin/env bash
# Session 5, hipmma: the matrix-core GEMV (MXMOE_HIP_GEMV=mma|mmapf, hip/gemv_mma.h) on the H200
# through the HIP backend: the full catalog with the GEMV forced on every MoE case
# (MXMOE_HIP_GEMV_PAIRS=1000), bench beside the default paths (v3 GEMV, v2/v1 GEMM) on both shapes
# with the GEMV forced up to 256 / 64 tokens, the GEMV at 2048 / 512 tokens (crossover), and ncu
# on the mma kernels at 1 and 16 tokens. Steps in priority order; results in $OUT as they come.
# QUICK=1: the catalog and the mma / mmapf benches only (~90 s).
# Usage (device tool): binary at .dev-hipmma/mxmoe, this script as .dev-hipmma/run.sh; carry
# [".dev-hipmma"] (HIP through libcuda needs no Vulkan packages); command: bash .dev-hipmma/run.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; S0=$(date +%s); B=.dev-hipmma/mxmoe
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
export MXMOE_REQUIRE_HIP=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$O/gpu.txt" 2>&1
timeout 60 $B info > "$O/info.txt" 2>&1; st "info (JIT) rc=$?"
F="MXMOE_HIP_GEMV_PAIRS=1000"
env MXMOE_HIP_GEMV=mma $F timeout 25 $B check --backend hip --suite full > "$O/check_mma.txt" 2>&1; st "check mma forced rc=$? $(tail -1 $O/check_mma.txt | cut -c1-90)"
G="--shape gpt-oss-120b --tokens 1,4,16,64,256 --iters 20"
D="--shape deepseek-r1 --tokens 1,8,64 --iters 20"
if [ "${QUICK:-0}" = 1 ]; then
  # ~90 s: the catalog and the mma / mmapf benches only (the defaults: docs/h200-2026-12-01-session4).
  env MXMOE_HIP_GEMV=mma $F timeout 25 $B bench --backend hip $G --json "$O/mma_gptoss.json" > "$O/mma_gptoss.log" 2>&1; st "bench mma gpt-oss rc=$?"
  env MXMOE_HIP_GEMV=mma $F timeout 20 $B bench --backend hip $D --json "$O/mma_dsr1.json" > "$O/mma_dsr1.log" 2>&1; st "bench mma dsr1 rc=$?"
  env MXMOE_HIP_GEMV=mmapf $F timeout 20 $B bench --backend hip --shape gpt-oss-120b --tokens 1,16,256 --iters 20 > "$O/mmapf_gptoss.log" 2>&1; st "bench mmapf gpt-oss rc=$?"
  grep -hE "M = [0-9]+: (wall|passes)|rel-L2 vs cpu" "$O"/*.log | cut -c1-200 >> "$L"
  exit 0
fi
env MXMOE_HIP_GEMV=mma $F timeout 25 $B bench --backend hip $G --json "$O/mma_gptoss.json" > "$O/mma_gptoss.log" 2>&1; st "bench mma gpt-oss rc=$?"
timeout 25 $B bench --backend hip $G --json "$O/default_gptoss.json" > "$O/default_gptoss.log" 2>&1; st "bench default gpt-oss rc=$?"
env MXMOE_HIP_GEMV=mma $F timeout 20 $B bench --backend hip $D --json "$O/mma_dsr1.json" > "$O/mma_dsr1.log" 2>&1; st "bench mma dsr1 rc=$?"
timeout 20 $B bench --backend hip $D --json "$O/default_dsr1.json" > "$O/default_dsr1.log" 2>&1; st "bench default dsr1 rc=$?"
env MXMOE_HIP_GEMV=mmapf $F timeout 25 $B check --backend hip --suite full > "$O/check_mmapf.txt" 2>&1; st "check mmapf forced rc=$? $(tail -1 $O/check_mmapf.txt | cut -c1-90)"
grep -h "FAIL" "$O"/check_*.txt | head -20 | cut -c1-200 | tee -a "$L"
env MXMOE_HIP_GEMV=mmapf $F timeout 25 $B bench --backend hip $G --json "$O/mmapf_gptoss.json" > "$O/mmapf_gptoss.log" 2>&1; st "bench mmapf gpt-oss rc=$?"
env MXMOE_HIP_GEMV=mmapf $F timeout 20 $B bench --backend hip $D --json "$O/mmapf_dsr1.json" > "$O/mmapf_dsr1.log" 2>&1; st "bench mmapf dsr1 rc=$?"
env MXMOE_HIP_GEMV=mma $F timeout 20 $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 10 > "$O/mma_big.log" 2>&1; st "mma gpt-oss 2048 rc=$?"
env MXMOE_HIP_GEMV=mma $F timeout 20 $B bench --backend hip --shape deepseek-r1 --tokens 512 --iters 10 >> "$O/mma_big.log" 2>&1; st "mma dsr1 512 rc=$?"
grep -hE "M = [0-9]+: (wall|passes)|rel-L2 vs cpu" "$O"/*.log | cut -c1-200 >> "$L"
if command -v ncu > /dev/null; then
  S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis"
  MXMOE_HIP_GEMV=mma timeout 25 ncu --kernel-name regex:'moe_gemv' --launch-skip 10 --launch-count 2 $S \
    $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 4 --no-check > "$O/ncu_1tok.txt" 2>&1; st "ncu 1 token rc=$?"
  MXMOE_HIP_GEMV=mma timeout 25 ncu --kernel-name regex:'moe_gemv' --launch-skip 10 --launch-count 2 $S \
    $B bench --backend hip --shape gpt-oss-120b --tokens 16 --iters 4 --no-check > "$O/ncu_16tok.txt" 2>&1; st "ncu 16 tokens rc=$?"
else st "no ncu"; fi
