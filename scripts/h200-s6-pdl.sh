#!/usr/bin/env bash
# Session 6, first call: programmatic dependent launch of decode's HIP kernels (MXMOE_HIP_PDL,
# default on) and bench's new headline GPU time (the forward as one event span; the per-pass
# breakdown in its own phase). The whole HIP catalog with PDL, then decode bench with PDL on
# and off in the same call.
# Usage (device tool): binary at .dev-main/mxmoe, this script as .dev-main/pdl.sh; carry
# [".dev-main"]; command: bash .dev-main/pdl.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
export MXMOE_REQUIRE_HIP=1
timeout 60 $B info > "$O/info.txt" 2>&1; st "info (JIT) rc=$?"
timeout 40 $B check --backend hip --suite full > "$O/check_hip_pdl.txt" 2>&1; st "check hip pdl rc=$? $(tail -1 $O/check_hip_pdl.txt | cut -c1-90)"
grep -h "FAIL" "$O"/check_*.txt | head -10 | cut -c1-200 | tee -a "$L"
G="--shape gpt-oss-120b --tokens 1,4,16,64 --iters 20"
D="--shape deepseek-r1 --tokens 1,8 --iters 20"
for pdl in 1 0; do
  MXMOE_HIP_PDL=$pdl timeout 40 $B bench --backend hip $G --json "$O/pdl${pdl}_gptoss.json" > "$O/pdl${pdl}_gptoss.log" 2>&1; st "bench pdl=$pdl gpt-oss rc=$?"
  MXMOE_HIP_PDL=$pdl timeout 30 $B bench --backend hip $D --json "$O/pdl${pdl}_dsr1.json" > "$O/pdl${pdl}_dsr1.log" 2>&1; st "bench pdl=$pdl dsr1 rc=$?"
done
grep -H -E "M = [0-9]+: (wall|passes)" "$O"/*.log | sed 's#.*/##' | cut -c1-220 >> "$L"
(cd "$O" && tar czf pdl.tgz --exclude pdl.tgz --exclude steps.txt . )
