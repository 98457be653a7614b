#!/usr/bin/env bash
# One session's closing measurement on the H200 (device tool), in one call (PHASE=all, the
# default: ~6-7 minutes, timeout_s 600) or two calls of < 10 minutes:
#   PHASE=a  mxmoe info; the full catalog on wgpu (Vulkan) and on the HIP backend (CUDA driver);
#            mxmoe bench on wgpu, both model shapes, the whole token matrix
#   PHASE=b  mxmoe bench on the HIP backend, same matrix; then the peers in the same call:
#            matmul_ogs + grouped_mm (peer_triton_ogs.py) and the emulation (peer_torch_moe.py)
# Expects the release binary (built with --features hip) at $MXMOE_BIN (default .dev-main/mxmoe),
# .gl/ (Vulkan/GL loaders, unpacked by the caller) and .peers/ (with .tk/) for phase b.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B="${MXMOE_BIN:-.dev-main/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
T=$(mktemp -d)
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$T/clocks.csv" 2>&1 &
SMI=$!
clocks() { echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' "$T/clocks.csv" | sort | uniq -c | sort -rn | head -6; }
P="${PHASE:-all}"
if [ "$P" = a ] || [ "$P" = all ]; then
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
  timeout 170 $B check --backend wgpu --suite full --json "$T/cw.json" > "$OUT/check_wgpu.txt" 2>&1
  echo "check wgpu rc=$?"; grep -E "FAIL" "$OUT/check_wgpu.txt" | head -5; tail -3 "$OUT/check_wgpu.txt"
  MXMOE_REQUIRE_HIP=1 timeout 100 $B check --backend hip --suite full --json "$T/ch.json" > "$OUT/check_hip.txt" 2>&1
  echo "check hip rc=$?"; grep -E "FAIL" "$OUT/check_hip.txt" | head -5; tail -3 "$OUT/check_hip.txt"
  timeout 170 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 \
    --json "$OUT/bench_wgpu_gptoss.json" > "$OUT/bench_wgpu.log" 2>&1; echo "bench wgpu gpt-oss rc=$?"
  timeout 190 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 30 \
    --json "$OUT/bench_wgpu_dsr1.json" >> "$OUT/bench_wgpu.log" 2>&1; echo "bench wgpu dsr1 rc=$?"
  clocks >> "$OUT/bench_wgpu.log"
  grep -E "^ +[0-9]+ +[0-9.]+ " "$OUT/bench_wgpu.log" | cut -c1-160
fi
if [ "$P" = b ] || [ "$P" = all ]; then
  timeout 140 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 \
    --json "$OUT/bench_hip_gptoss.json" > "$OUT/bench_hip.log" 2>&1; echo "bench hip gpt-oss rc=$?"
  timeout 170 $B bench --backend hip --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 30 \
    --json "$OUT/bench_hip_dsr1.json" >> "$OUT/bench_hip.log" 2>&1; echo "bench hip dsr1 rc=$?"
  clocks >> "$OUT/bench_hip.log"
  grep -E "^ +[0-9]+ +[0-9.]+ " "$OUT/bench_hip.log" | cut -c1-160
  (cd .peers && OUT="$T" timeout 170 python3 peer_triton_ogs.py) > "$OUT/peers.log" 2>&1
  grep -E "M=|copy" "$OUT/peers.log" | cut -c1-150
  (cd .peers && OUT="$T" timeout 120 python3 peer_torch_moe.py) >> "$OUT/peers.log" 2>&1
  tail -16 "$OUT/peers.log" | cut -c1-150
  clocks >> "$OUT/peers.log"
fi
kill $SMI 2>/dev/null
