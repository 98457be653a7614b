#!/usr/bin/env bash
# The hipdecode2 measurements on the H200 (device tool, one call): the full catalog on hip with
# the new defaults (MXMOE_HIP_GEMV=v2, MXMOE_HIP_ROUTE=v2) first, stopping (after a diagnosis
# by knob) if it fails, and the MoE cases with MXMOE_HIP_GEMV=v2c; then the decode benches with
# the new kernels (v2, v2c) and the old ones (MXMOE_HIP_GEMV=v1 MXMOE_HIP_ROUTE=v1), the route
# alone switched, a forced GEMV at 64 tokens, and, where ncu exists (and time is left), the
# per-kernel device times and DRAM throughput of one 1-token forward.
# Expects the release binary (built with --features hip) at $MXMOE_BIN (default
# .dev-hipdecode2/mxmoe). Results under $OUT.
#
# PHASE=v3 (not yet run): MXMOE_HIP_GEMV=v3 MXMOE_HIP_ROUTE=v3 against the v2 defaults (the full
# catalog with both v3 knobs first, stopping on a failure; then benches of v3/v3, GEMV v3 alone,
# and v2), then ncu on the 1-token forward with v3/v3 including the warp stall reasons (is the
# route+lists kernel waiting on instruction fetch?).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-hipdecode2/mxmoe}"
if [ "${PHASE:-}" = v3 ]; then
  MXMOE_HIP_GEMV=v3 MXMOE_HIP_ROUTE=v3 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$OUT/check_hip_v3.txt" 2>&1
  rc=$?; echo "check hip (MXMOE_HIP_GEMV=v3 MXMOE_HIP_ROUTE=v3) rc=$rc"; grep -E "FAIL" "$OUT/check_hip_v3.txt" | head -8; tail -1 "$OUT/check_hip_v3.txt"
  [ $rc -ne 0 ] && exit 1
  L="$OUT/bench_hip_v3.log"
  for v in "v3 v3" "v3 v2" "v2 v2"; do
    set -- $v
    echo "## MXMOE_HIP_GEMV=$1 MXMOE_HIP_ROUTE=$2" >> "$L"
    MXMOE_HIP_GEMV=$1 MXMOE_HIP_ROUTE=$2 timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --no-check --json "$OUT/bench_hip_gptoss_$1$2.json" >> "$L" 2>&1
    MXMOE_HIP_GEMV=$1 MXMOE_HIP_ROUTE=$2 timeout 40 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 --no-check >> "$L" 2>&1
  done
  grep -E "^## |M = [0-9]+: (wall|passes)" "$L" | sed 's/^ *//' | cut -c1-200
  if command -v ncu > /dev/null; then
    MXMOE_HIP_GEMV=v3 MXMOE_HIP_ROUTE=v3 timeout 45 ncu --kernel-name regex:'moe_' --launch-skip 9 --launch-count 3 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats \
      $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 8 --no-check > "$OUT/ncu_v3.txt" 2>&1
    grep -E "^  moe_|Duration|DRAM Throughput|L1/TEX Cache|Compute \(SM\)|Achieved Occupancy|Stall|stall" "$OUT/ncu_v3.txt" | head -60
  fi
  exit 0
fi
T=$(mktemp -d)
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$T/clocks.csv" 2>&1 &
SMI=$!
clocks() { echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' "$T/clocks.csv" | sort | uniq -c | sort -rn | head -6; }
summary() { grep -E "^## |M = [0-9]+: (wall|passes)" "$1" | sed 's/^ *//' | cut -c1-200; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$OUT/check_hip.txt" 2>&1
rc=$?; echo "check hip (v2 defaults) rc=$rc"; grep -E "FAIL" "$OUT/check_hip.txt" | head -8; tail -1 "$OUT/check_hip.txt"
if [ $rc -ne 0 ]; then
  for v in "MXMOE_HIP_GEMV=v1" "MXMOE_HIP_ROUTE=v1" "MXMOE_HIP_GEMV=v1 MXMOE_HIP_ROUTE=v1"; do
    { echo "## $v"; env $v MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full; } >> "$OUT/check_diag.txt" 2>&1
    echo "## $v rc=$?"; tail -1 "$OUT/check_diag.txt"
  done
  grep -E "FAIL" "$OUT/check_diag.txt" | head -10
  kill $SMI 2>/dev/null; exit 1
fi
{ echo "## MXMOE_HIP_GEMV=v2c, MoE cases"; MXMOE_HIP_GEMV=v2c MXMOE_REQUIRE_HIP=1 timeout 30 $B check --backend hip --suite full --filter moe/; } >> "$OUT/check_hip.txt" 2>&1
echo "check hip v2c moe/ rc=$?"; tail -1 "$OUT/check_hip.txt"
L="$OUT/bench_hip.log"
{ echo "## v2 (defaults)"
  timeout 70 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --json "$OUT/bench_hip_gptoss.json"
  timeout 50 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 --json "$OUT/bench_hip_dsr1.json"
  echo "## v2c (MXMOE_HIP_GEMV=v2c: plain weight loads)"
  MXMOE_HIP_GEMV=v2c timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --no-check
  MXMOE_HIP_GEMV=v2c timeout 30 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 --no-check
  echo "## v1 (MXMOE_HIP_GEMV=v1 MXMOE_HIP_ROUTE=v1)"
  MXMOE_HIP_GEMV=v1 MXMOE_HIP_ROUTE=v1 timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --no-check --json "$OUT/bench_hip_gptoss_v1.json"
  MXMOE_HIP_GEMV=v1 MXMOE_HIP_ROUTE=v1 timeout 40 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 --no-check --json "$OUT/bench_hip_dsr1_v1.json"
  echo "## MXMOE_HIP_ROUTE=v1 (GEMV v2)"
  MXMOE_HIP_ROUTE=v1 timeout 30 $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 20 --no-check
  echo "## v2, forced GEMV at 64 tokens (crossover)"
  MXMOE_HIP_MOE_PATH=gemv timeout 30 $B bench --backend hip --shape gpt-oss-120b --tokens 64 --iters 10 --no-check
} > "$L" 2>&1
summary "$L"
clocks >> "$L"
kill $SMI 2>/dev/null
if command -v ncu > /dev/null && [ $SECONDS -lt 120 ]; then
  N="$OUT/ncu.txt"
  for v in v2 v1; do
    echo "## ncu $v" >> "$N"
    MXMOE_HIP_GEMV=$v MXMOE_HIP_ROUTE=$v timeout 45 ncu --kernel-name regex:'moe_' --launch-skip 9 --launch-count 6 \
      --section SpeedOfLight --section LaunchStats --section Occupancy \
      $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 8 --no-check >> "$N" 2>&1
    echo "ncu $v rc=$?"
  done
  grep -E "^  moe_|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per" "$N" | head -80
else
  echo "no ncu (or no time left: ${SECONDS}s)"
fi
exit 0
