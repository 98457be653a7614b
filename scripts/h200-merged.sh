#!/usr/bin/env bash
# The merged tree's short validation on the H200 (device tool), one call, in priority order so a
# call cut short still returns the most important results: the full catalog on the HIP backend
# (CUDA driver) and on wgpu (Vulkan), then a short bench of both backends on both shapes.
# Expects the release binary (built with --features hip) at $MXMOE_BIN (default .dev-main/mxmoe)
# and .gl/ unpacked by the caller.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-main/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$OUT/check_hip.txt" 2>&1
echo "check hip rc=$?"; grep -E "FAIL" "$OUT/check_hip.txt" | head -5; tail -1 "$OUT/check_hip.txt"
timeout 80 $B check --backend wgpu --suite full > "$OUT/check_wgpu.txt" 2>&1
echo "check wgpu rc=$?"; grep -E "FAIL" "$OUT/check_wgpu.txt" | head -5; tail -1 "$OUT/check_wgpu.txt"
summary() { grep -E "^## |M = [0-9]+: (wall|passes)" "$1" | sed 's/^ *//' | cut -c1-200; }
L="$OUT/bench.log"
for be in hip wgpu; do
  echo "## $be gpt-oss-120b" >> "$L"
  timeout 60 $B bench --backend $be --shape gpt-oss-120b --tokens 1,16,64,256,2048 --iters 20 \
    --json "$OUT/bench_${be}_gptoss.json" >> "$L" 2>&1; echo "bench $be gpt-oss rc=$?"
done
for be in hip wgpu; do
  echo "## $be deepseek-r1" >> "$L"
  timeout 60 $B bench --backend $be --shape deepseek-r1 --tokens 1,64,2048 --iters 20 \
    --json "$OUT/bench_${be}_dsr1.json" >> "$L" 2>&1; echo "bench $be dsr1 rc=$?"
done
summary "$L"
