#!/usr/bin/env bash
# Kernel k64p of the cooperative GEMM (issue 8; shaders/moe_gemm_coop.wgsl `coop64p_gemm1/2`,
# pre-passes shaders/moe_coop_prepass.wgsl), NOT yet run on a device: the activations are
# converted to f16 hi/lo once per forward with one exponent per row, and the MMAs load them
# straight from storage (k64 converted them once per 128-column block: ~12 of its 18 ms at
# gpt-oss 2048 tokens were loads + staging, docs/h200-2026-12-01s5-route).
# Order = value: correctness of k64p through the GEMM first, then the same-call comparison
# k64p vs k64 (gpt-oss, then DeepSeek-R1, default and MXMOE_WGPU_TRUSTED=1), then the full
# catalog. Every step is skipped when the budget (BUDGET seconds, default 90) would run out.
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
left 25 && { MXMOE_COOP_KERNEL=k64p MXMOE_GEMV_PAIRS=0 timeout 30 $B check --backend wgpu --suite full --filter moe/ > "$O/check_forced_gemm_k64p.txt" 2>&1; st "check moe/ forced GEMM k64p rc=$? $(tail -1 $O/check_forced_gemm_k64p.txt)"; }
# 2. bench rows (checked against the CPU reference on sampled tokens)
b() { # kernel trusted shape timeout
  local log="$O/bench_$3.log"
  echo "=== MXMOE_COOP_KERNEL=$1 MXMOE_WGPU_TRUSTED=$2" >> "$log"
  MXMOE_COOP_KERNEL=$1 MXMOE_WGPU_TRUSTED=$2 timeout "$4" $B bench --backend wgpu --shape "$3" --tokens 2048 --iters 10 >> "$log" 2>&1
  st "bench $3 2048 $1 trusted=$2 rc=$? $(grep -h -E 'M = 2048: (wall|passes)' $log | tail -2 | tr '\n' ' ' | cut -c1-300)"
}
for t in 0 1; do
  left 15 && b k64p $t gpt-oss-120b 18
  left 15 && b k64 $t gpt-oss-120b 18
done
for t in 0 1; do
  left 20 && b k64p $t deepseek-r1 25
  left 20 && b k64 $t deepseek-r1 25
done
# 3. the whole catalog with k64p (default crossover: the GEMM takes the large cases)
left 20 && { MXMOE_COOP_KERNEL=k64p timeout $(( BUDGET - $(el) )) $B check --backend wgpu --suite full > "$O/check_full_k64p.txt" 2>&1; st "check full k64p rc=$? $(tail -1 $O/check_full_k64p.txt)"; }
st done
