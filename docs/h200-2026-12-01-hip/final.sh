#!/usr/bin/env bash
# The final HIP call on the H200 (through the CUDA driver): info, the full catalog, the quick
# catalog with the matrix-core GEMM forced, bench on both model shapes (the peers: docs/h200-2026-12-01-final, device budget).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
bin=.dev-hip/mxmoe
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/info.txt" 2>&1
$bin info >> "$OUT/info.txt" 2>&1
MXMOE_REQUIRE_HIP=1 MXMOE_POISON=1 timeout 120 $bin check --backend hip --suite full --json "$OUT/check_full.json" > "$OUT/check.txt" 2>&1
echo "check full rc=$?"; grep -E "FAIL|UNSUPP" "$OUT/check.txt" | head; tail -2 "$OUT/check.txt"
MXMOE_HIP_MOE_PATH=gemm MXMOE_REQUIRE_HIP=1 MXMOE_POISON=1 timeout 60 $bin check --backend hip --suite quick > "$OUT/check_gemm.txt" 2>&1
echo "check quick gemm rc=$?"; grep -E "FAIL" "$OUT/check_gemm.txt" | head; tail -2 "$OUT/check_gemm.txt" | head -1
$bin bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 20 --json "$OUT/bench_gptoss.json" > "$OUT/bench.log" 2>&1
echo "bench gpt-oss rc=$?"
$bin bench --backend hip --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 20 --json "$OUT/bench_dsr1.json" >> "$OUT/bench.log" 2>&1
echo "bench dsr1 rc=$?"
grep -E "^ +[0-9]|passes" "$OUT/bench.log" | tail -30
