#!/usr/bin/env bash
# Run once (docs/h200-2026-12-06s11-prefetch: slower everywhere; the prefetch code was removed,
# its diff is docs/h200-2026-12-06s11-prefetch/prefetch.diff.txt). Binaries in .dev-main/exp/.
# Session 11: an L2 prefetch of the weights K steps ahead in the HIP decode GEMV (mmab family,
# GM_PF) and the mma prefill GEMM (MM_PF). Three binaries of one commit but for those two
# constants: base (0 / 0), pf1 (GEMV 1 step, GEMM 2 steps), pf2 (GEMV 2, GEMM 4).
set -uo pipefail
O="${OUT:-/tmp/out}"; mkdir -p "$O"; S0=$(date +%s); BUDGET="${BUDGET:-540}"
el() { echo $(( $(date +%s) - S0 )); }
left() { [ $(( BUDGET - $(el) )) -gt "$1" ]; }
L="$O/steps.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$O/gpu.txt"
for v in base pf1 pf2; do gunzip -c .dev-main/exp/mxmoe_$v.gz > /tmp/mxmoe_$v; chmod +x /tmp/mxmoe_$v; done
for v in pf1 pf2 base; do
  MXMOE_REQUIRE_HIP=1 timeout 150 /tmp/mxmoe_$v check --backend hip --suite full > "$O/check_$v.txt" 2>&1
  echo "$(el)s $v check rc=$? $(tail -1 $O/check_$v.txt | cut -c1-90)" | tee -a "$L"
done
MXMOE_HIP_GEMV_PAIRS=0 MXMOE_REQUIRE_HIP=1 timeout 60 /tmp/mxmoe_pf2 check --backend hip --suite full --filter moe/ > "$O/check_pf2_gemm.txt" 2>&1
echo "$(el)s pf2 GEMM forced rc=$? $(tail -1 $O/check_pf2_gemm.txt | cut -c1-90)" | tee -a "$L"
for r in 1 2; do
for v in base pf1 pf2; do
  left 60 || break
  timeout 100 /tmp/mxmoe_$v bench --backend hip --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 20 --json "$O/b_${v}_g$r.json" > "$O/b_${v}_g$r.log" 2>&1
  echo "$(el)s $v gpt-oss r$r rc=$?" | tee -a "$L"
  left 50 || break
  timeout 100 /tmp/mxmoe_$v bench --backend hip --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 20 --json "$O/b_${v}_d$r.json" > "$O/b_${v}_d$r.log" 2>&1
  echo "$(el)s $v deepseek r$r rc=$?" | tee -a "$L"
done; done
for f in "$O"/b_*.log; do echo "== $f"; grep -E "M = [0-9]+: (wall|passes)" "$f" | sed -E 's/floor.*rel-L2/rel-L2/' | cut -c1-170; done > "$O/summary.txt"
tail -80 "$O/summary.txt"
