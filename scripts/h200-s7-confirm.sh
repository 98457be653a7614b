#!/usr/bin/env bash
# Session 7, call D: the final code (route fold only in the separate warp route) — HIP catalog
# and forced-GEMM catalog, the gpt-oss-120b bench on HIP, then matmul_ogs on gpt-oss-120b in the
# same call (the ratio of the middle goal). Results in $OUT/confirm.tgz.
# Usage (device tool): binary at .dev-main/mxmoe; carry [".gl", ".dev-main", ".peers"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/confirm.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=.dev-main/mxmoe
el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../confirm.tgz .); }
MXMOE_REQUIRE_HIP=1 timeout 110 $B check --backend hip --suite full > "$R/check_hip.txt" 2>&1
st "check hip full rc=$? $(tail -1 $R/check_hip.txt | cut -c1-120)"
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full --filter moe/ > "$R/check_gemm_forced.txt" 2>&1
st "check GEMM forced rc=$? $(tail -1 $R/check_gemm_forced.txt | cut -c1-120)"
timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 \
  --json "$R/bench_gptoss.json" > "$R/bench_gptoss.log" 2>&1; st "bench gpt-oss rc=$?"
T=$(mktemp -d); (cd .peers && OUT="$T" timeout 90 python3 peer_triton_ogs.py gpt-oss-120b) > "$R/peers.log" 2>&1
st "peers rc=$?"
grep -h -E "M = [0-9]+: (wall|passes)" "$R"/*.log 2>/dev/null | cut -c1-220 >> "$R/steps.txt"
grep -h -E "M=|copy" "$R/peers.log" | cut -c1-160 >> "$R/steps.txt"
st "done"
