#!/usr/bin/env bash
# Session 6, helper hipgemv6: the matrix-core GEMV `mma2` (hip/gemv_mma.h V2: each block's
# weights prefetched into the L2, K split across blocks with a fixed-order sum) against `mma`
# (the default before it) in one call: the HIP catalog with mma2 forced on every MoE case, then
# bench at gpt-oss-120b 1/4/16 and DeepSeek-R1 1/8 tokens for mma, mma2 (default K split) and
# mma2 with the split forced to 1 (prefetch only) and 4, then ncu of mma2 at one gpt-oss token,
# then (time left) the catalog with the split forced to 8. Results: docs/h200-2026-12-01s6-gemv
# (mma2 was slower everywhere and was removed after this call; it needs the binary of commit
# cb464fa, where MXMOE_HIP_GEMV=mma2, MXMOE_HIP_GEMV_KSPLIT and MXMOE_HIP_GEMV_PREFETCH exist).
# Usage (device tool): binary at .dev-hipgemv6/mxmoe, this script as .dev-hipgemv6/gemv.sh;
# carry [".dev-hipgemv6"]; command: bash .dev-hipgemv6/gemv.sh
set -uo pipefail
O="${OUT:-/tmp/out}/r"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-hipgemv6/mxmoe}"
L="$O/steps.txt"
# Each step re-tars the results (one file comes back even if the call is cut short).
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; (cd "$O" && tar czf ../gemv6.tgz .); }
left() { [ $(( $(date +%s) - S0 )) -lt "$1" ]; }
export MXMOE_REQUIRE_HIP=1
nvidia-smi > "$O/nvidia-smi.txt" 2>&1
timeout 60 $B info > "$O/info.txt" 2>&1; st "info (JIT) rc=$?"
F="MXMOE_HIP_GEMV_PAIRS=1000"
env MXMOE_HIP_GEMV=mma2 $F timeout 30 $B check --backend hip --suite full > "$O/check_mma2.txt" 2>&1
st "check mma2 forced rc=$? $(tail -1 $O/check_mma2.txt | cut -c1-100)"
grep -h "FAIL" "$O"/check_*.txt | head -10 | cut -c1-200 | tee -a "$L"
G="--shape gpt-oss-120b --tokens 1,4,16 --iters 30"
D="--shape deepseek-r1 --tokens 1,8 --iters 30"
bench() {  # name, env...
  local n=$1; shift
  env "$@" timeout 25 $B bench --backend hip $G --json "$O/${n}_gptoss.json" > "$O/${n}_gptoss.log" 2>&1; st "bench $n gpt-oss rc=$?"
  env "$@" timeout 30 $B bench --backend hip $D --json "$O/${n}_dsr1.json" > "$O/${n}_dsr1.log" 2>&1; st "bench $n dsr1 rc=$?"
}
bench mma MXMOE_HIP_GEMV=mma
bench mma2 MXMOE_HIP_GEMV=mma2
left 140 && bench mma2ks1 MXMOE_HIP_GEMV=mma2 MXMOE_HIP_GEMV_KSPLIT=1
left 160 && bench mma2ks4 MXMOE_HIP_GEMV=mma2 MXMOE_HIP_GEMV_KSPLIT=4
left 165 && bench mma2nopf MXMOE_HIP_GEMV=mma2 MXMOE_HIP_GEMV_PREFETCH=0
if command -v ncu > /dev/null && left 180; then
  MXMOE_HIP_GEMV=mma2 timeout 30 ncu --kernel-name regex:'moe_gemv' --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis \
    $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 3 --no-check > "$O/ncu_mma2_1tok.txt" 2>&1
  st "ncu mma2 rc=$?"
fi
if left 190; then
  env MXMOE_HIP_GEMV=mma2 MXMOE_HIP_GEMV_KSPLIT=8 $F timeout 25 $B check --backend hip --suite full > "$O/check_mma2_ks8.txt" 2>&1
  st "check mma2 ks8 forced rc=$? $(tail -1 $O/check_mma2_ks8.txt | cut -c1-100)"
fi
grep -H -E "M = [0-9]+: (wall|passes)" "$O"/*.log | sed 's#.*/##' | cut -c1-220 >> "$L"
grep -E "M = [0-9]+: passes" "$O"/*.log | sed 's#.*/##' | cut -c1-160
(cd "$O" && tar czf ../gemv6.tgz . )
