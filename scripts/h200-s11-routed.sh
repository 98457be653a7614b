#!/usr/bin/env bash
# Session 11: mmab's gemv1 routing one gpt-oss token itself (moe_gemv1_mmab_rt_<nq>, hip/p8_fused.h)
# against the route kernel + gemv1 (MXMOE_HIP_GEMV_ROUTED=0), one binary, alternating runs.
# Device tool: carry [".dev-main/rt", "scripts/h200-s11-routed.sh"]; command:
#   bash scripts/h200-s11-routed.sh     (results: $OUT/routed.tgz and $OUT/summary.txt)
set -uo pipefail
O="${OUT:-/tmp/out}"; W=/tmp/rt; mkdir -p "$O" "$W"; S0=$(date +%s); BUDGET="${BUDGET:-300}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
B=/tmp/mxmoe_rt; gunzip -c .dev-main/rt/mxmoe.gz > $B; chmod +x $B
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$W/gpu.txt"
MXMOE_REQUIRE_HIP=1 timeout 150 $B check --backend hip --suite full > "$W/check_hip.txt" 2>&1
echo "$(el)s check hip rc=$? $(tail -1 $W/check_hip.txt | cut -c1-90)" | tee -a "$W/steps.txt"
MXMOE_HIP_GEMV_PAIRS=1000 MXMOE_REQUIRE_HIP=1 timeout 60 $B check --backend hip --suite full > "$W/check_hip_gemv.txt" 2>&1
echo "$(el)s check hip GEMV forced rc=$? $(tail -1 $W/check_hip_gemv.txt | cut -c1-90)" | tee -a "$W/steps.txt"
for r in 1 2 3; do
  for v in 1 0; do
    left 40 || break
    MXMOE_HIP_GEMV_ROUTED=$v timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1,4 --iters 30 \
      --json "$W/b_rt${v}_$r.json" > "$W/b_rt${v}_$r.log" 2>&1
    echo "$(el)s routed=$v r$r rc=$?" | tee -a "$W/steps.txt"
    left 30 || break
    MXMOE_HIP_GEMV_ROUTED=$v timeout 60 $B bench --backend hip --shape gpt-oss-120b --tokens 1 --iters 30 --bf16-activations \
      --json "$W/b_rt${v}_bf16_$r.json" > "$W/b_rt${v}_bf16_$r.log" 2>&1
    echo "$(el)s routed=$v bf16 r$r rc=$?" | tee -a "$W/steps.txt"
  done
done
for f in "$W"/b_*.log; do echo "== $(basename $f)"; grep -E "M = [0-9]+: (wall|passes)" "$f" | sed -E 's/floor.*rel-L2/rel-L2/' | cut -c1-160; done > "$W/summary.txt"
cp "$W/summary.txt" "$O/"; (cd "$W" && tar czf "$O/routed.tgz" .)
cat "$W/steps.txt"; cat "$W/summary.txt"
