#!/usr/bin/env bash
# Session 6, second call: gemv2 (mma) prefetching its weights into the L2 while gemv1 runs
# (programmatic dependent launch), the host work moved before the input copy; the whole HIP
# catalog, decode bench with PDL on and off, and ncu of the route kernels at one token (what
# their ~10 / ~24 us are).
# Usage (device tool): binary at .dev-main/mxmoe, this script as .dev-main/pdl2.sh; carry
# [".dev-main"]; command: bash .dev-main/pdl2.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
export MXMOE_REQUIRE_HIP=1
timeout 60 $B info > "$O/info.txt" 2>&1; st "info (JIT) rc=$?"
timeout 40 $B check --backend hip --suite full > "$O/check_hip.txt" 2>&1; st "check hip rc=$? $(tail -1 $O/check_hip.txt | cut -c1-90)"
grep -h "FAIL" "$O"/check_*.txt | head -10 | cut -c1-200 | tee -a "$L"
G="--shape gpt-oss-120b --tokens 1,4,16 --iters 20"
D="--shape deepseek-r1 --tokens 1,8 --iters 20"
for pdl in 1 0; do
  MXMOE_HIP_PDL=$pdl timeout 30 $B bench --backend hip $G --json "$O/pdl${pdl}_gptoss.json" > "$O/pdl${pdl}_gptoss.log" 2>&1; st "bench pdl=$pdl gpt-oss rc=$?"
  MXMOE_HIP_PDL=$pdl timeout 30 $B bench --backend hip $D --json "$O/pdl${pdl}_dsr1.json" > "$O/pdl${pdl}_dsr1.log" 2>&1; st "bench pdl=$pdl dsr1 rc=$?"
done
grep -H -E "M = [0-9]+: (wall|passes)" "$O"/*.log | sed 's#.*/##' | cut -c1-220 >> "$L"
if command -v ncu > /dev/null; then
  S="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats"
  for sh in gpt-oss-120b deepseek-r1; do
    timeout 40 ncu --kernel-name regex:'route' --launch-skip 10 --launch-count 1 $S \
      $B bench --backend hip --shape $sh --tokens 1 --iters 4 --no-check > "$O/ncu_route_$sh.txt" 2>&1; st "ncu route $sh rc=$?"
  done
else st "no ncu"; fi
command -v nsys > /dev/null && st "nsys: $(command -v nsys)" || st "no nsys"
(cd "$O" && tar czf pdl2.tgz --exclude pdl2.tgz --exclude steps.txt . )
