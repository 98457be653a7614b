#!/usr/bin/env bash
# Session 12, third call: where the L1 / shared-memory traffic of the two prefill GEMMs comes from
# (Nsight Compute's L1TEX and SM throughput breakdowns, the memory tables, stall sampling by
# source line), DeepSeek-R1 2048 tokens, gemm1 t64; then gpt-oss-120b at 1 token (default path)
# on whatever card came. Results in $OUT/ncu2.tgz.
set -uo pipefail
O="${OUT:-/tmp/out}"; W=/tmp/ncu2; mkdir -p "$O" $W; S0=$(date +%s); BUDGET="${BUDGET:-300}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
pack() { (cd $W && tar czf "$O/ncu2.tgz" .); }
L="$W/steps.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$W/gpu.txt"
gunzip -c .dev-main/s12/mxmoe.gz > /tmp/mxmoe; chmod +x /tmp/mxmoe; B=/tmp/mxmoe
export MXMOE_REQUIRE_HIP=1
NCU=/usr/local/cuda/bin/ncu
M="--metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed_op_ldgsts.sum,smsp__inst_executed.sum"
prof() { # name variant shape kernel-regex
  left 60 || return
  MXMOE_HIP_MMA_VARIANT=$2 timeout 150 $NCU -k "regex:$4" --launch-skip 2 --launch-count 1 $M \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SourceCounters \
    $B bench --backend hip --shape $3 --tokens 2048 --iters 2 --no-check > "$W/ncu_$1.txt" 2>&1
  echo "$(el)s ncu $1 rc=$?" | tee -a "$L"; pack
}
prof ds_wg wg deepseek-r1 'moe_gemm1_mma_t64_wg_cb4'
prof ds_mma "" deepseek-r1 'moe_gemm1_mma_t64_cb4'
left 40 && { timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4 --iters 50 > "$W/bench_1tok.log" 2>&1; echo "$(el)s bench 1 token rc=$?" | tee -a "$L"; }
pack
