#!/usr/bin/env bash
# The hipdecode measurements on the H200 (device tool), one call per PHASE:
#   PHASE=probe  the full catalog on hip; hip bench on both shapes with the host profile
#                (MXMOE_HIP_HOST_PROFILE=1); the GEMV / GEMM crossover (forced paths)
#   PHASE=final  info; the full catalog on hip (and its MoE cases with the prefetching GEMV) and
#                on wgpu; hip bench on both shapes; the decode GEMV with and without prefetch;
#                the host profile at 2048 tokens
# Expects the release binary (built with --features hip) at $MXMOE_BIN (default
# .dev-hipdecode/mxmoe) and, for wgpu, .gl/ unpacked by the caller.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-hipdecode/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
T=$(mktemp -d)
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$T/clocks.csv" 2>&1 &
SMI=$!
clocks() { echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' "$T/clocks.csv" | sort | uniq -c | sort -rn | head -6; }
summary() { grep -E "^## |M = [0-9]+: (wall|passes)" "$1" | sed 's/^ *//' | cut -c1-230; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
MXMOE_REQUIRE_HIP=1 timeout 100 $B check --backend hip --suite full > "$OUT/check_hip.txt" 2>&1
echo "check hip rc=$?"; grep -E "FAIL" "$OUT/check_hip.txt" | head -5; tail -1 "$OUT/check_hip.txt"
if [ "${PHASE:-probe}" = final ]; then
  { echo "## MXMOE_HIP_GEMV_PF=1, MoE cases"; MXMOE_HIP_GEMV_PF=1 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full --filter moe/; } >> "$OUT/check_hip.txt" 2>&1
  echo "check hip pf rc=$?"; tail -1 "$OUT/check_hip.txt"
  timeout 120 $B check --backend wgpu --suite full > "$OUT/check_wgpu.txt" 2>&1
  echo "check wgpu rc=$?"; grep -E "FAIL" "$OUT/check_wgpu.txt" | head -5; tail -1 "$OUT/check_wgpu.txt"
  L="$OUT/bench_hip.log"
  timeout 150 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 \
    --iters 20 --json "$OUT/bench_hip_gptoss.json" > "$L" 2>&1; echo "bench gpt-oss rc=$?"
  timeout 150 $B bench --backend hip --shape deepseek-r1 --tokens 1,8,64,512,2048 \
    --iters 20 --json "$OUT/bench_hip_dsr1.json" >> "$L" 2>&1; echo "bench dsr1 rc=$?"
  summary "$L"
  X="$OUT/variants.log"
  { echo "## MXMOE_HIP_GEMV_PF=1"
    MXMOE_HIP_GEMV_PF=1 timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 20
    MXMOE_HIP_GEMV_PF=1 timeout 60 $B bench --backend hip --shape deepseek-r1 --tokens 1 --iters 20
    echo "## MXMOE_HIP_FUSED_COMBINE=0 MXMOE_HIP_FUSED_ROUTE=0 (the separate route, lists, combine kernels)"
    MXMOE_HIP_FUSED_COMBINE=0 MXMOE_HIP_FUSED_ROUTE=0 timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 20 --no-check
    echo "## MXMOE_HIP_HOST_PROFILE=1"
    MXMOE_HIP_HOST_PROFILE=1 timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 20 --no-check
  } > "$X" 2>&1
  summary "$X"; grep "host profile" "$X" | tail -4
  clocks >> "$L"
  kill $SMI 2>/dev/null
  exit 0
fi
L="$OUT/bench_hip.log"
MXMOE_HIP_HOST_PROFILE=1 timeout 150 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 \
  --iters 20 --json "$OUT/bench_hip_gptoss.json" > "$L" 2>&1; echo "bench gpt-oss rc=$?"
MXMOE_HIP_HOST_PROFILE=1 timeout 150 $B bench --backend hip --shape deepseek-r1 --tokens 1,8,64,512,2048 \
  --iters 20 --json "$OUT/bench_hip_dsr1.json" >> "$L" 2>&1; echo "bench dsr1 rc=$?"
summary "$L"; grep "host profile" "$L" | sort -u -t, -k1,1 | head -12
X="$OUT/crossover.log"
for path in gemv gemm; do
  echo "## MXMOE_HIP_MOE_PATH=$path" >> "$X"
  MXMOE_HIP_MOE_PATH=$path timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 16,64,128,256 \
    --iters 10 --no-check >> "$X" 2>&1
  MXMOE_HIP_MOE_PATH=$path timeout 60 $B bench --backend hip --shape deepseek-r1 --tokens 8,32,64 \
    --iters 10 --no-check >> "$X" 2>&1
done
summary "$X"
clocks >> "$L"
kill $SMI 2>/dev/null
