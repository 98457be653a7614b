#!/usr/bin/env bash
# Session 5, the closing call's extras (scripts/h200-s5-closing.sh runs this with EXTRA=...):
#   - MXMOE_HIP_ROUTE=v5 (one-warp routing for routers with exact scores, moe_route_lists_w1g;
#     never run before): the whole HIP catalog, then DeepSeek-R1 decode beside the default v4;
#   - ncu on the default matrix-core GEMV at 1 gpt-oss token (what limits it);
#   - PREPASS: a helper's wgpu script, run last if present.
# Expects $B (binary), $OUT; ~70 s without PREPASS (PREPASS_BUDGET seconds, default 130).
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
L="$O/extra_steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
MXMOE_HIP_ROUTE=v5 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full > "$O/check_hip_v5.txt" 2>&1; st "check hip v5 rc=$? $(tail -1 $O/check_hip_v5.txt | cut -c1-90)"
for v in v4 v5; do
  MXMOE_HIP_ROUTE=$v timeout 40 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 > "$O/hip_dsr1_route_$v.log" 2>&1; st "hip dsr1 route $v rc=$?"
done
grep -H -E "M = [0-9]+: (wall|passes)" "$O"/hip_dsr1_route_*.log | sed 's#.*/##' | cut -c1-200 | tee -a "$L"
if command -v ncu > /dev/null; then
  S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis"
  for t in 1; do
    timeout 40 ncu --kernel-name regex:'moe_gemv' --launch-skip 10 --launch-count 2 $S \
      $B bench --backend hip --shape gpt-oss-120b --tokens $t --iters 4 --no-check > "$O/ncu_gemv_mma_${t}tok.txt" 2>&1; st "ncu mma gemv $t token(s) rc=$?"
  done
else st "no ncu"; fi
if [ -n "${PREPASS:-}" ] && [ -f "$PREPASS" ]; then OUT="$O/prepass" MXMOE_BIN="$B" BUDGET="${PREPASS_BUDGET:-130}" timeout 150 bash "$PREPASS"; st "prepass $PREPASS rc=$?"; fi
