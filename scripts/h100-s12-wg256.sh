#!/usr/bin/env bash
# Session 12, fourth call: the wgmma GEMM on 256-row blocks (MXMOE_HIP_MMA_VARIANT=wg256) beside
# wg and the default mma GEMM (same binary, alternating rounds), its catalog with the GEMM
# forced, bf16 activations, and wgpu's decode span as the untimed recording runs it.
# Results in $OUT/wg256.tgz.
set -uo pipefail
O="${OUT:-/tmp/out}"; W=/tmp/wg256; mkdir -p "$O" $W; S0=$(date +%s); BUDGET="${BUDGET:-420}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
pack() { (cd $W && tar czf "$O/wg256.tgz" .); }
L="$W/steps.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$W/gpu.txt"
gunzip -c .dev-main/s12/mxmoe.gz > /tmp/mxmoe; chmod +x /tmp/mxmoe; B=/tmp/mxmoe
export MXMOE_REQUIRE_HIP=1 WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
MXMOE_HIP_MMA_VARIANT=wg256 MXMOE_HIP_GEMV_PAIRS=0 timeout 150 $B check --backend hip --suite full --filter moe/ > "$W/check_wg256.txt" 2>&1
echo "$(el)s wg256 GEMM forced rc=$? $(tail -1 $W/check_wg256.txt | cut -c1-160)" | tee -a "$L"; pack
for r in 1 2; do
for v in "" wg256 wg; do
  left 40 || break
  MXMOE_HIP_MMA_VARIANT=$v timeout 60 $B bench --backend hip --shape deepseek-r1 --tokens 512,2048 --iters 20 > "$W/b_${v:-mma}_d$r.log" 2>&1
  echo "$(el)s ${v:-mma} deepseek r$r rc=$?" | tee -a "$L"
  left 40 || break
  MXMOE_HIP_MMA_VARIANT=$v timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 256,2048 --iters 20 > "$W/b_${v:-mma}_g$r.log" 2>&1
  echo "$(el)s ${v:-mma} gpt-oss r$r rc=$?" | tee -a "$L"; pack
done; done
for v in "" wg256; do
  left 30 || break
  MXMOE_HIP_MMA_VARIANT=$v timeout 50 $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 20 --bf16-activations > "$W/b_${v:-mma}_gbf16.log" 2>&1
  echo "$(el)s ${v:-mma} gpt-oss bf16 rc=$?" | tee -a "$L"
done
left 30 && { timeout 60 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 30 > "$W/b_wgpu_g.log" 2>&1; echo "$(el)s wgpu gpt-oss rc=$?" | tee -a "$L"; }
for f in $W/b_*.log; do echo "== $f"; grep -E "M = [0-9]+: (wall|passes)" "$f" | sed -E 's/floor.*rel-L2/rel-L2/' | cut -c1-220; done > "$W/summary.txt"
pack; cat "$W/summary.txt" | grep -E "==|wall" | cut -c1-120
