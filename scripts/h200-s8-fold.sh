#!/usr/bin/env bash
# Session 8, call 3: the conversion in the fused route kernels' extra blocks + 32-row gemv2.
# Results: $OUT/fold.tgz
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=.dev-main/mxmoe
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../fold.tgz .); }
export MXMOE_REQUIRE_HIP=1
$B info > "$R/info.txt" 2>&1; st "info (JIT) rc=$?"
timeout 120 $B check --backend hip --suite full > "$R/check_hip.txt" 2>&1; st "check hip full rc=$? $(tail -1 $R/check_hip.txt | cut -c1-100)"
MXMOE_HIP_GEMV_PAIRS=1000 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_gemv.txt" 2>&1; st "check GEMV forced rc=$? $(tail -1 $R/check_gemv.txt | cut -c1-100)"
MXMOE_HIP_GEMV2_ROWS=32 MXMOE_HIP_GEMV_PAIRS=1000 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_gemv32.txt" 2>&1; st "check GEMV forced rows32 rc=$? $(tail -1 $R/check_gemv32.txt | cut -c1-100)"
MXMOE_HIP_GEMV_PAIRS=0 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_gemm.txt" 2>&1; st "check GEMM forced rc=$? $(tail -1 $R/check_gemm.txt | cut -c1-100)"
timeout 50 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64 --iters 30 --json "$R/g.json" > "$R/g.log" 2>&1; st "bench gpt-oss rc=$?"
timeout 40 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 30 --json "$R/d.json" > "$R/d.log" 2>&1; st "bench dsr1 rc=$?"
timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 30 --bf16-activations --json "$R/gb.json" > "$R/gb.log" 2>&1; st "bench gpt-oss bf16 rc=$?"
for f in "$R"/*.log; do echo "== $(basename $f)"; grep -hE "M = [0-9]+: (wall|passes)" "$f" | cut -c1-200; done >> "$R/steps.txt"
st done
