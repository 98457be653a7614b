#!/usr/bin/env bash
# Session 8, call 6: mmab's hi-only gemv1 at four blocks per multiprocessor (moe_gemv1_mmab4_cb4,
# chosen by X_OCC4, a switch of this test binary only) against three. Results: $OUT/occ.tgz
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=/tmp/mxmoe; gunzip -c .dev-main/mxmoe.gz > $B; chmod +x $B
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../occ.tgz .); }
export MXMOE_REQUIRE_HIP=1
$B info > /dev/null 2>&1; st "info rc=$?"
X_OCC4=1 MXMOE_HIP_GEMV_PAIRS=1000 timeout 30 $B check --backend hip --suite full --filter moe/ > "$R/check_occ4.txt" 2>&1; st "check occ4 gemv forced rc=$? $(tail -1 $R/check_occ4.txt | cut -c1-90)"
for mode in 3 4 3 4; do
  if [ $mode = 4 ]; then export X_OCC4=1; else unset X_OCC4; fi
  timeout 30 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 30 > "$R/d_$mode.log" 2>&1; st "dsr1 occ $mode rc=$? $(grep -hE 'M = [0-9]+: wall' $R/d_$mode.log | cut -c1-40 | tr '\n' ' ')"
done
for f in "$R"/*.log; do echo "== $(basename $f)"; grep -hE "M = [0-9]+: (wall|passes)" "$f" | cut -c1-200; done >> "$R/steps.txt"
st done
