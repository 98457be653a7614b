#!/usr/bin/env bash
# Ready for a later call (not run in session 6): the matrix-core GEMV `mmaw` (hip/gemv_mma.h, two
# 16-row tiles per warp, 80 registers, three blocks per SM) against `mma` (the default): the HIP
# catalog with mmaw forced on every MoE case, then bench at gpt-oss-120b 1/4/16 and DeepSeek-R1
# 1/8 tokens for both (~80 s after the ~34 s JIT). Make mmaw the default (choice.rs
# gemv_variant_for) only if it passes and wins.
# Usage (device tool): binary at .dev-X/mxmoe, this script as .dev-X/gemvw.sh; carry [".dev-X"];
# command: MXMOE_BIN=.dev-X/mxmoe bash .dev-X/gemvw.sh
set -uo pipefail
O="${OUT:-/tmp/out}/w"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
L="$O/steps.txt"
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; (cd "$O" && tar czf ../gemvw.tgz .); }
export MXMOE_REQUIRE_HIP=1
timeout 60 $B info > "$O/info.txt" 2>&1; st "info (JIT) rc=$?"
env MXMOE_HIP_GEMV=mmaw MXMOE_HIP_GEMV_PAIRS=1000 timeout 30 $B check --backend hip --suite full > "$O/check_mmaw.txt" 2>&1
st "check mmaw forced rc=$? $(tail -1 $O/check_mmaw.txt | cut -c1-100)"
for v in mma mmaw; do
  env MXMOE_HIP_GEMV=$v timeout 25 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 30 \
    --json "$O/${v}_gptoss.json" > "$O/${v}_gptoss.log" 2>&1; st "bench $v gpt-oss rc=$?"
  env MXMOE_HIP_GEMV=$v timeout 30 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 30 \
    --json "$O/${v}_dsr1.json" > "$O/${v}_dsr1.log" 2>&1; st "bench $v dsr1 rc=$?"
done
grep -H -E "M = [0-9]+: (wall|passes)" "$O"/*.log | sed 's#.*/##' | cut -c1-220 >> "$L"
grep -E "M = [0-9]+: passes" "$O"/*.log | sed 's#.*/##' | cut -c1-160
(cd "$O" && tar czf ../gemvw.tgz .)
