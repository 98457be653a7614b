#!/usr/bin/env bash
# The whole measuring call of the perf branch, in one device call (written for
# docs/h200-2026-12-01-perf; NOT yet run: that session's device budget ran out first):
#  1. GEMV layout sweep at decode sizes (bench --gemv-layouts), both shapes (SWEEP=0 skips it and
#     keeps the code's default layout);
#  2. the layout with the lowest summed relative GPU time is used for everything below (through
#     MXMOE_GEMV_PREFETCH / MXMOE_GEMV_WORDS, so it is what the code's defaults become);
#  3. mxmoe check --suite full on the H200;
#  4. mxmoe bench, both shapes, the whole token matrix;
#  5. the peers at the same token counts: matmul_ogs and grouped_mm bf16 (peer_triton_ogs.py),
#     then the emulation (peer_torch_moe.py).
# Expects .dev-perf/mxmoe and .peers/ (with .tk); writes 7 files to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B=.dev-perf/mxmoe
T=$(mktemp -d)
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$T/clocks.csv" 2>&1 &
SMI=$!
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; $B info; } > "$OUT/sweep.log" 2>&1
L=subgroup+words+prefetch,subgroup+words,subgroup+prefetch,subgroup
if [ "${SWEEP:-1}" != 0 ]; then
$B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16 --iters 30 --gemv-layouts $L \
  --json "$T/sweep_gptoss.json" >> "$OUT/sweep.log" 2>&1
$B bench --backend wgpu --shape deepseek-r1 --tokens 1,8 --iters 30 --gemv-layouts $L \
  --json "$T/sweep_dsr1.json" >> "$OUT/sweep.log" 2>&1
fi
python3 - "$T" "$OUT" > "$T/pick.env" <<'PY'
import json, sys, collections
t, out = sys.argv[1], sys.argv[2]
rows = []
for f in ("sweep_gptoss.json", "sweep_dsr1.json"):
    try:
        rows += json.load(open(f"{t}/{f}"))
    except Exception as e:
        print(f"# {f}: {e}", file=sys.stderr)
json.dump(rows, open(f"{out}/sweep.json", "w"), indent=1)
lay = lambda r: next((n for n in r["notes"] if n.startswith("GEMV layout")), "?")
best = collections.defaultdict(lambda: float("inf"))
for r in rows:
    best[r["case"]] = min(best[r["case"]], r["gpu_ms"] or float("inf"))
score = collections.defaultdict(float)
for r in rows:
    score[lay(r)] += (r["gpu_ms"] or float("inf")) / best[r["case"]]
for l, s in sorted(score.items(), key=lambda x: x[1]):
    print(f"# score {s:.3f}  {l}")
pick = min(score, key=score.get) if score else ""
print(f"export MXMOE_GEMV_PREFETCH={int('prefetched' in pick)} MXMOE_GEMV_WORDS={int('(words per lane)' in pick)}")
PY
cat "$T/pick.env" >> "$OUT/sweep.log"
[ "${SWEEP:-1}" != 0 ] && . "$T/pick.env"
$B check --backend wgpu --suite full > "$OUT/check.txt" 2>&1
$B bench --backend wgpu --shape gpt-oss-120b --tokens 1,4,16,64,256,2048 --iters 50 \
  --json "$OUT/bench_gptoss.json" > "$OUT/bench.log" 2>&1
$B bench --backend wgpu --shape deepseek-r1 --tokens 1,8,64,512,2048 --iters 50 \
  --json "$OUT/bench_dsr1.json" >> "$OUT/bench.log" 2>&1
{ echo "# SM clock samples (MHz: count) up to the peers"; awk -F, '{print $2}' "$T/clocks.csv" | sort | uniq -c | sort -rn | head -8; } >> "$OUT/check.txt"
grep "^# score\|^export" "$OUT/sweep.log"
grep "passed" "$OUT/check.txt"
grep -E "^ +[0-9]+ +[0-9.]+ " "$OUT/bench.log"
# Peers last (their stdout into peers.log as they go; their own files stay in $T).
(cd .peers && OUT="$T" python3 peer_triton_ogs.py) > "$OUT/peers.log" 2>&1
grep -E "M=|copy" "$OUT/peers.log" | cut -c1-150
(cd .peers && OUT="$T" python3 peer_torch_moe.py) >> "$OUT/peers.log" 2>&1
kill $SMI
tail -14 "$OUT/peers.log" | cut -c1-150
