#!/usr/bin/env bash
# Session 5, second call: the one-warp route + lists (MXMOE_HIP_ROUTE=v4) and the tighter tile
# slot count (max_tiles: 4 slots for one gpt-oss token instead of 5 on HIP, 4 one-row tiles
# instead of 8 on wgpu), both not yet run on a GPU.
# Usage (device tool): the release binary at .dev-main/mxmoe; carry [".gl", ".dev-main"];
# command: for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/route.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; R=$(mktemp -d); S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$R/steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
$B info > "$R/info.txt" 2>&1; st "info rc=$?"
MXMOE_HIP_ROUTE=v4 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$R/check_hip_v4.txt" 2>&1; st "check hip v4 rc=$? $(tail -1 $R/check_hip_v4.txt)"
timeout 90 $B check --backend wgpu --suite full > "$R/check_wgpu.txt" 2>&1; st "check wgpu rc=$? $(tail -1 $R/check_wgpu.txt)"
for v in v3 v4; do
  MXMOE_HIP_ROUTE=$v timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --json "$R/hip_gptoss_$v.json" > "$R/hip_gptoss_$v.log" 2>&1; st "hip gpt-oss $v rc=$?"
  MXMOE_HIP_ROUTE=$v timeout 50 $B bench --backend hip --shape deepseek-r1 --tokens 1,8 --iters 20 --json "$R/hip_dsr1_$v.json" > "$R/hip_dsr1_$v.log" 2>&1; st "hip dsr1 $v rc=$?"
done
timeout 50 $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 20 --json "$R/wgpu_gptoss.json" > "$R/wgpu_gptoss.log" 2>&1; st "wgpu gpt-oss rc=$?"
grep -H -E "M = [0-9]+: (wall|passes)" $R/*.log | sed 's#.*/##' | cut -c1-210 | tee -a "$L"
cp "$L" "$O/"; (cd "$R" && tar czf "$O/route.tgz" .)
