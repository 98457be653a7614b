#!/usr/bin/env bash
# Follow-up to scripts/h200-wgpudecode2.sh for a later device call (the branch had ONE call): the
# final defaults of branch wgpudecode2 as one binary, which that call did not measure (the deep
# prefetch was removed and one_row made the default after it; docs/h200-2026-12-01-wgpudecode2).
# ~120 s expected; steps in priority order, each under its own timeout:
#   1. the full catalog on wgpu with the defaults (rank route, fused combine, one-row pipelines)
#   2. gpt-oss-120b at 1, 4, 16 tokens: words+prefetch+onerow (the default) and words+prefetch
#      (one_row off) on one layer; expect 1 token ~0.070 ms GPU (gemv1 ~0.033), 4 and 16 tokens
#      gemv1 back at main's 0.112 / 0.247
#   3. deepseek-r1 at 1, 8 tokens, the default
#   4. gpt-oss at 1, 4 tokens with MXMOE_WGPU_FUSED_COMBINE=0 (the combine pass back: attribution)
# Usage (device tool): carry [".gl", ".dev-<name>"]; the command
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; MXMOE_BIN=.dev-<name>/mxmoe \
#     bash .dev-<name>/h200-wgpudecode2-verify.sh
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-wgpudecode2/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
S0=$(date +%s)
step() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$OUT/steps.log"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
timeout 70 $B check --backend wgpu --suite full > "$OUT/check_wgpu.txt" 2>&1
rc=$?; step "check defaults rc=$rc: $(tail -1 "$OUT/check_wgpu.txt")"
[ $rc -ne 0 ] && { grep FAIL "$OUT/check_wgpu.txt" | head -20; exit 1; }
timeout 45 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 20 \
  --gemv-layouts subgroup+words+prefetch+onerow,subgroup+words+prefetch \
  --json "$OUT/bench_gptoss.json" > "$OUT/bench.log" 2>&1
step "bench gpt-oss rc=$?"
timeout 30 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,8 --iters 20 \
  --json "$OUT/bench_dsr1.json" >> "$OUT/bench.log" 2>&1
step "bench dsr1 rc=$?"
MXMOE_WGPU_FUSED_COMBINE=0 timeout 25 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4 \
  --iters 20 --json "$OUT/bench_gptoss_nofuse.json" >> "$OUT/bench.log" 2>&1
step "bench gpt-oss combine pass rc=$?"
grep -E "GEMV layout|M = [0-9]+: (wall|passes)|FAIL|rror" "$OUT/bench.log" | cut -c1-200
