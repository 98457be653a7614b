#!/usr/bin/env bash
# Session 4, first device call: (A) the HIP v2 GEMM (branch next-hipgemm merged with main):
# correctness then bench v1 vs v2; (B) the wgpu wide GEMV layout: correctness then bench.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export MXMOE_BIN=.dev-next/mxmoe
S0=$(date +%s)
# A: stops itself (exit 1) on a v2 failure; run in a subshell so B still runs
( OUT="$OUT/hip" bash .dev-next/h200-next.sh ) > "$OUT/hip_steps.txt" 2>&1
echo "A rc=$? $(( $(date +%s) - S0 ))s" >> "$OUT/hip_steps.txt"
( OUT="$OUT/wgpu" bash .dev-next/h200-next-wgpu.sh ) > "$OUT/wgpu_steps.txt" 2>&1
echo "B rc=$? $(( $(date +%s) - S0 ))s" >> "$OUT/wgpu_steps.txt"
cd "$OUT" && tar czf hip.tgz hip && tar czf wgpu.tgz wgpu && rm -rf hip wgpu
