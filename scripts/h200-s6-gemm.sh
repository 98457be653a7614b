#!/usr/bin/env bash
# hipgemm6 device call (session 6): the mma GEMM's new default (unguarded pair groups for whole
# warps, lo MMAs skipped for tiles of bf16-representable activations) against session 5's kernel
# (MXMOE_HIP_MMA_VARIANT=v0), same call: the HIP catalog,
# the moe/ cases with the GEMM forced, bench on both shapes, an ncu of the GEMMs.
# Run on 2026-12-01 with the binary of 0ce24ce (docs/h200-2026-12-01s6-gemm), which also had three
# more steps for the `d3` variant (gpt-oss 64,256, DeepSeek 64,512 and check moe/ with the GEMM
# forced), removed here with the variant; since then split 32 / 64-pair tiles run v0's loop (plus
# the lo skip).
# Usage (device tool): binary at .dev-hipgemm6/mxmoe; carry [".dev-hipgemm6"];
# command: bash .dev-hipgemm6/run.sh   (results: $OUT/r.tgz)
set -uo pipefail
O0="${OUT:-/tmp/out}"; O=$(mktemp -d); S0=$(date +%s); B=.dev-hipgemm6/mxmoe
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
left() { [ $(( $(date +%s) - S0 )) -lt "$1" ]; }
pack() { tar czf "$O0/r.tgz" -C "$O" . 2>/dev/null; }
export MXMOE_REQUIRE_HIP=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 500 > "$O/clocks.csv" 2>&1 &
SMI=$!
timeout 100 $B check --backend hip --suite full > "$O/check.txt" 2>&1; st "check full rc=$? $(tail -1 $O/check.txt)"
grep -iE "fail|error" "$O/check.txt" | head -10 | tee -a "$L"; pack
MXMOE_HIP_GEMV_PAIRS=0 timeout 30 $B check --backend hip --suite full --filter moe/ > "$O/check_pairs0.txt" 2>&1; st "check moe/ pairs0 rc=$? $(tail -1 $O/check_pairs0.txt)"
grep -iE "fail|error" "$O/check_pairs0.txt" | head -10 | tee -a "$L"; pack
G="--backend hip --shape gpt-oss-120b --iters 5"; D="--backend hip --shape deepseek-r1 --iters 5"
timeout 40 $B bench $G --tokens 64,256,2048 > "$O/b_new_gptoss.log" 2>&1; st "bench new gpt-oss rc=$?"
left 200 && { MXMOE_HIP_MMA_VARIANT=v0 timeout 25 $B bench $G --tokens 64,256,2048 --no-check > "$O/b_v0_gptoss.log" 2>&1; st "bench v0 gpt-oss rc=$?"; }
pack
left 170 && { timeout 45 $B bench $D --tokens 64,512,2048 > "$O/b_new_dsr1.log" 2>&1; st "bench new dsr1 rc=$?"; }
left 185 && { MXMOE_HIP_MMA_VARIANT=v0 timeout 35 $B bench $D --tokens 64,512,2048 --no-check > "$O/b_v0_dsr1.log" 2>&1; st "bench v0 dsr1 rc=$?"; }
pack
left 195 && { timeout 15 $B bench $G --tokens 256,2048 --no-check --scheme w_mxfp4_a_mxfp4 > "$O/b_mxact.log" 2>&1; st "bench gpt-oss MX activations rc=$?"; }
pack
grep -hE "M = [0-9]+: (wall|passes)|rel-L2" "$O"/b_*.log | cut -c1-250 >> "$L"
pack
if command -v ncu > /dev/null && left 185; then
  S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis"
  timeout 30 ncu --kernel-name regex:'moe_gemm' --launch-skip 2 --launch-count 2 $S \
    $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 1 --no-check > "$O/ncu_2048.txt" 2>&1; st "ncu rc=$?"
else st "no ncu or no time"; fi
kill $SMI 2>/dev/null
st done
pack
