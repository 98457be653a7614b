#!/usr/bin/env bash
# The wgpudecode2 branch's one H200 device call (docs/h200-2026-12-01-wgpudecode2/README.md), as
# run with the binary of commit 92a2bd2. The deep prefetch it measures (MXMOE_GEMV_PREFETCH=2,
# bench +deep) lost and was removed afterwards: with a later binary use
# scripts/h200-wgpudecode2-verify.sh instead.
# decode-size changes of the wgpu backend measured old vs new in one call, in priority order
# (a call cut short still returns the most important results), every step under its own
# timeout and a global deadline (~185 s):
#   1. the full catalog on wgpu with the new defaults (rank top-k route, gemv2 fused combine);
#      stops the script on a failure
#   2. the full catalog with every new knob on (MXMOE_GEMV_PREFETCH=2 deep prefetch,
#      MXMOE_GEMV_ONE_ROW=1, MXMOE_WGPU_TRUSTED=1): a knob may become a default only if this passes
#   3. gpt-oss-120b at 1, 4, 16 tokens, new binary: words+prefetch (the old GEMV), +onerow,
#      +deep, +deep+onerow on the same layer
#   4. the same shape with the base binary (main before this branch: old route, combine pass)
#   5. deepseek-r1 at 1, 8 tokens, new binary (words+prefetch and +deep+onerow), then base
#   6. gpt-oss with MXMOE_WGPU_TRUSTED=1 (words+prefetch+deep+onerow)
# Usage (device tool): carry [".gl", ".dev-wgpudecode2"]; the command
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-wgpudecode2/h200-wgpudecode2.sh
# with this branch's release binary as .dev-wgpudecode2/mxmoe and the base binary (same tree
# before the branch's first change) as .dev-wgpudecode2/mxmoe-base.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=.dev-wgpudecode2
B=$D/mxmoe; B0=$D/mxmoe-base
R="$OUT/r"; mkdir -p "$R"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
S0=$(date +%s)
left() { echo $(( 185 - ($(date +%s) - S0) )); }
step() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.log"; }
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$R/clocks.csv" 2>&1 &
SMI=$!
finish() {
  kill $SMI 2>/dev/null
  { echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' "$R/clocks.csv" | sort | uniq -c | sort -rn | head -6; } >> "$R/steps.log"
  rm -f "$R/clocks.csv"
  grep -hE "GEMV layout|M = [0-9]+: (wall|passes)|gpu ms|FAIL|rror" "$R"/bench_*.log 2>/dev/null | cut -c1-200 | head -80
  (cd "$OUT" && tar czf r.tgz r && cp r/steps.log steps.log && rm -rf r)
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$R/info.txt" 2>&1
timeout 45 $B check --backend wgpu --suite full > "$R/check_wgpu.txt" 2>&1
rc=$?; step "1 check new defaults rc=$rc: $(tail -1 "$R/check_wgpu.txt")"
if [ $rc -ne 0 ]; then grep -E "FAIL" "$R/check_wgpu.txt" | head -20; finish; exit 1; fi
MXMOE_GEMV_PREFETCH=2 MXMOE_GEMV_ONE_ROW=1 MXMOE_WGPU_TRUSTED=1 timeout 40 $B check --backend wgpu --suite full > "$R/check_wgpu_knobs.txt" 2>&1
step "2 check knobs on rc=$?: $(tail -1 "$R/check_wgpu_knobs.txt")"
L=subgroup+words+prefetch,subgroup+words+prefetch+onerow,subgroup+words+prefetch+deep,subgroup+words+prefetch+deep+onerow
T=$(left); [ "$T" -gt 60 ] && T=60
timeout $T $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --gemv-layouts "$L" \
  --json "$R/bench_gptoss_new.json" > "$R/bench_gptoss_new.log" 2>&1
step "3 bench gpt-oss new rc=$?"
T=$(left); [ "$T" -gt 30 ] && T=30
timeout $T $B0 bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 20 \
  --json "$R/bench_gptoss_base.json" > "$R/bench_gptoss_base.log" 2>&1
step "4 bench gpt-oss base rc=$?"
T=$(left); [ "$T" -gt 40 ] && T=40
[ "$T" -gt 10 ] && timeout $T $B bench --backend wgpu --shape deepseek-r1 --tokens 1,8 --iters 20 \
  --gemv-layouts subgroup+words+prefetch,subgroup+words+prefetch+deep+onerow \
  --json "$R/bench_dsr1_new.json" > "$R/bench_dsr1_new.log" 2>&1
step "5a bench dsr1 new rc=$?"
T=$(left); [ "$T" -gt 30 ] && T=30
[ "$T" -gt 10 ] && timeout $T $B0 bench --backend wgpu --shape deepseek-r1 --tokens 1,8 --iters 20 \
  --json "$R/bench_dsr1_base.json" > "$R/bench_dsr1_base.log" 2>&1
step "5b bench dsr1 base rc=$?"
T=$(left); [ "$T" -gt 25 ] && T=25
[ "$T" -gt 10 ] && MXMOE_WGPU_TRUSTED=1 timeout $T $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 20 \
  --gemv-layouts subgroup+words+prefetch+deep+onerow \
  --json "$R/bench_gptoss_trusted.json" > "$R/bench_gptoss_trusted.log" 2>&1
step "6 bench gpt-oss trusted rc=$?"
finish
