#!/usr/bin/env bash
# Session 5, fourth call: the matrix-core GEMV (MXMOE_HIP_GEMV=mma|mmapf, hip/gemv_mma.h; helper
# hipmma, never run on a GPU before) on main after merging it with the mma GEMM (hipgemm3): the
# full catalog with the GEMV forced on every MoE case (MXMOE_HIP_GEMV_PAIRS=1000) for both
# variants, then bench beside the defaults (v3 GEMV up to 1 pair per expert, the mma GEMM above).
# Usage (device tool): binary at .dev-main/mxmoe, this script as .dev-main/gemvmma.sh; carry
# [".dev-main"]; command: bash .dev-main/gemvmma.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
export MXMOE_REQUIRE_HIP=1
timeout 60 $B info > "$O/info.txt" 2>&1; st "info (JIT) rc=$?"
F="MXMOE_HIP_GEMV_PAIRS=1000"
for v in mma mmapf; do
  env MXMOE_HIP_GEMV=$v $F timeout 25 $B check --backend hip --suite full > "$O/check_$v.txt" 2>&1; st "check $v forced rc=$? $(tail -1 $O/check_$v.txt | cut -c1-90)"
done
grep -h "FAIL" "$O"/check_*.txt | head -10 | cut -c1-200 | tee -a "$L"
G="--shape gpt-oss-120b --tokens 1,4,16,64,256 --iters 20"
D="--shape deepseek-r1 --tokens 1,8,64 --iters 20"
env MXMOE_HIP_GEMV=mma $F timeout 25 $B bench --backend hip $G --json "$O/mma_gptoss.json" > "$O/mma_gptoss.log" 2>&1; st "bench mma gpt-oss rc=$?"
timeout 25 $B bench --backend hip $G --json "$O/default_gptoss.json" > "$O/default_gptoss.log" 2>&1; st "bench default gpt-oss rc=$?"
env MXMOE_HIP_GEMV=mma $F timeout 30 $B bench --backend hip $D --json "$O/mma_dsr1.json" > "$O/mma_dsr1.log" 2>&1; st "bench mma dsr1 rc=$?"
timeout 30 $B bench --backend hip $D --json "$O/default_dsr1.json" > "$O/default_dsr1.log" 2>&1; st "bench default dsr1 rc=$?"
env MXMOE_HIP_GEMV=mmapf $F timeout 20 $B bench --backend hip --shape gpt-oss-120b --tokens 1,16,256 --iters 20 > "$O/mmapf_gptoss.log" 2>&1; st "bench mmapf gpt-oss rc=$?"
grep -H -E "M = [0-9]+: (wall|passes)" "$O"/*.log | sed 's#.*/##' | cut -c1-200 >> "$L"
(cd "$O" && tar czf gemvmma.tgz --exclude gemvmma.tgz --exclude steps.txt . )
