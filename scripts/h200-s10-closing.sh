#!/usr/bin/env bash
# Session 10's closing measurement on the H200, one call (~8-9 minutes; device timeout_s 590):
#   1. scripts/h200-final.sh: both full catalogs, mxmoe bench on both backends over the whole
#      token matrix, the peers matmul_ogs + grouped_mm and the emulation in the same call;
#   2. forced catalogs: HIP GEMM on every MoE case (MXMOE_HIP_GEMV_PAIRS=0: the mma gemm1 writing
#      gemm2's bf16 itself), HIP GEMV on every case (MXMOE_HIP_GEMV_PAIRS=1000: mmab / mmao),
#      wgpu with every MoE case through the cooperative GEMM (MXMOE_GEMV_PAIRS=0: the trusted k64pw
#      modules after the split of the wgpu host code), then 2-expert weight chunks if time allows;
#      (the wgpu one correctness only, beside the HIP ones);
#   3. extras while the budget lasts (BUDGET seconds from the start, default 560): HIP bench with
#      --bf16-activations (gpt-oss).
# Results: final.tgz and extra.tgz in $OUT (re-packed after each step), closing_steps.txt.
# Usage (device tool): the release binary (--features hip) gzipped at .dev-main/mxmoe.gz (the carry
# limit is 64 MiB), this script and
# h200-final.sh in .dev-main/; carry [".gl", ".dev-main", ".peers"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/closing.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O/final" "$O/extra"; S0=$(date +%s); B="${MXMOE_BIN:-/tmp/mxmoe}"; [ -x "$B" ] || gunzip -c .dev-main/mxmoe.gz > "$B"; chmod +x "$B"; export MXMOE_BIN="$B"
BUDGET="${BUDGET:-560}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/closing_steps.txt"
el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$L"; (cd "$O/extra" && tar czf ../extra.tgz .); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
OUT="$O/final" bash .dev-main/h200-final.sh 2>&1 | tee "$O/final/final_steps.txt" | tail -40
(cd "$O/final" && tar czf ../final.tgz .) && rm -rf "$O/final"
st "final done"
(MXMOE_REQUIRE_GPU=1 MXMOE_GEMV_PAIRS=0 timeout 150 $B check --backend wgpu --suite full --filter moe/ > "$O/extra/check_wgpu_coop_forced.txt" 2>&1; echo "rc=$?" >> "$O/extra/check_wgpu_coop_forced.txt") & WC=$!
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full --filter moe/ > "$O/extra/check_hip_gemm_forced.txt" 2>&1
st "hip GEMM forced rc=$? $(tail -1 $O/extra/check_hip_gemm_forced.txt | cut -c1-100)"
MXMOE_HIP_GEMV_PAIRS=1000 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full > "$O/extra/check_hip_gemv_forced.txt" 2>&1
st "hip GEMV forced rc=$? $(tail -1 $O/extra/check_hip_gemv_forced.txt | cut -c1-100)"
wait $WC; st "wgpu coop forced (beside the HIP checks): $(tail -2 $O/extra/check_wgpu_coop_forced.txt | cut -c1-100 | tr '\n' ' ')"
left 110 && { MXMOE_WGPU_CHUNK_EXPERTS=2 timeout 100 $B check --backend wgpu --suite full --filter moe/ > "$O/extra/check_wgpu_chunks2.txt" 2>&1
  st "wgpu 2-expert chunks rc=$? $(tail -1 $O/extra/check_wgpu_chunks2.txt | cut -c1-100)"; }
left 40 && { timeout 45 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 30 --bf16-activations \
  --json "$O/extra/bench_hip_gptoss_bf16.json" > "$O/extra/bench_hip_gptoss_bf16.log" 2>&1; st "bench hip gpt-oss bf16 rc=$?"; }
grep -h -E "M = [0-9]+: (wall|passes)" "$O"/extra/*.log 2>/dev/null | cut -c1-200 >> "$L"
st "done"
