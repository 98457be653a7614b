#!/usr/bin/env bash
# Session 12: the wgmma GEMM (hip/gemm_wgmma.h, MXMOE_HIP_MMA_VARIANT=wg) on the device for the
# first time: its correctness (every MoE case of the full catalog with the GEMM forced), then
# GPU time against the default mma GEMM, alternating, same binary. mxmoe_swap: the same binary
# with the descriptor's LBO / SBO exchanged, tried only if the first fails (a hedge on how the
# hardware reads the unswizzled K-major layout).
# Usage (device tool): .dev-main/s12/{mxmoe.gz, mxmoe_swap.gz}; carry [".gl", ".dev-main"];
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash scripts/h100-s12-wgmma.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); BUDGET="${BUDGET:-540}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
L="$O/steps.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$O/gpu.txt"
for v in mxmoe mxmoe_swap; do gunzip -c .dev-main/s12/$v.gz > /tmp/$v; chmod +x /tmp/$v; done
export MXMOE_REQUIRE_HIP=1
B=/tmp/mxmoe
MXMOE_HIP_MMA_VARIANT=wg MXMOE_HIP_GEMV_PAIRS=0 timeout 150 $B check --backend hip --suite full --filter moe/ > "$O/check_wg.txt" 2>&1
rc=$?; echo "$(el)s wg GEMM forced rc=$rc $(tail -1 $O/check_wg.txt | cut -c1-120)" | tee -a "$L"
if [ $rc -ne 0 ]; then
  MXMOE_HIP_MMA_VARIANT=wg MXMOE_HIP_GEMV_PAIRS=0 timeout 150 /tmp/mxmoe_swap check --backend hip --suite full --filter moe/ > "$O/check_wg_swap.txt" 2>&1
  rc2=$?; echo "$(el)s SWAP wg GEMM forced rc=$rc2 $(tail -1 $O/check_wg_swap.txt | cut -c1-120)" | tee -a "$L"
  [ $rc2 -eq 0 ] && B=/tmp/mxmoe_swap
fi
echo "bench binary: $B" | tee -a "$L"
for r in 1 2; do
for v in "" wg; do
  left 70 || break
  MXMOE_HIP_MMA_VARIANT=$v timeout 100 $B bench --backend hip --shape gpt-oss-120b --tokens 64,256,2048 --iters 20 --json "$O/b_${v:-mma}_g$r.json" > "$O/b_${v:-mma}_g$r.log" 2>&1
  echo "$(el)s ${v:-mma} gpt-oss r$r rc=$?" | tee -a "$L"
  left 60 || break
  MXMOE_HIP_MMA_VARIANT=$v timeout 100 $B bench --backend hip --shape deepseek-r1 --tokens 64,512,2048 --iters 20 --json "$O/b_${v:-mma}_d$r.json" > "$O/b_${v:-mma}_d$r.log" 2>&1
  echo "$(el)s ${v:-mma} deepseek r$r rc=$?" | tee -a "$L"
done; done
left 40 && { MXMOE_HIP_MMA_VARIANT=wg timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 256,2048 --iters 20 --bf16-activations --json "$O/b_wg_gbf16.json" > "$O/b_wg_gbf16.log" 2>&1; echo "$(el)s wg gpt-oss bf16 rc=$?" | tee -a "$L"; }
for f in "$O"/b_*.log; do echo "== $f"; grep -E "M = [0-9]+: (wall|passes)" "$f" | sed -E 's/floor.*rel-L2/rel-L2/' | cut -c1-200; done > "$O/summary.txt"
tail -60 "$O/summary.txt"
