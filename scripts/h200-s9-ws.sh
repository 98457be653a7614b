#!/usr/bin/env bash
# Session 9, call 3: the warp-specialized wgmma GEMM (hip/gemm_ws.h: producer warps decode into shared memory, a consumer warpgroup runs shared-shared wgmmas; 384 threads, one block
# per multiprocessor): the MoE catalog through it (GEMM forced, 64-pair tiles), the full
# catalog, and wgmma vs mma.sync (MXMOE_HIP_WGMMA=1/0, alternating) at 2048 tokens on both
# shapes, and gpt-oss with bf16 activations. Results: $OUT/ws.tgz
set -uo pipefail
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s); B=/tmp/mxmoe; gunzip -c .dev-main/mxmoe.gz > $B; chmod +x $B
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../ws.tgz .); }
export MXMOE_REQUIRE_HIP=1
$B info > "$R/info.txt" 2>&1; st "info rc=$?"
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_HIP_GEMM_TM=64 timeout 60 $B check --backend hip --suite full --filter moe/ > "$R/check_wg_forced.txt" 2>&1; st "check wg forced rc=$? $(tail -1 $R/check_wg_forced.txt | cut -c1-90)"
for w in 1 0 1 0; do
  MXMOE_HIP_WGMMA=$w timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 20 > "$R/g_$w.log" 2>&1; st "gptoss wg=$w rc=$? $(grep -hE 'M = [0-9]+: wall' $R/g_$w.log | cut -c1-60 | tr '\n' ' ')"
  MXMOE_HIP_WGMMA=$w timeout 50 $B bench --backend hip --shape deepseek-r1 --tokens 2048 --iters 10 > "$R/d_$w.log" 2>&1; st "dsr1 wg=$w rc=$? $(grep -hE 'M = [0-9]+: wall' $R/d_$w.log | cut -c1-60 | tr '\n' ' ')"
done
for w in 1 0; do
  MXMOE_HIP_WGMMA=$w timeout 40 $B bench --backend hip --shape gpt-oss-120b --tokens 2048 --iters 20 --bf16-activations > "$R/gb_$w.log" 2>&1; st "gptoss bf16 wg=$w rc=$? $(grep -hE 'M = [0-9]+: wall' $R/gb_$w.log | cut -c1-60 | tr '\n' ' ')"
done
timeout 60 $B check --backend hip --suite full > "$R/check_full.txt" 2>&1; st "check full rc=$? $(tail -1 $R/check_full.txt | cut -c1-90)"
for f in "$R"/*.log; do echo "== $(basename $f)"; grep -hE "M = [0-9]+: (wall|passes)|rel|error" "$f" | cut -c1-220; done >> "$R/steps.txt"
st done
