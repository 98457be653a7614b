#!/usr/bin/env bash
# The v2 HIP GEMM's first run on the H200 (device tool), ONE call, ~4 minutes, in priority order
# (a call cut short still returns the most important results). docs/hip-gemm-v2.md has the plan.
#
#   1. correctness of v2 (MXMOE_HIP_GEMM=v2): the full catalog (the tile heuristic picks 16/32/64),
#      then the MoE cases forced through the GEMM (MXMOE_HIP_MOE_PATH=gemm, also the 1-4 token
#      cases) with each tile forced (MXMOE_HIP_GEMM_TM=16, 32, 64). The first failure STOPS the
#      script: no timing of a wrong kernel.
#   2. bench, v2 then v1, gpt-oss-120b 64,256,2048 and deepseek-r1 64,512,2048 (the flags of
#      docs/h200-2026-12-01-hipgemm; v2 rows checked against the CPU reference, v1 rows were
#      checked before and run --no-check to save time).
#   3. v2 with 32-row tiles forced at 2048 tokens (occupancy against tile height), if time is left.
#
# Usage (the device gets /work/main's checkout, not a branch: copy the binary and this script):
#   cargo build --release --features hip --bin mxmoe      # on branch next-hipgemm or its merge
#   mkdir -p /work/main/.dev-next && cp target/release/mxmoe scripts/h200-next.sh /work/main/.dev-next/
#   run: carry [".gl", ".dev-next"], timeout_s 420 (typically ~4 min; every step has its own timeout), command:
#     for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-next/h200-next.sh
# Results in $OUT: info.txt, check_v2*.txt, bench.log, bench_{v1,v2}_{gptoss,dsr1}.json,
# bench_v2_{gptoss,dsr1}_t32.json, steps.log.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-next/mxmoe}"
S="$OUT/steps.log"
step() { echo "$(date -u +%T) $*" | tee -a "$S"; }
export MXMOE_REQUIRE_HIP=1
step "start"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; MXMOE_HIP_GEMM=v2 $B info; } > "$OUT/info.txt" 2>&1
step "info rc=$? (the first module load JIT-compiles the PTX; later processes use the driver's cache)"

# 1. correctness (stop at the first failure)
check() {  # name, then env assignments; extra check args in CARGS
  local name=$1; shift
  env "$@" timeout 90 $B check --backend hip --suite full ${CARGS:-} > "$OUT/$name.txt" 2>&1
  local rc=$?
  step "$name ($*) rc=$rc: $(tail -1 "$OUT/$name.txt")"
  if [ $rc -ne 0 ]; then
    grep -E "FAIL|error|Error" "$OUT/$name.txt" | head -20 | tee -a "$S"
    step "STOP: v2 is wrong or does not run; no bench (see $name.txt)"
    exit 1
  fi
}
CARGS="" check check_v2 MXMOE_HIP_GEMM=v2
for tm in 16 32 64; do
  CARGS="--filter moe/" check check_v2_gemm_t$tm MXMOE_HIP_GEMM=v2 MXMOE_HIP_MOE_PATH=gemm MXMOE_HIP_GEMM_TM=$tm
done

# 2. bench: v2 then v1 per shape
L="$OUT/bench.log"
bench() {  # version shape tokens tag [extra]
  echo "## MXMOE_HIP_GEMM=$1 $2" >> "$L"
  MXMOE_HIP_GEMM=$1 timeout 60 $B bench --backend hip --shape $2 --tokens $3 --iters 20 ${5:-} \
    --json "$OUT/bench_$1_$4.json" >> "$L" 2>&1
  step "bench $1 $2 rc=$?"
}
bench v2 gpt-oss-120b 64,256,2048 gptoss
bench v1 gpt-oss-120b 64,256,2048 gptoss --no-check
bench v2 deepseek-r1 64,512,2048 dsr1
bench v1 deepseek-r1 64,512,2048 dsr1 --no-check
# 3. (if time is left) occupancy against tile height at 2048 tokens: the 64-row v2 tiles run 8
# warps per SM (shared memory), the 32-row ones 12 (docs/hip-gemm-v2.md, ptxas table).
echo "## MXMOE_HIP_GEMM=v2 MXMOE_HIP_GEMM_TM=32" >> "$L"
MXMOE_HIP_GEMM_TM=32 bench v2 gpt-oss-120b 2048 gptoss_t32 --no-check
MXMOE_HIP_GEMM_TM=32 bench v2 deepseek-r1 2048 dsr1_t32 --no-check
grep -E "^## |M = [0-9]+: (wall|passes)" "$L" | sed 's/^ *//' | cut -c1-220
step "done"
