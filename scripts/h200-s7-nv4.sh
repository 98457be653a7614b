#!/usr/bin/env bash
# Session 7, call A: the nv4 code layout (hip/nv4.h) for the matrix-core GEMV and GEMM, and the
# `mmab` GEMV (bf16 activations). Catalogs first (default kernels; mmab forced on every MoE
# case; the GEMM forced on every MoE case), then benches: gpt-oss-120b and DeepSeek-R1 with the
# defaults and with MXMOE_HIP_GEMV=mmab. Results re-packed into $OUT/nv4.tgz after each step.
# Usage (device tool): binary at .dev-main/mxmoe; carry [".gl", ".dev-main"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/nv4.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=.dev-main/mxmoe
BUDGET="${BUDGET:-280}"
el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../nv4.tgz .); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
nvidia-smi -L > "$R/info.txt" 2>&1; git log -1 --format='%H %s' >> "$R/info.txt" 2>/dev/null
MXMOE_REQUIRE_HIP=1 timeout 110 $B check --backend hip --suite full > "$R/check_hip.txt" 2>&1
st "check hip full rc=$? $(tail -1 $R/check_hip.txt | cut -c1-120)"
MXMOE_HIP_GEMV=mmab MXMOE_HIP_GEMV_PAIRS=1000 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full > "$R/check_mmab.txt" 2>&1
st "check mmab forced rc=$? $(tail -1 $R/check_mmab.txt | cut -c1-120)"
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full --filter moe/ > "$R/check_gemm_forced.txt" 2>&1
st "check GEMM forced rc=$? $(tail -1 $R/check_gemm_forced.txt | cut -c1-120)"
left 60 && { timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 \
  --json "$R/bench_gptoss.json" > "$R/bench_gptoss.log" 2>&1; st "bench gpt-oss rc=$?"; }
left 30 && { MXMOE_HIP_GEMV=mmab timeout 30 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 30 \
  --json "$R/bench_gptoss_mmab.json" > "$R/bench_gptoss_mmab.log" 2>&1; st "bench gpt-oss mmab rc=$?"; }
left 70 && { timeout 80 $B bench --backend hip --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 30 \
  --json "$R/bench_dsr1.json" > "$R/bench_dsr1.log" 2>&1; st "bench dsr1 rc=$?"; }
left 35 && { MXMOE_HIP_GEMV=mmab timeout 40 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 30 \
  --json "$R/bench_dsr1_mmab.json" > "$R/bench_dsr1_mmab.log" 2>&1; st "bench dsr1 mmab rc=$?"; }
grep -h -E "M = [0-9]+: (wall|passes)" "$R"/*.log 2>/dev/null | cut -c1-220 >> "$R/steps.txt"
st "done"
