#!/usr/bin/env bash
# Session 5, third call (main after merging wgpu5): route v4 for routers with exact scores
# (DeepSeek-R1: 256 threads computing the sigmoid scores) through the whole catalog and the
# DeepSeek decode bench; then wgpu5's follow-up (scripts/h200-s5-wgpu5-followup.sh: the
# cooperative GEMM with naga's index clamps off, and its COOP_DIAG breakdown).
# Usage (device tool): the release binary at .dev-main/mxmoe, this script and the follow-up in
# .dev-main/; carry [".gl", ".dev-main"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/mid.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/route_steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
$B info > "$O/info.txt" 2>&1; st "info rc=$?"
MXMOE_HIP_ROUTE=v4 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$O/check_hip_v4.txt" 2>&1; st "check hip v4 rc=$? $(tail -1 $O/check_hip_v4.txt)"
MXMOE_HIP_ROUTE=v4 timeout 50 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 > "$O/hip_dsr1_v4.log" 2>&1; st "hip dsr1 v4 rc=$?"
grep -h -E "M = [0-9]+: (wall|passes)" "$O/hip_dsr1_v4.log" | cut -c1-200 | tee -a "$L"
mkdir -p .dev-wgpu5 && cp "$B" .dev-wgpu5/mxmoe && OUT="$O/followup" bash .dev-main/followup.sh
