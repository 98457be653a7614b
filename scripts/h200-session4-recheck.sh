#!/usr/bin/env bash
# Session 4, last call: the bench's repeated check (5 checked forwards per row) on the H200 with
# the defaults, and with the wgpu fused combine forced on (the race the repeats exist to catch).
# Usage (device tool): binary at .dev-main/mxmoe, this script as .dev-main/recheck.sh; carry
# [".gl", ".dev-main"]; command: for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/recheck.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; S0=$(date +%s); B=.dev-main/mxmoe
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
timeout 60 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,8 --iters 10 > "$O/wgpu_dsr1_default.log" 2>&1; st "wgpu dsr1 default rc=$?"
MXMOE_WGPU_FUSED_COMBINE=1 timeout 60 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,1,1 --iters 10 > "$O/wgpu_dsr1_fused.log" 2>&1; st "wgpu dsr1 fused on rc=$?"
timeout 40 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,16 --iters 10 > "$O/wgpu_gptoss.log" 2>&1; st "wgpu gpt-oss rc=$?"
MXMOE_REQUIRE_HIP=1 timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,16 --iters 10 > "$O/hip_gptoss.log" 2>&1; st "hip gpt-oss rc=$?"
MXMOE_REQUIRE_HIP=1 timeout 60 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 10 > "$O/hip_dsr1.log" 2>&1; st "hip dsr1 rc=$?"
grep -h -E "rel-L2 vs cpu|^error" "$O"/*.log | sed 's/.*gpu \([0-9.]*\) ms.*\(rel-L2.*\)/gpu \1 \2/' | cut -c1-160 | tee -a "$L"
