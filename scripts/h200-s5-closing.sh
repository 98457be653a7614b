#!/usr/bin/env bash
# Session 5's closing measurement on the H200, one call (~7-8 minutes; device timeout_s 560):
# scripts/h200-final.sh (both full catalogs, mxmoe bench on both backends over the whole token
# matrix, the peers matmul_ogs + grouped_mm and the emulation in the same call), then
#   - the HIP catalog with the GEMM forced everywhere (MXMOE_HIP_GEMV_PAIRS=0, moe/ cases);
#   - EXTRA: a script of further checks (a helper's variant), run last if given.
# Usage (device tool): the release binary (--features hip) at .dev-main/mxmoe, this script, and
# h200-final.sh in .dev-main/; carry [".gl", ".dev-main", ".peers"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-main/closing.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B="${MXMOE_BIN:-.dev-main/mxmoe}"
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/closing_steps.txt"; st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$L"; }
OUT="$O/final" bash .dev-main/h200-final.sh 2>&1 | tee "$O/final_steps.txt" | tail -40
st "final done"
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 40 $B check --backend hip --suite full --filter moe/ > "$O/check_hip_gemm_forced.txt" 2>&1
st "hip GEMM forced rc=$? $(tail -1 $O/check_hip_gemm_forced.txt)"
if [ -n "${EXTRA:-}" ] && [ -f "$EXTRA" ]; then OUT="$O/extra" timeout "${EXTRA_S:-120}" bash "$EXTRA"; st "extra $EXTRA rc=$?"; fi
(cd "$O" && tar czf closing.tgz --exclude closing.tgz . && find . -type f ! -name closing.tgz ! -name closing_steps.txt -delete)
