#!/usr/bin/env bash
# Session 13's layouts under Nsight Compute (after scripts/h100-s13-layouts.sh has timed them):
# does the L1 data pipe stop being the limit? DeepSeek-R1 2048 tokens, gemm1 on 64-pair tiles
# (K = 7168), wg256 (session 12's profile: LSU wavefronts 79 %, tensor pipe 30 %) against wg256c,
# each on the stored and the rows order of the weights. Same binary as the layouts script
# (.dev-main/mxmoe.gz). Results in $OUT/ncu13.tgz.
set -uo pipefail
O="${OUT:-/tmp/out}"; W=/tmp/ncu13; mkdir -p "$O" $W; S0=$(date +%s); BUDGET="${BUDGET:-360}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
pack() { (cd $W && tar czf "$O/ncu13.tgz" .); }
L="$W/steps.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$W/gpu.txt"
gunzip -c .dev-main/mxmoe.gz > /tmp/mxmoe; chmod +x /tmp/mxmoe; B=/tmp/mxmoe
export MXMOE_REQUIRE_HIP=1
NCU=/usr/local/cuda/bin/ncu
M="--metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed_op_ldgsts.sum,smsp__inst_executed.sum"
prof() { # name knobs kernel-regex
  left 60 || return
  env $2 timeout 150 $NCU -k "regex:$3" --launch-skip 2 --launch-count 1 $M \
    --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
    $B bench --backend hip --shape deepseek-r1 --tokens 2048 --iters 2 --no-check > "$W/ncu_$1.txt" 2>&1
  echo "$(el)s ncu $1 rc=$?" | tee -a "$L"; pack
}
prof wg256 "MXMOE_HIP_MMA_VARIANT=wg256" 'moe_gemm1_mma_t64_wg256_cb4'
prof wg256c "MXMOE_HIP_MMA_VARIANT=wg256c" 'moe_gemm1_mma_t64_wg256c_cb4'
prof wg256_rows "MXMOE_HIP_MMA_VARIANT=wg256 MXMOE_HIP_NV4_ROWS=1" 'moe_gemm1_mma_t64_wg256_cb4'
prof wg256c_rows "MXMOE_HIP_MMA_VARIANT=wg256c MXMOE_HIP_NV4_ROWS=1" 'moe_gemm1_mma_t64_wg256c_cb4'
pack
