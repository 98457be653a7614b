#!/usr/bin/env python3
"""Static census of the HIP backend's NVIDIA kernels: the instructions of each kernel's hot loop
(the innermost loop with the most matrix instructions) by class, on the SASS that ptxas makes of
our sm_90a PTX. No GPU needed: ptxas (`pip download nvidia-cuda-nvcc-cu12`) and nvdisasm
(`pip download nvidia-cuda-nvdisasm`) are enough.

It counts instructions, not time: a kernel bound by instruction issue (the decode GEMV,
docs/MEASURED.md) gains from fewer of them, one bound by the L1 data pipe's wavefronts (the
prefill GEMMs) from fewer or wider memory instructions; whether it gets faster is for the GPU
to say (`mxmoe bench`).

    scripts/sass_census.py [--ptx FILE | --sass FILE] [--ptxas P] [--nvdisasm N]
                           [--json OUT] [REGEX ...]

REGEX: kernel names to report (default: the GEMV and GEMM kernels). Without --ptx / --sass it
takes the newest target/*/build/mxmoe-*/out/mxmoe_sm90.ptx (a build with --features hip).

For each kernel: its registers (ptxas -v), and for the hot loop the instructions along the
shortest and the longest path from the loop head to its back edge (a branch taken inside the
loop, such as the GEMV's slow path for scale bytes > 128, makes them differ), by class:
  mma   HMMA / HGMMA (mma.sync / wgmma)      ldg   global loads (LDG)
  cpa   async copies (LDGSTS, cp.async)       lds   shared loads (LDS, LDSM)
  sts   shared stores (STS)                   bar   barriers and fences (BAR, DEPBAR,
  alu   the rest                                    WARPGROUP, SYNCS, MEMBAR)
units: the path's matrix work per warp in mma.sync m16n8k16 units (HGMMA.64xNx16 = N / 8), and
ins/unit the instructions issued per unit: the cost of feeding the tensor cores.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

DEFAULT = [r"^moe_gemv[12]_mma", r"^moe_gemm[12]_mma"]
CLASSES = ["mma", "ldg", "cpa", "lds", "sts", "bar", "alu"]


def mma_units(op):
    """A matrix instruction's work per warp in units of one mma.sync m16n8k16 (2048
    multiply-adds): HGMMA.64xNx16 is issued by each of a warpgroup's 4 warps, 16 x N x 16 each."""
    m = re.match(r"HGMMA\.64x(\d+)x16", op)
    if m:
        return int(m.group(1)) // 8
    m = re.match(r"HMMA\.(\d+)", op)
    if m:
        return {"16816": 1, "1688": 0.5}.get(m.group(1), 1)
    return 0


def classify(op):
    if op.startswith(("HMMA", "HGMMA")):
        return "mma"
    if op.startswith("LDGSTS"):
        return "cpa"
    if op.startswith("LDG"):
        return "ldg"
    if op.startswith(("LDS", "LDSM")):
        return "lds"
    if op.startswith("STS"):
        return "sts"
    if op.startswith(("BAR", "DEPBAR", "WARPGROUP", "SYNCS", "MEMBAR", "ARRIVES")):
        return "bar"
    return "alu"


