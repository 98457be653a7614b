#!/usr/bin/env bash
# Session 8, profile call: ncu (full set + SASS source page) of the decode GEMVs at one gpt-oss
# token and one DeepSeek-R1 token, plus the bench baseline at decode sizes. Results: $OUT/prof.tgz
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=.dev-main/mxmoe
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../prof.tgz .); }
export MXMOE_REQUIRE_HIP=1
$B info > "$R/info.txt" 2>&1; st "info (JIT) rc=$?"
timeout 50 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 30 --json "$R/b_gptoss.json" > "$R/b_gptoss.log" 2>&1; st "bench gpt-oss rc=$?"
timeout 40 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 30 --json "$R/b_dsr1.json" > "$R/b_dsr1.log" 2>&1; st "bench dsr1 rc=$?"
if command -v ncu > /dev/null; then
  for sh in gpt-oss-120b deepseek-r1; do
    timeout 100 ncu --kernel-name regex:'moe_gemv' --launch-skip 6 --launch-count 2 --set full --import-source no -o "$R/ncu_$sh" \
      $B bench --backend hip --shape $sh --tokens 1 --iters 4 --no-check > "$R/ncu_run_$sh.txt" 2>&1; st "ncu $sh rc=$?"
    ncu -i "$R/ncu_$sh.ncu-rep" --page details > "$R/ncu_details_$sh.txt" 2>&1
    ncu -i "$R/ncu_$sh.ncu-rep" --page source --csv --print-source sass > "$R/ncu_sass_$sh.csv" 2>&1; st "ncu export $sh rc=$?"
    rm -f "$R/ncu_$sh.ncu-rep"
  done
else st "no ncu"; fi
grep -hE "M = [0-9]+: (wall|passes)" "$R"/b_*.log | cut -c1-200 >> "$R/steps.txt"
st done
