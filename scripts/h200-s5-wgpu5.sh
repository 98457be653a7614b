#!/usr/bin/env bash
# wgpu5 (issue 8): the cooperative GEMM kernel k64 on the H200, one device call.
# Usage (device tool): carry [".gl", ".dev-wgpu5"]; command:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash .dev-wgpu5/run.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); B=.dev-wgpu5/mxmoe
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
L="$O/steps.txt"; el() { echo $(( $(date +%s) - S0 )); }
st() { echo "$(el)s $*" | tee -a "$L"; }
# run a step only while at least $1 seconds remain before 190 s
left() { [ $(( 190 - $(el) )) -ge "$1" ]; }
BG="$O/bench_gptoss.log"; BD="$O/bench_dsr1.log"; BX="$O/bench_k32_diag.log"
$B info > "$O/info.txt" 2>&1; st "info rc=$? $(grep -m1 'prefill GEMM' $O/info.txt | cut -c1-160)"
# 1. the headline: k64 at 2048 tokens, both shapes (checked against the CPU reference)
timeout 25 $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 10 >> "$BG" 2>&1; st "gpt-oss 2048 k64 rc=$?"
grep -h "M = 2048: \(wall\|passes\)" "$BG" | cut -c1-230 | tee -a "$L"
# 2. every MoE case of the full catalog through the GEMM (k64) where m > 4
left 50 && { MXMOE_GEMV_PAIRS=0 timeout 55 $B check --backend wgpu --suite full --filter moe/ > "$O/check_forced_gemm_k64.txt" 2>&1; st "check moe/ forced GEMM k64 rc=$? $(tail -1 $O/check_forced_gemm_k64.txt)"; }
# 3. the full catalog, defaults
left 50 && { timeout 55 $B check --backend wgpu --suite full > "$O/check_full.txt" 2>&1; st "check full default rc=$? $(tail -1 $O/check_full.txt)"; }
# 4. crossover sweep, gpt-oss: defaults (GEMV up to 32 pairs/expert) and the GEMM forced
left 25 && { MXMOE_HOST_PROFILE=10 timeout 25 $B bench --backend wgpu --shape gpt-oss-120b --tokens 64,256,512,1024 --iters 10 >> "$BG" 2>&1; st "gpt-oss default 64..1024 rc=$?"; }
left 25 && { MXMOE_GEMV_PAIRS=0 timeout 25 $B bench --backend wgpu --shape gpt-oss-120b --tokens 64,256,512,1024 --iters 10 >> "$BG" 2>&1; st "gpt-oss GEMM forced 64..1024 rc=$?"; }
# 5. DeepSeek-R1
left 30 && { timeout 30 $B bench --backend wgpu --shape deepseek-r1 --tokens 2048,64,512 --iters 10 >> "$BD" 2>&1; st "dsr1 default 2048,64,512 rc=$?"; }
left 30 && { MXMOE_GEMV_PAIRS=0 timeout 30 $B bench --backend wgpu --shape deepseek-r1 --tokens 64,256,512 --iters 10 >> "$BD" 2>&1; st "dsr1 GEMM forced 64,256,512 rc=$?"; }
# 6. the first kernel (k32) at 2048, and where k64's time goes (diagnostics: wrong results)
left 15 && { MXMOE_COOP_KERNEL=k32 timeout 15 $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 10 >> "$BX" 2>&1; st "gpt-oss 2048 k32 rc=$?"; }
left 12 && { MXMOE_COOP_DIAG=2 timeout 12 $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 10 --no-check >> "$BX" 2>&1; st "gpt-oss 2048 k64 DIAG=2 (no MMAs) rc=$?"; }
left 12 && { MXMOE_COOP_DIAG=4 timeout 12 $B bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 10 --no-check >> "$BX" 2>&1; st "gpt-oss 2048 k64 DIAG=4 (no loads/staging) rc=$?"; }
# 7. attribution if the forced-GEMM check failed: the same with k32
if ! grep -q " 0 failed" "$O/check_forced_gemm_k64.txt" 2>/dev/null; then
  left 30 && { MXMOE_COOP_KERNEL=k32 MXMOE_GEMV_PAIRS=0 timeout 40 $B check --backend wgpu --suite full --filter moe/ > "$O/check_forced_gemm_k32.txt" 2>&1; st "check moe/ forced GEMM k32 rc=$? $(tail -1 $O/check_forced_gemm_k32.txt)"; }
fi
grep -h -E "M = [0-9]+: (wall|passes)" "$BG" "$BD" "$BX" | cut -c1-230 >> "$L"
st done
