#!/usr/bin/env bash
# Session 8, wgpu wall overhead (issue 8): mxmoe bench on wgpu (Vulkan), before (the branch base,
# .dev-wgpuio8/mxmoe-base) and after (.dev-wgpuio8/mxmoe, with the host phases), interleaved per
# shape; then, if time is left, the HIP backend's host phases. MXMOE_HOST_PROFILE=20 prints the
# host steps (means over 20 forwards) to the logs. Results: $OUT/r.tgz. Stops by ~185 s.
set -uo pipefail
gunzip -f .dev-wgpuio8/mxmoe.gz .dev-wgpuio8/mxmoe-base.gz; chmod +x .dev-wgpuio8/mxmoe .dev-wgpuio8/mxmoe-base
O="${OUT:-/tmp/out}"; R="$O/r"; mkdir -p "$R"; S0=$(date +%s)
NEW=.dev-wgpuio8/mxmoe; OLD=.dev-wgpuio8/mxmoe-base
st() { echo "$(( $(date +%s) - S0 ))s $*" | tee -a "$R/steps.txt"; (cd "$R" && tar czf ../r.tgz .); }
left() { echo $(( 185 - ($(date +%s) - S0) )); }
lim() { local l; l=$(left); [ "$l" -gt "$1" ] && echo "$1" || echo "$l"; }
export WGPU_BACKEND=vulkan MXMOE_ADAPTER=NVIDIA MXMOE_HOST_PROFILE=20
nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv,noheader -lms 250 > "$R/clocks.csv" 2>&1 &
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; free -g; } > "$R/info.txt" 2>&1
st info
for b in new old; do
  B=$NEW; [ $b = old ] && B=$OLD
  timeout "$(lim 42)" $B bench --backend wgpu --shape gpt-oss-120b --tokens 1,64,2048 --iters 20 \
    --json "$R/gptoss_$b.json" > "$R/gptoss_$b.log" 2>&1; st "gpt-oss $b rc=$?"
done
for b in new old; do
  B=$NEW; [ $b = old ] && B=$OLD
  timeout "$(lim 48)" $B bench --backend wgpu --shape deepseek-r1 --tokens 1,2048 --iters 20 \
    --json "$R/dsr1_$b.json" > "$R/dsr1_$b.log" 2>&1; st "dsr1 $b rc=$?"
done
grep -HE "^ +[0-9]+ +[0-9.]+ |host phases \(median" "$R"/*.log | cut -c1-220 >> "$R/steps.txt"
if [ "$(left)" -gt 15 ]; then
  MXMOE_REQUIRE_HIP=1 timeout "$(left)" $NEW bench --backend hip --shape gpt-oss-120b --tokens 1,2048 \
    --iters 20 --json "$R/hip_gptoss.json" > "$R/hip_gptoss.log" 2>&1; st "hip gpt-oss rc=$?"
  grep -HE "^ +[0-9]+ +[0-9.]+ |host phases \(median" "$R"/hip*.log | cut -c1-220 >> "$R/steps.txt"
fi
st done
