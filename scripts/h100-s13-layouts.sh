#!/usr/bin/env bash
# Session 13's two unmeasured layouts (docs/hip-gemm-mma.md "Session 13"), for the next device
# call: MXMOE_HIP_NV4_ROWS=1 (row-interleaved MXFP4 blocks; GEMV and GEMM) and
# MXMOE_HIP_MMA_VARIANT=wg256c (activations in the c16 order, cp.async staging), each against
# the defaults in alternating rounds of the same binary, after their catalogs with the GEMM
# forced. Binary: `cargo build --release --features hip --bin mxmoe`, gzipped into
# .dev-main/mxmoe.gz (carry it and .gl). Results in $OUT/layouts.tgz.
# Run: for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; BUDGET=540 bash scripts/h100-s13-layouts.sh
set -uo pipefail
O="${OUT:-/tmp/out}"; W=/tmp/layouts; mkdir -p "$O" $W; S0=$(date +%s); BUDGET="${BUDGET:-420}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
pack() { (cd $W && tar czf "$O/layouts.tgz" .); }
L="$W/steps.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$W/gpu.txt"
gunzip -c .dev-main/mxmoe.gz > /tmp/mxmoe; chmod +x /tmp/mxmoe; B=/tmp/mxmoe
export MXMOE_REQUIRE_HIP=1
# Correctness first: every MoE case with the GEMM forced, and the default crossover, per layout.
for k in "MXMOE_HIP_NV4_ROWS=1 MXMOE_HIP_GEMV_PAIRS=0" "MXMOE_HIP_NV4_ROWS=1" \
         "MXMOE_HIP_MMA_VARIANT=wg256c MXMOE_HIP_GEMV_PAIRS=0" \
         "MXMOE_HIP_NV4_ROWS=1 MXMOE_HIP_MMA_VARIANT=wg256c MXMOE_HIP_GEMV_PAIRS=0"; do
  n=$(echo "$k" | tr ' =' '__')
  env $k timeout 150 $B check --backend hip --suite full --filter moe/ > "$W/check_$n.txt" 2>&1
  echo "$(el)s check $k rc=$? $(tail -1 $W/check_$n.txt | cut -c1-120)" | tee -a "$L"
done
pack
# Speed: (layout knobs, label); the default first in each round.
runs=("|base" "MXMOE_HIP_NV4_ROWS=1|rows" "MXMOE_HIP_MMA_VARIANT=wg256c|wgc" "MXMOE_HIP_NV4_ROWS=1 MXMOE_HIP_MMA_VARIANT=wg256c|rows_wgc")
for r in 1 2; do
  for x in "${runs[@]}"; do
    k="${x%%|*}"; lab="${x##*|}"
    left 45 || break
    env $k timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,16,256,2048 --iters 20 > "$W/b_${lab}_g$r.log" 2>&1
    echo "$(el)s $lab gpt-oss r$r rc=$?" | tee -a "$L"
    left 45 || break
    env $k timeout 60 $B bench --backend hip --shape deepseek-r1 --tokens 1,8,512,2048 --iters 20 > "$W/b_${lab}_d$r.log" 2>&1
    echo "$(el)s $lab deepseek r$r rc=$?" | tee -a "$L"; pack
  done
done
for f in $W/b_*.log; do echo "== $f"; grep -E "M = [0-9]+: (wall|passes)" "$f" | sed -E 's/floor.*rel-L2/rel-L2/' | cut -c1-220; done > "$W/summary.txt"
pack; grep -E "==|wall" "$W/summary.txt" | cut -c1-120
