#!/usr/bin/env bash
# Session 7, call C: the hidden states' bf16 conversion folded into v6's warp route kernels
# (mx_route_wx_<nq>, moe_route_lists_w3x_<nq>) for weight-only schemes. HIP catalogs (defaults;
# GEMM forced on every MoE case; GEMV forced on every case), then the gpt-oss-120b bench (f32 and
# bf16 activations) and DeepSeek-R1 at 1 / 8 / 64 tokens. Results in $OUT/fold.tgz.
# Usage (device tool): binary at .dev-main/mxmoe; carry [".gl", ".dev-main"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/fold.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=.dev-main/mxmoe
BUDGET="${BUDGET:-230}"
el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../fold.tgz .); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
MXMOE_REQUIRE_HIP=1 timeout 110 $B check --backend hip --suite full > "$R/check_hip.txt" 2>&1
st "check hip full rc=$? $(tail -1 $R/check_hip.txt | cut -c1-120)"
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full --filter moe/ > "$R/check_gemm_forced.txt" 2>&1
st "check GEMM forced rc=$? $(tail -1 $R/check_gemm_forced.txt | cut -c1-120)"
MXMOE_HIP_GEMV_PAIRS=1000 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full > "$R/check_gemv_forced.txt" 2>&1
st "check GEMV forced rc=$? $(tail -1 $R/check_gemv_forced.txt | cut -c1-120)"
left 60 && { timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 \
  --json "$R/bench_gptoss.json" > "$R/bench_gptoss.log" 2>&1; st "bench gpt-oss rc=$?"; }
left 45 && { timeout 45 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 --bf16-activations \
  --json "$R/bench_gptoss_bf16.json" > "$R/bench_gptoss_bf16.log" 2>&1; st "bench gpt-oss bf16 rc=$?"; }
left 40 && { timeout 45 $B bench --backend hip --shape deepseek-r1 --tokens 1,8,64 --iters 30 \
  --json "$R/bench_dsr1.json" > "$R/bench_dsr1.log" 2>&1; st "bench dsr1 rc=$?"; }
grep -h -E "M = [0-9]+: (wall|passes)" "$R"/*.log 2>/dev/null | cut -c1-220 >> "$R/steps.txt"
st "done"
