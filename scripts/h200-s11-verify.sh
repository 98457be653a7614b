#!/usr/bin/env bash
# Session 11's last call: the catalog with its 17 new cases (wide routers, weight-only 8-bit
# codes) on both GPU backends, and the forced-path catalogs. Device tool: carry [".gl",
# ".dev-main/fin", "scripts/h200-s11-verify.sh"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash scripts/h200-s11-verify.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; W=/tmp/fin; mkdir -p "$O" "$W"; S0=$(date +%s)
el() { echo $(( $(date +%s) - S0 )); }
B=/tmp/mxmoe_fin; gunzip -c .dev-main/fin/mxmoe.gz > $B; chmod +x $B
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$W/gpu.txt"
st() { echo "$(el)s $1 rc=$2 $(tail -1 $W/$3 | cut -c1-100)" | tee -a "$W/steps.txt"; }
(MXMOE_REQUIRE_GPU=1 timeout 200 $B check --backend wgpu --suite full > "$W/check_wgpu.txt" 2>&1; echo "rc=$?" >> "$W/check_wgpu.txt") & WC=$!
MXMOE_REQUIRE_HIP=1 timeout 150 $B check --backend hip --suite full > "$W/check_hip.txt" 2>&1; st "hip full" $? check_hip.txt
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full --filter moe/ > "$W/check_hip_gemm.txt" 2>&1; st "hip GEMM forced" $? check_hip_gemm.txt
MXMOE_HIP_GEMV_PAIRS=1000 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$W/check_hip_gemv.txt" 2>&1; st "hip GEMV forced" $? check_hip_gemv.txt
MXMOE_HIP_GEMV_ROUTED=0 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full --filter moe/ > "$W/check_hip_unrouted.txt" 2>&1; st "hip unrouted" $? check_hip_unrouted.txt
wait $WC; echo "$(el)s wgpu full: $(tail -3 $W/check_wgpu.txt | tr '\n' ' ' | cut -c1-200)" | tee -a "$W/steps.txt"
MXMOE_REQUIRE_GPU=1 MXMOE_GEMV_PAIRS=0 timeout 120 $B check --backend wgpu --suite full --filter moe/ > "$W/check_wgpu_coop.txt" 2>&1; st "wgpu coop forced" $? check_wgpu_coop.txt
grep -h "FAIL" "$W"/check_*.txt | head -20 > "$W/fails.txt"
(cd "$W" && tar czf "$O/verify.tgz" .); cat "$W/steps.txt" "$W/fails.txt"
