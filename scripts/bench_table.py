#!/usr/bin/env python3
"""The closing-call table: mxmoe bench JSON (both backends) beside the peers' log, markdown.

Usage: scripts/bench_table.py DIR   (DIR holds bench_{wgpu,hip}_{gptoss,dsr1}.json and peers.log
as scripts/h200-final.sh writes them). Prints, per shape, one row per token count: the floor,
each backend's GPU / wall ms (TFLOP/s at >= 512 tokens), matmul_ogs and grouped_mm (CUDA
graphs) from the same call, and the best mxmoe GPU time over the floor and over matmul_ogs's.
"""
import json
import re
import sys
from pathlib import Path


def load(d, name):
    p = d / name
    return {r["tokens"]: r for r in json.loads(p.read_text())} if p.exists() else {}


def peers(d):
    out = {}
    p = d / "peers.log"
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        m = re.match(r"(\S+)\s+M=\s*(\d+).*ogs eager=\s*[\d.]+ graph=\s*([\d.]+) \(\s*([\d.]+) TF/s.*gmm eager=\s*[\d.]+ graph=\s*([\d.]+)", line)
        if m:
            out[(m.group(1), int(m.group(2)))] = (float(m.group(3)), float(m.group(4)), float(m.group(5)))
    return out


def cell(r, big):
    if not r:
        return "-"
    s = f"{r['gpu_ms']:.3f} / {r['wall_ms']:.3f}"
    if big:
        s += f" ({r['flops'] / r['gpu_ms'] / 1e9:.0f})"
    return s


def main():
    d = Path(sys.argv[1])
    pe = peers(d)
    for shape, tag in [("gpt-oss-120b", "gptoss"), ("deepseek-r1", "dsr1")]:
        w, h = load(d, f"bench_wgpu_{tag}.json"), load(d, f"bench_hip_{tag}.json")
        print(f"\n{shape}\n")
        print("| tokens | floor | wgpu | hip | best x floor | matmul_ogs | grouped_mm bf16 | best / ogs |")
        print("|---|---|---|---|---|---|---|---|")
        for t in sorted(set(w) | set(h)):
            big = t >= 512
            r = h.get(t) or w.get(t)
            floor = r.get("floor_ms", 0.0)
            best = min(x["gpu_ms"] for x in (w.get(t), h.get(t)) if x)
            ogs = pe.get((shape, t))
            o = f"{ogs[0]:.3f}" + (f" ({ogs[1]:.0f})" if big else "") if ogs else "-"
            g = f"{ogs[2]:.3f}" if ogs else "-"
            ratio = f"{best / ogs[0]:.2f}x" if ogs else "-"
            xf = f"{best / floor:.1f}" if floor else "-"
            print(f"| {t} | {floor:.4f} | {cell(w.get(t), big)} | {cell(h.get(t), big)} | {xf} | {o} | {g} | {ratio} |")


if __name__ == "__main__":
    main()
