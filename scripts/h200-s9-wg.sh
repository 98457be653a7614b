#!/usr/bin/env bash
# Session 9, call 1: the wgmma GEMM (hip/gemm_wg.h, sm_90a PTX): the descriptor probe, the MoE
# catalog through it (GEMM forced, 64-pair tiles), the full catalog, and wgmma vs mma.sync
# (MXMOE_HIP_WGMMA=0/1) at 2048 tokens on both shapes. Results: $OUT/wg.tgz
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=/tmp/mxmoe; gunzip -c .dev-main/mxmoe.gz > $B; chmod +x $B
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../wg.tgz .); }
export MXMOE_REQUIRE_HIP=1
(cd .dev-main && nvcc -arch=sm_90a -O2 -o /tmp/wgprobe wgprobe.cu && /tmp/wgprobe) > "$R/probe.txt" 2>&1 &
$B info > "$R/info.txt" 2>&1; st "info rc=$?"
wait; st "probe $(head -4 $R/probe.txt | cut -c1-60 | tr '\n' '|')"
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_HIP_GEMM_TM=64 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_wg_forced.txt" 2>&1; st "check wg forced rc=$? $(tail -1 $R/check_wg_forced.txt | cut -c1-90)"
for w in 1 0 1 0; do
  MXMOE_HIP_WGMMA=$w timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 20 > "$R/g_$w.log" 2>&1; st "gptoss wg=$w rc=$? $(grep -hE 'M = [0-9]+: wall' $R/g_$w.log | cut -c1-60 | tr '\n' ' ')"
  MXMOE_HIP_WGMMA=$w timeout 50 $B bench --backend hip --shape deepseek-r1 --tokens 2048 --iters 10 > "$R/d_$w.log" 2>&1; st "dsr1 wg=$w rc=$? $(grep -hE 'M = [0-9]+: wall' $R/d_$w.log | cut -c1-60 | tr '\n' ' ')"
done
timeout 60 $B check --backend hip --suite full > "$R/check_full.txt" 2>&1; st "check full rc=$? $(tail -1 $R/check_full.txt | cut -c1-90)"
for f in "$R"/*.log; do echo "== $(basename $f)"; grep -hE "M = [0-9]+: (wall|passes)|rel|error" "$f" | cut -c1-220; done >> "$R/steps.txt"
st done
