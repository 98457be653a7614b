#!/usr/bin/env bash
# Session 6's closing measurement on the H200, one call (~8-9 minutes; device timeout_s 590):
#   1. scripts/h200-final.sh: both full catalogs, mxmoe bench on both backends over the whole
#      token matrix, the peers matmul_ogs + grouped_mm and the emulation in the same call;
#   2. forced-GEMM catalogs: HIP (MXMOE_HIP_GEMV_PAIRS=0) and wgpu with the new default coop
#      kernel k64pw (MXMOE_GEMV_PAIRS=0), moe/ cases;
#   3. extras while the budget lasts (BUDGET seconds from the start, default 540): HIP bench with
#      --bf16-activations (gpt-oss, as a bf16 model runs it), the HIP GEMV mmaw (catalog with it
#      forced, bench), the mma GEMM of session 5 (MXMOE_HIP_MMA_VARIANT=v0) at 256 / 2048.
# Results: final.tgz and extra.tgz in $OUT (re-packed after each step, so a cut call keeps what
# ran), closing_steps.txt.
# Usage (device tool): the release binary (--features hip) at .dev-main/mxmoe, this script and
# h200-final.sh in .dev-main/; carry [".gl", ".dev-main", ".peers"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/closing.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O/final" "$O/extra"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
BUDGET="${BUDGET:-540}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/closing_steps.txt"
el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$L"; (cd "$O/extra" && tar czf ../extra.tgz .); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
OUT="$O/final" bash .dev-main/h200-final.sh 2>&1 | tee "$O/final/final_steps.txt" | tail -40
(cd "$O/final" && tar czf ../final.tgz .) && rm -rf "$O/final"
st "final done"
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full --filter moe/ > "$O/extra/check_hip_gemm_forced.txt" 2>&1
st "hip GEMM forced rc=$? $(tail -1 $O/extra/check_hip_gemm_forced.txt | cut -c1-100)"
left 100 && { MXMOE_GEMV_PAIRS=0 timeout 150 $B check --backend wgpu --suite full --filter moe/ > "$O/extra/check_wgpu_gemm_forced_k64pw.txt" 2>&1
  st "wgpu GEMM forced (k64pw) rc=$? $(tail -1 $O/extra/check_wgpu_gemm_forced_k64pw.txt | cut -c1-100)"; }
left 40 && { timeout 45 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 --bf16-activations \
  --json "$O/extra/bench_hip_gptoss_bf16.json" > "$O/extra/bench_hip_gptoss_bf16.log" 2>&1; st "bench hip gpt-oss bf16 rc=$?"; }
left 35 && { env MXMOE_HIP_GEMV=mmaw MXMOE_HIP_GEMV_PAIRS=1000 MXMOE_REQUIRE_HIP=1 timeout 30 $B check --backend hip --suite full > "$O/extra/check_mmaw.txt" 2>&1
  st "check mmaw forced rc=$? $(tail -1 $O/extra/check_mmaw.txt | cut -c1-100)"; }
left 25 && { env MXMOE_HIP_GEMV=mmaw timeout 25 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16 --iters 30 \
  --json "$O/extra/bench_mmaw_gptoss.json" > "$O/extra/bench_mmaw_gptoss.log" 2>&1; st "bench mmaw gpt-oss rc=$?"; }
left 20 && { env MXMOE_HIP_MMA_VARIANT=v0 timeout 20 $B bench --backend hip --shape gpt-oss-120b --tokens 256,2048 --iters 30 \
  --json "$O/extra/bench_gemm_v0.json" > "$O/extra/bench_gemm_v0.log" 2>&1; st "bench gemm v0 rc=$?"; }
grep -h -E "M = [0-9]+: (wall|passes)" "$O"/extra/*.log 2>/dev/null | cut -c1-200 >> "$L"
st "done"
