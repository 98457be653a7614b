#!/usr/bin/env bash
# One H200 measuring run (the device tool), everything in one call so every figure shares the
# machine and the clock: conformance, mxmoe bench on both model shapes, and the peers
# (vLLM's triton_kernels matmul_ogs, torch _grouped_mm on bf16 weights, the emulation) at the
# same token counts. Expects the release binary at target/release/mxmoe, the Vulkan/GL loader
# .debs in .gl/ and the peer scripts (with triton_kernels in .peers/.tk) in .peers/.
# Writes its logs and JSON to $OUT. Usage: scripts/h200.sh [check] [bench] [peers]
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export WGPU_BACKEND=vulkan MXMOE_ADAPTER="${MXMOE_ADAPTER:-NVIDIA}"
steps="${*:-check bench peers}"
bin=target/release/mxmoe
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/info.txt" 2>&1
$bin info >> "$OUT/info.txt" 2>&1
for s in $steps; do case $s in
  check)
    $bin check --backend wgpu --suite full --json "$OUT/check_full.json" > "$OUT/check.txt" 2>&1
    tail -3 "$OUT/check.txt" ;;
  bench)
    $bin bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 50 \
      --json "$OUT/bench_gptoss.json" > "$OUT/bench.log" 2>&1
    $bin bench --backend wgpu --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 50 \
      --json "$OUT/bench_dsr1.json" >> "$OUT/bench.log" 2>&1
    grep -v "^  M = .*: \(warm\|check\)" "$OUT/bench.log" | tail -30 ;;
  peers)   # matmul_ogs, with torch _grouped_mm (bf16 resident) and copy bandwidth
    (cd .peers && OUT="$OUT" python3 peer_triton_ogs.py) > "$OUT/peers.log" 2>&1
    tail -40 "$OUT/peers.log" ;;
  emulation)   # the dequantize-then-bf16 emulation (slow: minutes)
    (cd .peers && OUT="$OUT" python3 peer_torch_moe.py) > "$OUT/peers_torch.log" 2>&1
    tail -30 "$OUT/peers_torch.log" ;;
esac; done
