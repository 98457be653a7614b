#!/usr/bin/env bash
# Session 6, third call: routing by rank (route_select_ranked: moe_route_lists_w1g, mx_route_v4)
# and hipgemm6's merged GEMM, before the closing call: the HIP catalog (and with the GEMM forced
# on every MoE case), decode bench of both shapes.
# Usage (device tool): binary at .dev-main/mxmoe, this script as .dev-main/route.sh; carry
# [".dev-main"]; command: bash .dev-main/route.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
export MXMOE_REQUIRE_HIP=1
timeout 60 $B check --backend hip --suite full > "$O/check_hip.txt" 2>&1; st "check hip rc=$? $(tail -1 $O/check_hip.txt | cut -c1-90)"
MXMOE_HIP_GEMV_PAIRS=0 timeout 30 $B check --backend hip --suite full --filter moe/ > "$O/check_hip_gemm.txt" 2>&1; st "check hip gemm forced rc=$? $(tail -1 $O/check_hip_gemm.txt | cut -c1-90)"
grep -h "FAIL" "$O"/check_*.txt | head -10 | cut -c1-200 | tee -a "$L"
timeout 30 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 --json "$O/dsr1.json" > "$O/dsr1.log" 2>&1; st "bench dsr1 rc=$?"
timeout 20 $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 20 > "$O/gptoss.log" 2>&1; st "bench gpt-oss rc=$?"
grep -h -E "M = [0-9]+: (wall|passes)" "$O"/*.log | cut -c1-200 | tee -a "$L"
