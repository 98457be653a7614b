#!/usr/bin/env bash
# wgpucoop9's one H200 call (device timeout 220 s): the cooperative GEMM built trusted by default
# (k64/k64p/k64pw without naga's index clamps and loop bounding) against MXMOE_WGPU_COOP_CHECKED=1.
#   1. in parallel (correctness only): (a) MXMOE_GEMV_PAIRS=0 check --suite full --filter moe/
#      (every MoE case through the coop GEMM), (b) check --suite full (the default paths);
#   2. then, alone on the GPU, bench at 2048 tokens, default (A) and opt-out (B) alternating:
#      gpt-oss A, B, deepseek A, B, then gpt-oss A, B and deepseek A, B again while BUDGET lasts.
# Results: $OUT/wgpucoop9.tgz (re-packed after each step).
set -uo pipefail
O="${OUT:-/tmp/out}"; R=/tmp/r9; mkdir -p "$R" "$O"; S0=$(date +%s)
B=/tmp/mxmoe; gunzip -c .dev-wgpucoop9/mxmoe.gz > "$B"; chmod +x "$B"
BUDGET="${BUDGET:-210}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$R/steps.txt"
el() { echo $(( $(date +%s) - S0 )); }
pack() { (cd "$R" && tar czf "$O/wgpucoop9.tgz" .); }
st() { echo "$(el)s $*" | tee -a "$L"; pack; }
left() { echo $(( BUDGET - $(el) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$R/gpu.txt" 2>&1
timeout 15 "$B" info > "$R/info.txt" 2>&1; st "info rc=$?"
( MXMOE_GEMV_PAIRS=0 timeout 140 "$B" check --backend wgpu --suite full --filter moe/ > "$R/check_moe_coop_forced.txt" 2>&1; echo "rc=$?" >> "$R/check_moe_coop_forced.txt" ) &
PA=$!
( timeout 100 "$B" check --backend wgpu --suite full > "$R/check_full.txt" 2>&1; echo "rc=$?" >> "$R/check_full.txt" ) &
PB=$!
wait $PB; st "(b) full check: $(tail -3 "$R/check_full.txt" | tr '\n' ' ' | cut -c1-220)"
wait $PA; st "(a) forced coop check: $(tail -3 "$R/check_moe_coop_forced.txt" | tr '\n' ' ' | cut -c1-220)"
bench() { # name shape env...
  local n=$1 sh=$2; shift 2
  local t; t=$(left); [ "$t" -gt 45 ] && t=45
  [ "$t" -lt 12 ] && { st "skip $n (budget)"; return 1; }
  env "$@" timeout "$t" "$B" bench --backend wgpu --shape "$sh" --tokens 2048 --iters 10 --json "$R/bench_$n.json" > "$R/bench_$n.log" 2>&1
  st "$n rc=$? $(grep -h 'M = 2048: wall' "$R/bench_$n.log" | cut -c1-200)"
}
bench gptoss_A1 gpt-oss-120b && bench gptoss_B1 gpt-oss-120b MXMOE_WGPU_COOP_CHECKED=1 \
 && bench dsr1_A1 deepseek-r1 && bench dsr1_B1 deepseek-r1 MXMOE_WGPU_COOP_CHECKED=1 \
 && bench gptoss_B2 gpt-oss-120b MXMOE_WGPU_COOP_CHECKED=1 && bench gptoss_A2 gpt-oss-120b \
 && bench dsr1_B2 deepseek-r1 MXMOE_WGPU_COOP_CHECKED=1 && bench dsr1_A2 deepseek-r1
st "done"
