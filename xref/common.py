"""Shared inputs for the peer vector scripts (xref/*.py), and the writer.

Every script quantizes the same blocks: `inputs(fmt)` is deterministic (fixed bit patterns and a
PCG64 stream with a fixed seed), so the Rust test (tests/xref.rs) rebuilds nothing: it reads the
inputs back from each vector file. Blocks are 32 contiguous fp32 values; each row of the
returned array is one block. The block list (with its reasons) is `BLOCKS` below.
"""
import json
import struct
import numpy as np

FORMATS = {
    # name: (max normal, smallest subnormal step at scale 1)
    "mxfp4": (6.0, 0.5),
    "mxfp6_e2m3": (7.5, 0.125),
    "mxfp6_e3m2": (28.0, 0.0625),
    "mxfp8_e4m3": (448.0, 2.0 ** -9),
    "mxfp8_e5m2": (57344.0, 2.0 ** -16),
    "mxint8": (127.0 / 64.0, 1.0 / 64.0),
}

FLT_MAX = np.float32(3.4028234663852886e38)


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def grid(fmt):
    """Every non-negative value of the format at scale 1 (exact)."""
    mx, step = FORMATS[fmt]
    if fmt == "mxint8":
        return [i / 64.0 for i in range(128)]
    vals = {"mxfp4": (2, 1, 1), "mxfp6_e2m3": (2, 3, 1), "mxfp6_e3m2": (3, 2, 3),
            "mxfp8_e4m3": (4, 3, 7), "mxfp8_e5m2": (5, 2, 15)}[fmt]
    e, m, bias = vals
    out = []
    for E in range(1 << e):
        for M in range(1 << m):
            v = (M / (1 << m)) * 2.0 ** (1 - bias) if E == 0 else (1 + M / (1 << m)) * 2.0 ** (E - bias)
            if v <= mx:
                out.append(v)
    return sorted(set(out))


def blocks(fmt):
    """(description, 32 values) for every block of `fmt`'s input."""
    mx, _ = FORMATS[fmt]
    rng = np.random.Generator(np.random.PCG64(20261201))
    out = []

    def add(desc, vals):
        v = np.zeros(32, dtype=np.float32)
        vals = np.asarray(vals, dtype=np.float32).ravel()[:32]
        v[: len(vals)] = vals
        out.append((desc, v))

    add("all +0", [])
    add("all -0", [-0.0] * 32)
    add("mixed +-0 and one 1.0", [0.0, -0.0] * 15 + [1.0, -0.0])
    add("fp32 subnormals ~1e-39", rng.standard_normal(32) * 1e-39)
    add("fp32 subnormals k*2^-149", [f32(k) * s for k, s in zip(range(1, 33), [1, -1] * 16)])
    # Blocks whose scale is byte 0 or 1 under most rules (amax around max * 2^-127).
    for k in (-127, -126, -125):
        add(f"amax near max*2^{k} (scale byte 0/1)", rng.standard_normal(32) * np.float32(mx * 2.0 ** k) / 2.5)
    add("amax 1 ulp above max*2^-84 (torchao CPU RCEIL, T3)",
        [np.nextafter(np.float32(mx * 2.0 ** -84), np.float32(1))] + list(rng.standard_normal(31) * mx * 2.0 ** -86))
    add("FLT_MAX and friends", [FLT_MAX, -FLT_MAX, 1.0, -3e38, 2e38] + list(rng.standard_normal(27) * 1e38))
    add("amax 1.9*2^127", [np.float32(1.9 * 2.0 ** 127)] + list(rng.standard_normal(31) * 2.0 ** 126))
    add("+Inf in a finite block", [np.inf] + list(rng.standard_normal(31)))
    add("-Inf in a finite block", list(rng.standard_normal(31)) + [-np.inf])
    add("NaN in a finite block", [1.5, np.nan] + list(rng.standard_normal(30)))
    g = grid(fmt)
    mids = [(a + b) / 2 for a, b in zip(g, g[1:])]
    # Ties at scale 1: the block's amax is max normal, so floor/even/rceil keep scale 1.
    for i in range(0, len(mids), 31):
        chunk = mids[i:i + 31]
        sgn = [1 if j % 2 == 0 else -1 for j in range(len(chunk))]
        add(f"ties at scale 1 (midpoints {i}..{i + len(chunk) - 1})", [mx] + [s * m for s, m in zip(sgn, chunk)])
        if len(out) > 40:
            break
    add("amax 1 ulp below 2^k", [np.nextafter(np.float32(256.0), np.float32(0))] + list(rng.standard_normal(31) * 30))
    add("amax 1 ulp above 2^k", [np.nextafter(np.float32(256.0), np.float32(1e9))] + list(rng.standard_normal(31) * 30))
    add("amax 1 ulp below 2^-100", [np.nextafter(np.float32(2.0 ** -100), np.float32(0))] + list(rng.standard_normal(31) * 2.0 ** -103))
    add("amax max*2^k exactly", [mx * 8.0] + list(rng.standard_normal(31) * 9))
    add("amax at the even-rounding bump", [np.float32(mx * 1.0 * 16) * np.float32(1.0 + 1.0 / 64)] + list(rng.standard_normal(31) * 10))
    add("negative values rounding to zero (Quark +0, Q1)", [38.2, -0.63, -0.01, 0.01, -1e-3] + list(rng.standard_normal(27) * 0.05))
    add("amax 0.998 (Quark MXINT8 even, Q6)", [0.998, -0.5, 0.25] + list(rng.standard_normal(29) * 0.2))
    for i, e in enumerate((-140, -120, -60, -10, 0, 3, 10, 60, 120, 126)):
        add(f"random normal * 2^{e}", rng.standard_normal(32) * np.float32(2.0 ** e))
    for i in range(4):
        add("heavy tailed", rng.standard_normal(32) * np.exp(rng.standard_normal(32) * 2))
    return out


def inputs(fmt):
    bl = blocks(fmt)
    return np.stack([b for _, b in bl]).astype(np.float32), [d for d, _ in bl]


def save(path, tensors, meta):
    """safetensors with string metadata (the peer's name and version, the case list)."""
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path,
              metadata={k: (v if isinstance(v, str) else json.dumps(v)) for k, v in meta.items()})
