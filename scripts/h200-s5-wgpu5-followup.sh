#!/usr/bin/env bash
# wgpu5 follow-up (issue 8), NOT yet run: where the cooperative GEMM's time goes, and whether
# naga's index clamps are what keeps it ~15x below the tensor cores (docs/h200-2026-12-01s5-wgpu5).
# wgpu builds shader modules with naga's Restrict policy: every workgroup-array index, the
# coopLoad/coopStore pointers included, becomes min(i, len - 1), which hides the 16-byte
# alignment a driver needs for ldmatrix-style fragment loads. MXMOE_WGPU_TRUSTED=1 drops the
# clamps. ~80 s of device time.
# Usage (device tool): the release binary at .dev-wgpu5/mxmoe, this script at .dev-wgpu5/followup.sh;
# carry [".gl", ".dev-wgpu5"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-wgpu5/followup.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B=.dev-wgpu5/mxmoe
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/steps.txt"; el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$L"; }
left() { [ $(( 190 - $(el) )) -ge "$1" ]; }
G="$O/bench.log"
b() { timeout "$1" $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 10 "${@:2}" >> "$G" 2>&1; }
# checked rows: k64 and k32, clamps on (default) and off
b 20; st "k64 rc=$?"
left 20 && { MXMOE_WGPU_TRUSTED=1 b 20; st "k64 trusted rc=$?"; }
left 20 && { MXMOE_WGPU_TRUSTED=1 MXMOE_COOP_KERNEL=k32 b 20; st "k32 trusted rc=$?"; }
# diagnostics (results wrong, --no-check): no MMAs; no loads/staging; no lo MMAs
for d in 2 4 8; do
  left 15 && { MXMOE_COOP_DIAG=$d b 15 --no-check; st "k64 DIAG=$d rc=$?"; }
  left 15 && { MXMOE_WGPU_TRUSTED=1 MXMOE_COOP_DIAG=$d b 15 --no-check; st "k64 trusted DIAG=$d rc=$?"; }
done
# if trusted is faster it must stay exact: every MoE case through the GEMM
left 40 && { MXMOE_WGPU_TRUSTED=1 MXMOE_GEMV_PAIRS=0 timeout 45 $B check --backend wgpu --suite full --filter moe/ > "$O/check_trusted_forced_gemm.txt" 2>&1; st "check moe/ forced GEMM trusted rc=$? $(tail -1 $O/check_trusted_forced_gemm.txt)"; }
grep -h -E "prefill GEMM|M = 2048: (wall|passes)" "$G" | cut -c1-230 >> "$L"
st done
