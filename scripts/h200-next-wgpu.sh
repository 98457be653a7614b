#!/usr/bin/env bash
# The wide GEMV layout's first H200 measurement (device tool), ONE call, ~3 minutes expected (the
# timeouts, caps only, add up to ~5), in priority
# order so a call cut short still returns the most important results (docs/wgpu-gemv-wide.md):
#   1. mxmoe info with MXMOE_GEMV_WIDE=1 (the GEMV layout line must say "wide": the adapter
#      built the wide pipelines; else it fell back and says why on stderr)
#   2. the full catalog on wgpu with MXMOE_GEMV_WIDE=1 (expect 583 passed, 0 failed, 0
#      unsupported, as the merged tree: docs/h200-2026-12-01-merged)
#   3. mxmoe bench --gemv-layouts on gpt-oss-120b at 1,4,16,64,256 tokens: the default layout
#      (subgroup+words+prefetch), the 32-blocks layout the wide one shares its per-lane math with
#      (subgroup+prefetch) and the wide layout (subgroup+wide+prefetch), same prepared layer,
#      every row checked against the CPU reference
#   4. the same on deepseek-r1 at 1,8,64 tokens (default and wide)
# Usage (device tool): carry [".gl", ".dev-<name>"]; the command
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; MXMOE_BIN=.dev-<name>/mxmoe \
#     bash .dev-<name>/h200-next-wgpu.sh
# with the release binary of this branch (`nice cargo build --release --bin mxmoe`; the hip
# feature is not needed) and this script copied into /work/main/.dev-<name>/. Everything goes to
# $OUT (info.txt, check_wgpu_wide.txt, bench_layouts.log, bench_layouts_{gptoss,dsr1}.json).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-next/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
T=$(mktemp -d)
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$T/clocks.csv" 2>&1 &
SMI=$!
clocks() { echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' "$T/clocks.csv" | sort | uniq -c | sort -rn | head -6; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; MXMOE_GEMV_WIDE=1 $B info; } \
  > "$OUT/info.txt" 2>&1
grep -E "GEMV layout|warning" "$OUT/info.txt" | head -3
MXMOE_GEMV_WIDE=1 timeout 80 $B check --backend wgpu --suite full > "$OUT/check_wgpu_wide.txt" 2>&1
echo "check wgpu wide rc=$?"; grep -E "FAIL" "$OUT/check_wgpu_wide.txt" | head -5; tail -2 "$OUT/check_wgpu_wide.txt"
L=subgroup+words+prefetch,subgroup+prefetch,subgroup+wide+prefetch
timeout 130 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64,256 --iters 20 \
  --gemv-layouts "$L" --json "$OUT/bench_layouts_gptoss.json" > "$OUT/bench_layouts.log" 2>&1
echo "bench gpt-oss layouts rc=$?"
timeout 70 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,8,64 --iters 20 \
  --gemv-layouts subgroup+words+prefetch,subgroup+wide+prefetch \
  --json "$OUT/bench_layouts_dsr1.json" >> "$OUT/bench_layouts.log" 2>&1
echo "bench dsr1 layouts rc=$?"
kill $SMI 2>/dev/null
clocks >> "$OUT/bench_layouts.log"
grep -E "GEMV layout|M = [0-9]+: (wall|passes)|rel-L2|FAIL|rror" "$OUT/bench_layouts.log" | cut -c1-230
tail -8 "$OUT/bench_layouts.log"
