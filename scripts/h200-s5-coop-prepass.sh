#!/usr/bin/env bash
# Kernels k64p and k64pw of the cooperative GEMM (issue 8; shaders/moe_gemm_coop.wgsl
# `coop64p_gemm1/2`, `coop64pw_gemm1/2`, pre-passes shaders/moe_coop_prepass.wgsl), NOT yet run
# on a device: the activations are converted to f16 hi/lo once per forward with one exponent
# per row; k64p's MMAs load them straight from storage, k64pw copies them into workgroup
# memory each K step (k64 converted them once per 128-column block: ~12 of its 18 ms at
# gpt-oss 2048 tokens were loads + staging, docs/h200-2026-12-01s5-route).
# Order = value: correctness of k64p through the GEMM first, then the same-call comparison
# k64p / k64pw / k64 at gpt-oss 2048 (default, then MXMOE_WGPU_TRUSTED=1), DeepSeek-R1 2048,
# k64pw through the GEMM cases, the full catalog. Every step is skipped when the budget
# (BUDGET seconds, default 90: the first ~5 steps) would run out; BUDGET=400 runs them all.
# Usage (device tool): the release binary at .dev-wgpuwall/mxmoe (MXMOE_BIN overrides), this
# script anywhere; carry [".gl", ".dev-wgpuwall"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-wgpuwall/coop-prepass.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-wgpuwall/mxmoe}"
BUDGET="${BUDGET:-90}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/steps.txt"; el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$L"; }
left() { [ $(( BUDGET - $(el) )) -ge "$1" ]; }
MXMOE_COOP_KERNEL=k64p $B info > "$O/info.txt" 2>&1; st "info k64p rc=$? $(grep -m1 'prefill GEMM' $O/info.txt | cut -c1-160)"
# 1. every MoE case of the full catalog through the k64p GEMM (all schemes, both activations,
#    biases, chunks, partial tiles)
left 50 && { MXMOE_COOP_KERNEL=k64p MXMOE_GEMV_PAIRS=0 timeout 60 $B check --backend wgpu --suite full --filter moe/ > "$O/check_forced_gemm_k64p.txt" 2>&1; st "check moe/ forced GEMM k64p rc=$? $(tail -1 $O/check_forced_gemm_k64p.txt)"; }
# 2. bench rows (each checked against the CPU reference on sampled tokens): gpt-oss k64p,
#    k64pw and k64 (same call) first, then with MXMOE_WGPU_TRUSTED=1, then DeepSeek-R1
b() { # kernel trusted shape timeout
  local log="$O/bench_$3.log"
  echo "=== MXMOE_COOP_KERNEL=$1 MXMOE_WGPU_TRUSTED=$2" >> "$log"
  MXMOE_COOP_KERNEL=$1 MXMOE_WGPU_TRUSTED=$2 timeout "$4" $B bench --backend wgpu --shape "$3" --tokens 2048 --iters 10 >> "$log" 2>&1
  st "bench $3 2048 $1 trusted=$2 rc=$? $(grep -h -E 'M = 2048: (wall|passes)' $log | tail -2 | tr '\n' ' ' | cut -c1-300)"
}
for t in 0 1; do
  for k in k64p k64pw k64; do left 15 && b $k $t gpt-oss-120b 18; done
done
for t in 0 1; do
  for k in k64p k64pw k64; do left 20 && b $k $t deepseek-r1 25; done
done
# 3. k64pw through every MoE case, then the whole catalog with k64p (default crossover)
left 25 && { MXMOE_COOP_KERNEL=k64pw MXMOE_GEMV_PAIRS=0 timeout 30 $B check --backend wgpu --suite full --filter moe/ > "$O/check_forced_gemm_k64pw.txt" 2>&1; st "check moe/ forced GEMM k64pw rc=$? $(tail -1 $O/check_forced_gemm_k64pw.txt)"; }
left 20 && { MXMOE_COOP_KERNEL=k64p timeout $(( BUDGET - $(el) )) $B check --backend wgpu --suite full > "$O/check_full_k64p.txt" 2>&1; st "check full k64p rc=$? $(tail -1 $O/check_full_k64p.txt)"; }
st done
