#!/bin/bash
# Device script for branch wgpucoop2 (issue 8): cooperative GEMM kernel 2 vs kernel 1 on the H200.
# Order: correctness first (full catalog through kernel 2; stop on failure), then benches.
B=./.dev-wgpucoop2/mxmoe
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
T0=$(date +%s)
ts() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/bench.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/info.txt 2>&1
MXMOE_COOP_KERNEL=2 timeout 30 $B info >> $OUT/info.txt 2>&1
ts "check full, kernel 2"
MXMOE_GEMM=coop MXMOE_COOP_KERNEL=2 timeout 75 $B check --backend wgpu --suite full > $OUT/check_k2.txt 2>&1
rc=$?
ts "check rc=$rc"
tail -3 $OUT/check_k2.txt | tee -a $OUT/bench.log
if [ $rc -ne 0 ]; then
  ts "CHECK FAILED: one diagnostic bench of kernel 2 (with its CPU check), then stop"
  MXMOE_GEMM=coop MXMOE_COOP_KERNEL=2 timeout 40 $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 5 >> $OUT/bench.log 2>&1
  exit 1
fi
for k in 2 1; do
  ts "gpt-oss-120b 256 (GEMM forced: MXMOE_GEMV_PAIRS=0), 2048, kernel $k"
  MXMOE_GEMM=coop MXMOE_COOP_KERNEL=$k MXMOE_GEMV_PAIRS=0 timeout 45 $B bench --backend wgpu --shape gpt-oss-120b --tokens 256,2048 --iters 10 --json $OUT/gptoss_k$k.json >> $OUT/bench.log 2>&1
  ts "rc=$?"
done
for k in 2 1; do
  ts "deepseek-r1 2048, kernel $k"
  MXMOE_GEMM=coop MXMOE_COOP_KERNEL=$k timeout 50 $B bench --backend wgpu --shape deepseek-r1 --tokens 2048 --iters 10 --json $OUT/dsr1_k$k.json >> $OUT/bench.log 2>&1
  ts "rc=$?"
done
ts "diagnostic: kernel 2 without MMAs (COOP_DIAG=2, results wrong, --no-check)"
MXMOE_GEMM=coop MXMOE_COOP_KERNEL=2 MXMOE_COOP_DIAG=2 timeout 25 $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 10 --no-check >> $OUT/bench.log 2>&1
ts "done"
