#!/usr/bin/env bash
# The wgpudecode branch's H200 measurements (device tool), docs/h200-2026-12-01-wgpudecode/:
#   PHASE=explore  gpt-oss-120b at 1-64 tokens over GEMV layouts (subgroups per lane group), the
#                  GEMV forced at 256 and 2048 tokens (MXMOE_GEMV_PAIRS), host-time profile on
#   PHASE=final    mxmoe info; the full catalog on wgpu; mxmoe bench on wgpu, both model shapes,
#                  the whole token matrix, host-time profile on; then a diagnostic bench of the
#                  GEMV's loads alone (MXMOE_DIAG_GEMV_LOADS_ONLY=1, --no-check)
# Expects the release binary at $MXMOE_BIN (default .dev-wgpudecode/mxmoe) and .gl/ (Vulkan
# loaders, unpacked by the caller).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-wgpudecode/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA MXMOE_HOST_PROFILE=200
T=$(mktemp -d)
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$T/clocks.csv" 2>&1 &
SMI=$!
clocks() { echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' "$T/clocks.csv" | sort | uniq -c | sort -rn | head -6; }
if [ "${PHASE:-explore}" = explore ]; then
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
  L=subgroup+words+prefetch,subgroup+words+prefetch+split2,subgroup+words+prefetch+split4
  timeout 120 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64 --iters 20 \
    --gemv-layouts "$L" --json "$OUT/x_layouts.json" > "$OUT/x_gptoss.log" 2>&1
  echo "layouts rc=$?"
  MXMOE_GEMV_PAIRS=100000 timeout 80 $B bench --backend wgpu --shape gpt-oss-120b --tokens 256,2048 \
    --iters 20 --gemv-layouts subgroup+words+prefetch,subgroup+words+prefetch+split2 \
    --json "$OUT/x_gemv_big.json" >> "$OUT/x_gptoss.log" 2>&1
  echo "gemv big rc=$?"
  clocks >> "$OUT/x_gptoss.log"
  grep -E "GEMV layout|M = [0-9]+: (wall|passes)" "$OUT/x_gptoss.log" | cut -c1-230
  grep "host profile" "$OUT/x_gptoss.log" | awk 'NR % 5 == 1' | cut -c1-230 | head -40
else
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
  timeout 170 $B check --backend wgpu --suite full --json "$T/cw.json" > "$OUT/check_wgpu.txt" 2>&1
  echo "check wgpu rc=$?"; grep -E "FAIL" "$OUT/check_wgpu.txt" | head -5; tail -3 "$OUT/check_wgpu.txt"
  timeout 140 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 \
    --json "$OUT/bench_wgpu_gptoss.json" > "$OUT/bench_wgpu.log" 2>&1; echo "bench wgpu gpt-oss rc=$?"
  timeout 170 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 30 \
    --json "$OUT/bench_wgpu_dsr1.json" >> "$OUT/bench_wgpu.log" 2>&1; echo "bench wgpu dsr1 rc=$?"
  # Diagnostic (results wrong, so --no-check): the GEMV's loads without its decode and math.
  MXMOE_DIAG_GEMV_LOADS_ONLY=1 timeout 40 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,64 \
    --iters 20 --no-check > "$OUT/diag_loads_only.log" 2>&1; echo "diag rc=$?"
  grep -E "DIAG|passes" "$OUT/diag_loads_only.log" | cut -c1-200
  clocks >> "$OUT/bench_wgpu.log"
  grep -E "^ +[0-9]+ +[0-9.]+ |passes" "$OUT/bench_wgpu.log" | cut -c1-200
  grep "host profile" "$OUT/bench_wgpu.log" | awk 'NR % 5 == 1' | cut -c1-230 | head -40
fi
kill $SMI 2>/dev/null
