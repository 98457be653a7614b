#!/usr/bin/env bash
# Session 5 opening check: the full catalog (585, with the two prefill-GEMM cases added at the end
# of session 4) on wgpu (coop GEMM) and HIP (v1/v2 GEMMs), binary of 7bcf328.
set -uo pipefail
B="${MXMOE_BIN:-.dev-main/mxmoe}"; export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
{ nvidia-smi --query-gpu=name,driver_version --format=csv; $B info; } > "$OUT"/info.txt 2>&1; echo "info rc=$?"
timeout 170 $B check --backend wgpu --suite full > "$OUT"/check_wgpu.txt 2>&1; echo "wgpu rc=$?"; tail -2 "$OUT"/check_wgpu.txt
MXMOE_REQUIRE_HIP=1 timeout 100 $B check --backend hip --suite full > "$OUT"/check_hip.txt 2>&1; echo "hip rc=$?"; tail -2 "$OUT"/check_hip.txt
for g in v1 v2; do MXMOE_HIP_GEMM=$g MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full --filter moe/ > "$OUT"/check_hip_gemm_$g.txt 2>&1; echo "hip gemm=$g forced rc=$?"; tail -1 "$OUT"/check_hip_gemm_$g.txt; done
grep -h "FAIL" "$OUT"/*.txt | head