INS = re.compile(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")
LABEL = re.compile(r"^(\.L_x_\d+):")


def functions(sass):
    """{name: [lines]} from nvdisasm's output."""
    out, cur = {}, None
    for line in sass.splitlines():
        m = re.match(r"^\.text\.([A-Za-z_]\w*):", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        if line.startswith("//----") or line.lstrip().startswith(".section"):
            cur = None
        if cur is not None:
            out[cur].append(line)
    return out


def parse(lines):
    """Instructions [(addr, pred, op, args)] and {label: index of the next instruction}."""
    ins, labels, pending = [], {}, []
    for line in lines:
        m = LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = INS.search(line)
        if m:
            for lb in pending:
                labels[lb] = len(ins)
            pending = []
            ins.append((int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4)))
    for lb in pending:
        labels[lb] = len(ins)
    return ins, labels


def blocks(ins, labels):
    """Basic blocks [(start, end)] and their successor lists."""
    starts = {0} | set(labels.values())
    for i, (_, pred, op, args) in enumerate(ins):
        if op.startswith(("BRA", "EXIT", "RET", "BRX", "JMP")):
            starts.add(i + 1)
    starts = sorted(s for s in starts if s < len(ins))
    bl = [(s, (starts[k + 1] if k + 1 < len(starts) else len(ins))) for k, s in enumerate(starts)]
    at = {s: k for k, (s, _) in enumerate(bl)}
    succ = []
    for k, (s, e) in enumerate(bl):
        _, pred, op, args = ins[e - 1]
        nxt = [k + 1] if k + 1 < len(bl) else []
        if op.startswith("BRA"):
            m = re.search(r"\(?(\.L_x_\d+)\)?", args)
            tgt = [at[labels[m.group(1)]]] if m and labels.get(m.group(1)) in at else []
            succ.append(tgt + (nxt if pred else []))
        elif op.startswith(("EXIT", "RET")) and not pred:
            succ.append([])
        else:
            succ.append(nxt)
    return bl, succ


def loops(bl, succ):
    """Natural loops {head: set of blocks} (back edge: a branch to a block at or before it)."""
    pred = [[] for _ in bl]
    for k, ss in enumerate(succ):
        for s in ss:
            pred[s].append(k)
    out = {}
    for b, ss in enumerate(succ):
        for h in ss:
            if h <= b:
                body, stack = {h, b}, [b]
                while stack:
                    x = stack.pop()
                    if x == h:
                        continue
                    for p in pred[x]:
                        if p not in body:
                            body.add(p)
                            stack.append(p)
                out.setdefault(h, set()).update(body)
    return out


def census(ins, bl, succ, head, body):
    """Class counts along the paths head -> back edge within body (edges that close an inner
    loop are left out: inner loops' bodies count once) that hold the most matrix instructions:
    the shortest and the longest of them. Branches that skip work (the GEMV's slow path not
    taken, a split GEMM's lo half skipped) then do not hide the loop's matrix work."""
    # `@!PT` instructions never execute (ptxas's scoreboard fillers): issue slots, class alu
    cost = {k: ["alu" if ins[i][1] == "@!PT" else classify(ins[i][2]) for i in range(*bl[k])]
            for k in body}
    units = {k: sum(mma_units(ins[i][2]) for i in range(*bl[k])) for k in body}

    def hist(cl):
        h = {c: cl[0].count(c) for c in CLASSES}
        h["units"] = cl[1]
        return h

    memo, onstack = {}, set()
    sys.setrecursionlimit(100000)

    def walk(k):
        # {mma count: (shortest classes, longest classes)} of paths from k's start to the edge
        # back to head
        if k in memo:
            return memo[k]
        onstack.add(k)
        out = {}
        for s in succ[k]:
            if s == head:
                sub = {0: (([], 0), ([], 0))}
            elif s not in body or s in onstack:
                continue
            else:
                sub = walk(s)
            for m, (lo, hi) in sub.items():
                key = m + units[k]
                nlo = (cost[k] + lo[0], units[k] + lo[1])
                nhi = (cost[k] + hi[0], units[k] + hi[1])
                cur = out.get(key)
                out[key] = (nlo, nhi) if cur is None else (
                    nlo if len(nlo[0]) < len(cur[0][0]) else cur[0],
                    nhi if len(nhi[0]) > len(cur[1][0]) else cur[1])
        onstack.discard(k)
        memo[k] = out
        return out

    ends = walk(head)
    if not ends:
        return None
    lo, hi = ends[max(ends)]
    return {"short": hist(lo), "long": hist(hi)}


def hot_loop(lines):
    """The loop with the most matrix instructions in its body (ties: the smallest body, so
    the K loop rather than a loop around it), with its census."""
    ins, labels = parse(lines)
    if not ins:
        return None
    bl, succ = blocks(ins, labels)
    best = None
    for h, body in loops(bl, succ).items():
        nmma = sum(mma_units(ins[i][2]) for k in body for i in range(*bl[k]))
        size = sum(e - s for s, e in (bl[k] for k in body))
        if nmma and (best is None or (nmma, -size) > (best[0], -best[1])):
            best = (nmma, size, h, body)
    if best is None:
        return None
    c = census(ins, bl, succ, best[2], best[3])
    return (best[0], ins[bl[best[2]][0]][0], c) if c else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ptx")
    ap.add_argument("--sass")
    ap.add_argument("--ptxas", default=os.environ.get("MXMOE_PTXAS", "ptxas"))
    ap.add_argument("--nvdisasm", default=os.environ.get("MXMOE_NVDISASM", "nvdisasm"))
    ap.add_argument("--json")
    ap.add_argument("regex", nargs="*")
    a = ap.parse_args()
    regs = {}
    if a.sass:
        sass = open(a.sass).read()
    else:
        ptx = a.ptx
        if not ptx:
            found = glob.glob("target/*/build/mxmoe-*/out/mxmoe_sm90.ptx")
            if not found:
                sys.exit("no mxmoe_sm90.ptx under target/: build with --features hip, or give --ptx")
            ptx = max(found, key=os.path.getmtime)
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "k.ptx")
            data = open(ptx, "rb").read().rstrip(b"\0")  # build.rs stores it NUL-terminated
            open(src, "wb").write(data)
            cubin = os.path.join(d, "k.cubin")
            print(f"ptxas -arch=sm_90a on {ptx} (about a minute)", file=sys.stderr)
            r = subprocess.run([a.ptxas, "-arch=sm_90a", "-O3", "-v", "-o", cubin, src],
                               capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"ptxas failed:\n{r.stderr[-2000:]}")
            for part in r.stderr.split("Compiling entry function '")[1:]:
                m = re.search(r"Used (\d+) registers", part)
                if m:
                    regs[part.split("'")[0]] = int(m.group(1))
            r = subprocess.run([a.nvdisasm, "-c", cubin], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"nvdisasm failed:\n{r.stderr[-2000:]}")
            sass = r.stdout
    pats = [re.compile(p) for p in (a.regex or DEFAULT)]
    rows = []
    for name, lines in sorted(functions(sass).items()):
        if not any(p.search(name) for p in pats):
            continue
        h = hot_loop(lines)
        if h is None:
            rows.append({"kernel": name, "regs": regs.get(name), "loop": None})
            continue
        nmma, addr, c = h
        rows.append({"kernel": name, "regs": regs.get(name), "loop": f"{addr:#x}", **c})
    w = max([len(r["kernel"]) for r in rows] + [6])
    hdr = "  ".join(f"{c:>4}" for c in CLASSES)
    print(f"{'kernel':<{w}}  regs  path   total  {hdr}  units  ins/unit")
    for r in rows:
        if r["loop"] is None:
            print(f"{r['kernel']:<{w}}  {r['regs'] or '':>4}  (no loop with matrix instructions)")
            continue
        for path in ("short", "long"):
            c = r[path]
            tot = sum(c[k] for k in CLASSES)
            per = tot / c["units"] if c["units"] else float("nan")
            cells = "  ".join(f"{c[k]:>4}" for k in CLASSES)
            reg = f"{r['regs'] or '':>4}" if path == "short" else "    "
            name = r["kernel"] if path == "short" else ""
            print(f"{name:<{w}}  {reg}  {path:<5}  {tot:>5}  {cells}  {c['units']:>5g}  {per:8.2f}")
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
