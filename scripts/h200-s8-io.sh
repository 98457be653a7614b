#!/usr/bin/env bash
# Session 8, call 5: the HIP output's room made while the device works (touched_vec), and wgpu's
# huge-page advice for large readback destinations on / off (X_NO_HUGE: a switch of this test
# binary only). Results: $OUT/io.tgz
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=/tmp/mxmoe; gunzip -c .dev-main/mxmoe.gz > $B; chmod +x $B
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../io.tgz .); }
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA MXMOE_REQUIRE_HIP=1
$B info > "$R/info.txt" 2>&1; st "info rc=$?"
timeout 40 $B check --backend hip --suite full --filter moe/ > "$R/check_hip.txt" 2>&1; st "check hip moe rc=$? $(tail -1 $R/check_hip.txt | cut -c1-90)"
timeout 50 $B bench --backend hip --shape gpt-oss-120b --tokens 1,2048 --iters 30 --json "$R/hip_g.json" > "$R/hip_g.log" 2>&1; st "hip gpt-oss rc=$?"
timeout 60 $B bench --backend hip --shape deepseek-r1 --tokens 1,2048 --iters 30 --json "$R/hip_d.json" > "$R/hip_d.log" 2>&1; st "hip dsr1 rc=$?"
for mode in on off; do
  if [ $mode = off ]; then export X_NO_HUGE=1; fi
  timeout 50 $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 30 --json "$R/wgpu_g_$mode.json" > "$R/wgpu_g_$mode.log" 2>&1; st "wgpu gpt-oss huge $mode rc=$?"
  timeout 70 $B bench --backend wgpu --shape deepseek-r1 --tokens 2048 --iters 30 --json "$R/wgpu_d_$mode.json" > "$R/wgpu_d_$mode.log" 2>&1; st "wgpu dsr1 huge $mode rc=$?"
done
for f in "$R"/*.log; do echo "== $(basename $f)"; grep -hE "M = [0-9]+: (wall|host)" "$f" | cut -c1-260; done >> "$R/steps.txt"
st done
