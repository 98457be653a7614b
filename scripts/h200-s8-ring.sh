#!/usr/bin/env bash
# Session 8, call 2: the GEMV's cp.async ring (mmac) and 32-row gemv2 blocks against mmab.
# Catalog with the GEMV forced on every MoE case for mmac / mmab with 32-row gemv2, then decode
# benches per variant, then ncu of mmac at one gpt-oss token. Results: $OUT/ring.tgz
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=.dev-main/mxmoe
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../ring.tgz .); }
export MXMOE_REQUIRE_HIP=1
$B info > "$R/info.txt" 2>&1; st "info (JIT) rc=$?"
MXMOE_HIP_GEMV=mmac MXMOE_HIP_GEMV2_ROWS=32 MXMOE_HIP_GEMV_PAIRS=1000 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_mmac32.txt" 2>&1; st "check mmac rows32 forced rc=$? $(tail -1 $R/check_mmac32.txt | cut -c1-100)"
MXMOE_HIP_GEMV=mmab MXMOE_HIP_GEMV2_ROWS=32 MXMOE_HIP_GEMV_PAIRS=1000 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_mmab32.txt" 2>&1; st "check mmab rows32 forced rc=$? $(tail -1 $R/check_mmab32.txt | cut -c1-100)"
MXMOE_HIP_GEMV=mmac MXMOE_HIP_GEMV2_ROWS=64 MXMOE_HIP_GEMV_PAIRS=1000 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_mmac64.txt" 2>&1; st "check mmac rows64 forced rc=$? $(tail -1 $R/check_mmac64.txt | cut -c1-100)"
for cfg in "mmab 64" "mmab 32" "mmac 64" "mmac 32" "mmac auto"; do
  set -- $cfg; v=$1; r=$2; [ "$r" = auto ] && r=""
  MXMOE_HIP_GEMV=$v MXMOE_HIP_GEMV2_ROWS=$r timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 30 --json "$R/g_${v}_${2}.json" > "$R/g_${v}_${2}.log" 2>&1; st "bench gpt-oss $v $2 rc=$?"
  MXMOE_HIP_GEMV=$v MXMOE_HIP_GEMV2_ROWS=$r timeout 40 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 30 --json "$R/d_${v}_${2}.json" > "$R/d_${v}_${2}.log" 2>&1; st "bench dsr1 $v $2 rc=$?"
done
if command -v ncu > /dev/null; then
  MXMOE_HIP_GEMV=mmac timeout 60 ncu --kernel-name regex:'moe_gemv' --launch-skip 6 --launch-count 2 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
    $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 4 --no-check > "$R/ncu_mmac.txt" 2>&1; st "ncu mmac rc=$?"
fi
for f in "$R"/*.log; do echo "== $(basename $f)"; grep -hE "M = [0-9]+: (wall|passes)" "$f" | cut -c1-200; done >> "$R/steps.txt"
st done
