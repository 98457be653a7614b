#!/usr/bin/env bash
# wgpu7 helper's device call (session 7): one dispatch per expert pass over all weight chunks.
# Every step bounded so that the whole stays under ~190 s; results tarred into $OUT/wgpu7.tgz.
set -uo pipefail
R=/tmp/wgpu7; mkdir -p $R
B=./.dev-wgpu7/mxmoe
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA
left() { echo $(( ${1} < (188 - SECONDS) ? ${1} : (188 - SECONDS) )); }
step() { echo "${SECONDS}s $*" >> $R/steps.txt; }
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > $R/clocks.csv 2>&1 &
SMI=$!
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > $R/info.txt 2>&1
step info
timeout $(left 75) $B bench --backend wgpu --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 30 \
  --json $R/bench_wgpu_dsr1.json > $R/bench_wgpu_dsr1.log 2>&1
step "bench dsr1 rc=$?"
timeout $(left 70) $B check --backend wgpu --suite full --json $R/check_wgpu.json > $R/check_wgpu.txt 2>&1
step "check wgpu full rc=$? $(tail -1 $R/check_wgpu.txt | cut -c1-100)"
# The multi-chunk passes on the catalog's MoE layers (2 experts per chunk: 4-chunk dispatches,
# cooperative GEMM k64pw and the subgroup GEMV included).
MXMOE_WGPU_CHUNK_EXPERTS=2 timeout $(left 30) $B check --backend wgpu --suite full --filter moe/ \
  > $R/check_wgpu_moe_chunk2.txt 2>&1
step "check moe/ chunk-experts 2 rc=$? $(tail -1 $R/check_wgpu_moe_chunk2.txt | cut -c1-100)"
timeout $(left 40) $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 20 \
  --json $R/bench_wgpu_gptoss.json > $R/bench_wgpu_gptoss.log 2>&1
step "bench gpt-oss rc=$?"
# Same call, the old way (one dispatch per chunk) for the A/B, while time is left.
MXMOE_WGPU_CHUNKS_PER_PASS=1 timeout $(left 60) $B bench --backend wgpu --shape deepseek-r1 \
  --tokens 1,8,2048 --iters 20 --json $R/bench_wgpu_dsr1_perchunk.json > $R/bench_wgpu_dsr1_perchunk.log 2>&1
step "bench dsr1 per-chunk rc=$?"
kill $SMI 2>/dev/null
{ echo "# SM clock samples (MHz: count)"; awk -F, '{print $2}' $R/clocks.csv | sort | uniq -c | sort -rn | head -6; } > $R/clocks.txt
rm -f $R/clocks.csv
tar czf $OUT/wgpu7.tgz -C /tmp wgpu7
cat $R/steps.txt
grep -E "passes|wall" $R/*.log | cut -c1-220 | tail -30
