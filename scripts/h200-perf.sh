#!/usr/bin/env bash
# Mid-way measuring call of the perf branch (docs/h200-2026-12-01-perf): the GEMV layouts
# (workgroup-memory reduction, subgroupAdd with 8/4/2 rows per lane group) against the previous
# binary, on both shapes at decode sizes, with the SM clock logged. Kept as the record of call 1:
# it ran the binary of commit 4288a55, whose --gemv-layouts took rows per group (8, 4, 2); the
# rows option was removed after that call (fewer rows were slower), so today's binary rejects it. Expects .dev-perf/mxmoe
# (this branch) and .dev-perf/mxmoe-base (main before it); writes to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
D=.dev-perf
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
SMI=$!
$D/mxmoe info > "$OUT/info.txt" 2>&1
$D/mxmoe-base bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64 --iters 50 \
  --json "$OUT/base_gptoss.json" > "$OUT/base.log" 2>&1
$D/mxmoe bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64 --iters 50 \
  --gemv-layouts shared,8,4,2 --json "$OUT/new_gptoss.json" > "$OUT/new.log" 2>&1
$D/mxmoe bench --backend wgpu --shape gpt-oss-120b --tokens 2048 --iters 20 \
  --json "$OUT/new_gptoss_2048.json" >> "$OUT/new.log" 2>&1
$D/mxmoe bench --backend wgpu --shape deepseek-r1 --tokens 1,8 --iters 50 \
  --gemv-layouts shared,8,4,2 --json "$OUT/new_dsr1.json" >> "$OUT/new.log" 2>&1
kill $SMI
echo "== base"; grep -E "wall|passes" "$OUT/base.log" | sed 's/, floor.*rel-L2/ rel-L2/' | cut -c1-200
echo "== new"; grep -E "layout|wall|passes|bench:" "$OUT/new.log" | sed 's/, floor.*rel-L2/ rel-L2/' | cut -c1-200
