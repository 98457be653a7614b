#!/usr/bin/env bash
# Session 4's closing call: scripts/h200-final.sh PHASE=all (checks, benches on both backends,
# the peers), then the HIP decode v3 knobs (not yet run): catalog first, bench if it passes.
# Usage (device tool): copy the release binary (--features hip), this script and scripts/h200-final.sh
# into /work/main/.dev-main/ as run.sh, h200-final.sh, mxmoe; carry [".gl", ".dev-main", ".peers"];
# command: for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/run.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; R=$(mktemp -d); S0=$(date +%s)
export MXMOE_BIN=.dev-main/mxmoe
OUT="$R" PHASE=all bash .dev-main/h200-final.sh > "$R/final_steps.txt" 2>&1
echo "final rc=$? $(( $(date +%s) - S0 ))s" >> "$R/final_steps.txt"
B=.dev-main/mxmoe
MXMOE_REQUIRE_HIP=1 MXMOE_HIP_GEMV=v3 MXMOE_HIP_ROUTE=v3 timeout 60 $B check --backend hip --suite full > "$R/check_hip_v3.txt" 2>&1
rc=$?; echo "check hip v3 rc=$rc $(( $(date +%s) - S0 ))s: $(tail -1 $R/check_hip_v3.txt)" >> "$R/final_steps.txt"
if [ $rc -eq 0 ]; then
  for sh in "gpt-oss-120b 1,4,16" "deepseek-r1 1,8"; do set -- $sh
    MXMOE_HIP_GEMV=v3 MXMOE_HIP_ROUTE=v3 timeout 50 $B bench --backend hip --shape $1 --tokens $2 --iters 20 \
      --json "$R/bench_hip_v3_$1.json" >> "$R/bench_hip_v3.log" 2>&1
    echo "bench v3 $1 rc=$? $(( $(date +%s) - S0 ))s" >> "$R/final_steps.txt"
  done
fi
cp "$R/final_steps.txt" "$O/"; (cd "$R" && tar czf "$O/final.tgz" .)
