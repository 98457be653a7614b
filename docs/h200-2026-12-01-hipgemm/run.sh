#!/usr/bin/env bash
# hipgemm device run: full catalog on hip, bench both shapes, optional ncu on the GEMMs.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B=.dev-hipgemm/mxmoe
T=$(mktemp -d)
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$T/clocks.csv" 2>&1 &
SMI=$!
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/info.txt" 2>&1
S=$(date +%s)
MXMOE_REQUIRE_HIP=1 timeout 100 $B check --backend hip --suite full > "$OUT/check_hip.txt" 2>&1
echo "check hip rc=$? $(( $(date +%s) - S ))s"; grep -E "FAIL" "$OUT/check_hip.txt" | head -8; tail -2 "$OUT/check_hip.txt"
S=$(date +%s)
timeout 100 $B bench --backend hip --shape gpt-oss-120b --tokens ${TOK1:-64,256,2048} --iters 30 \
  --json "$OUT/bench_hip_gptoss.json" > "$OUT/bench_hip.log" 2>&1; echo "bench gpt-oss rc=$? $(( $(date +%s) - S ))s"
S=$(date +%s)
timeout 130 $B bench --backend hip --shape deepseek-r1 --tokens ${TOK2:-64,512,2048} --iters 30 \
  --json "$OUT/bench_hip_dsr1.json" >> "$OUT/bench_hip.log" 2>&1; echo "bench dsr1 rc=$? $(( $(date +%s) - S ))s"
kill $SMI 2>/dev/null
{ echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' "$T/clocks.csv" | sort | uniq -c | sort -rn | head -6; } >> "$OUT/bench_hip.log"
grep -E "passes|rel-L2 vs" "$OUT/bench_hip.log" | sed -E 's/\[[^]]*\]//g' | cut -c1-230
if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then
  S=$(date +%s)
  timeout ${NCU_T:-80} ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    -k regex:moe_gemm -c 2 $B bench --backend hip --shape ${NCU_SHAPE:-gpt-oss-120b} --tokens 2048 --iters 1 --no-check > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$? $(( $(date +%s) - S ))s"
  grep -E "moe_gemm|Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Registers|Block Limit|Warp Cycles Per Issued|Stall|Issue Slots Busy|Executed Ipc" "$OUT/ncu.txt" | head -60
else echo "no ncu run (NCU=${NCU:-} $(command -v ncu))"; fi
