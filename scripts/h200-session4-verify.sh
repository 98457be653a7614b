#!/usr/bin/env bash
# Session 4, verification call after the closing call: new defaults (wgpu fused combine off, HIP
# decode v3); repeat the wgpu DeepSeek-R1 1-token forward that once failed, with the fused combine
# off (the new default) and on (to attribute the failure).
# Usage (device tool): the release binary at .dev-main/mxmoe, this script as .dev-main/verify.sh;
# carry [".gl", ".dev-main"]; command: for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/verify.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; R=$(mktemp -d); S0=$(date +%s); B=.dev-main/mxmoe
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$R/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
$B info > "$R/info.txt" 2>&1; st "info rc=$?"
timeout 90 $B check --backend wgpu --suite full > "$R/check_wgpu.txt" 2>&1; st "check wgpu rc=$? $(tail -1 $R/check_wgpu.txt)"
MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$R/check_hip.txt" 2>&1; st "check hip rc=$? $(tail -1 $R/check_hip.txt)"
timeout 70 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,1,1,1,8 --iters 10 > "$R/dsr1_default.log" 2>&1; st "dsr1 default rc=$?"
MXMOE_WGPU_FUSED_COMBINE=1 MXMOE_GEMV_ONE_ROW=0 timeout 60 $B bench --backend wgpu --shape deepseek-r1 --tokens 1,1,1,1,1,1 --iters 10 > "$R/dsr1_fused.log" 2>&1; st "dsr1 fused on, one-row off rc=$?"
timeout 50 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --json "$R/bench_wgpu_gptoss.json" > "$R/gptoss_wgpu.log" 2>&1; st "gpt-oss wgpu rc=$?"
timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --json "$R/bench_hip_gptoss.json" > "$R/gptoss_hip.log" 2>&1; st "gpt-oss hip rc=$?"
grep -h "rel-L2 vs cpu" $R/dsr1_*.log | cut -c1-60,150-230 | tee -a "$L"
grep -h -E "M = [0-9]+: (wall|passes)" $R/gptoss_*.log | cut -c1-200 | tee -a "$L"
cp "$L" "$O/"; (cd "$R" && tar czf "$O/verify.tgz" .)
