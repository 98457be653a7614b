#!/usr/bin/env python3
"""Check the k permutation, the FP4 -> bf16 decode and the fragment bookkeeping of the matrix-core
GEMV (hip/gemv_mma.h) against a plain matrix product, on the CPU.

One warp step is emulated lane by lane exactly as gm_step builds its registers: lane (g, t) owns
32-block t of rows g and g + 8 (one 16-byte word each), word q feeds two MMAs (hh = 0, 1) with
fragment registers A r0 = pair(row g, word q, 2hh) x factor, r1 = the same for row g + 8,
r2 / r3 = pair 2hh + 1; B r0 = bf16x2(x[8q + 2hh], x[8q + 2hh + 4]), r1 = (x[8q + 2hh + 1],
x[8q + 2hh + 5]) of block t and pair g. The MMA is emulated from the PTX ISA's fragment layout
for mma.m16n8k16 (.bf16): A a0,a1 = (row g, k 2t + i), a2,a3 = (row g + 8, k 2t + i), a4,a5 =
(row g, k 2t + 8 + i), a6,a7 = (row g + 8, k 2t + 8 + i); B b0,b1 = (k 2t + i, column g), b2,b3 =
(k 2t + 8 + i, column g); C c0,c1 = (row g, column 2t + i), c2,c3 = (row g + 8, column 2t + i);
register j holds elements 2j (low half) and 2j + 1 (high half). The weights' values come from the
E2M1 table (OCP MX spec, as NUMERICS.md), not from the decode under test.

Run: python3 scripts/gemv_mma_layout.py (exit status 1 on a mismatch).
"""
import random
import struct
import sys

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def code_value(c):
    v = E2M1[c & 7]
    return -v if c & 8 else v


def bf16_value(bits):
    """The value of bf16 bits (exact, as a Python float)."""
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16_rne(x):
    """bf16 bits of f32 x, round to nearest even (cvt.rn.bf16.f32; finite x only here)."""
    b = f32_bits(x)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def to_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_of_value(v):
    """bf16 bits of an exactly representable value (or inf)."""
    if v != v:
        return 0x7FC0
    if v >= 2.0 ** 128:  # an exact product of <= 2 significant bits: overflow is inf
        return 0x7F80
    if v <= -(2.0 ** 128):
        return 0xFF80
    b = f32_bits(v)
    assert b & 0xFFFF == 0, v
    return b >> 16


def nv4_word(w):
    """hip/nv4.h nv4_word: the stored word w in the layout the kernels decode."""
    return (((w & 0x00080008) << 12) | ((w & 0x00070007) << 6) | ((w & 0x00800080) << 5)
            | ((w & 0x00700070) >> 1) | ((w & 0x08000800) >> 2) | ((w & 0x07000700) >> 8)
            | ((w & 0x80008000) >> 5) | (w & 0x60006000) | ((w & 0x10001000) >> 1)) & 0xFFFFFFFF


def fp4_bf16_pair(w, i):
    """hip/gemv_mma.h fp4_bf16_pair (hip/nv4.h nv4_pair) on the stored word w rearranged by
    nv4_word: codes i and i + 4, times 2^-126."""
    v = nv4_word(w)
    if i < 3:
        return ((v << (3 * i)) & 0xFFFFFFFF) & 0x81C081C0
    return ((v >> 6) & 0x01800180) | ((v >> 5) & 0x00400040) | ((v << 5) & 0x80008000)


def bf16x2_mul(a, f):
    """fma.rn.bf16x2(a, f, -0) on exact products (the decode's only use): per half, a * f."""
    out = 0
    for half in range(2):
        x = bf16_value(a >> (16 * half)) * bf16_value(f >> (16 * half))
        out |= bf16_of_value(x) << (16 * half)
    return out


def fast_factor(s, ok=True):
    """The fast path's factor 2^(s - 1) (s <= 128) as bf16x2, 0 outside the matrix."""
    return ((s + 126) * 0x00800080) & 0xFFFFFFFF if ok else 0


def slow_factor(s, ok=True):
    """The slow path's second factor 2^(s - 127) (after x 2^126), any s."""
    if not ok:
        return 0
    if s == 255:
        return 0x7FC07FC0
    if s == 0:
        return 0x00400040  # the bf16 subnormal 2^-127
    return s * 0x00800080


SLOW_F1 = 0x7E807E80  # 2^126


def decode(w, i, s, slow):
    """A fragment register: pair i of word w times the block's scale, as gm_step computes it."""
    if slow:
        return bf16x2_mul(bf16x2_mul(fp4_bf16_pair(w, i), SLOW_F1), slow_factor(s))
    return bf16x2_mul(fp4_bf16_pair(w, i), fast_factor(s))


def check_decode():
    bad = 0
    for s in range(256):
        for slow in (False, True) if s <= 128 else (True,):
            for c in range(16):
                for c4 in range(16):
                    w = c | (c4 << 16)  # code 0 and code 4 of a word
                    d = decode(w, 0, s, slow)
                    for half, code in ((0, c), (1, c4)):
                        want = code_value(code) * 2.0 ** (s - 127) if s < 255 else float("nan")
                        if abs(want) >= 2.0 ** 128:  # w_store's f32 product overflows
                            want = float("inf") if want > 0 else float("-inf")
                        got = bf16_value(d >> (16 * half))
                        same = (got != got and want != want) or (got == want and str(got) == str(want))
                        if not same:
                            bad += 1
                            if bad < 5:
                                print(f"decode: s={s} slow={slow} code={code}: got {got}, want {want}")
    # every pair position i of a word
    for trial in range(2000):
        w = random.getrandbits(32)
        for i in range(4):
            d = decode(w, i, 127, False)
            for half, j in ((0, i), (1, i + 4)):
                want = code_value((w >> (4 * j)) & 15)
                got = bf16_value(d >> (16 * half))
                if got != want or str(got) != str(want):
                    bad += 1
                    if bad < 5:
                        print(f"pair: w={w:08x} i={i}: got {got}, want {want}")
    return bad


def mma(c, a_regs, b_regs):
    """Emulate one mma.m16n8k16 over 32 lanes: c[lane] (4 floats) += A x B."""
    A = [[0.0] * 16 for _ in range(16)]
    B = [[0.0] * 8 for _ in range(16)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(4):
            for i in range(2):
                el = 2 * j + i
                row = g + (8 if el in (2, 3, 6, 7) else 0)
                k = 2 * t + (el & 1) + (8 if el >= 4 else 0)
                A[row][k] = bf16_value(a_regs[lane][j] >> (16 * i))
        for j in range(2):
            for i in range(2):
                k = 2 * t + i + 8 * j
                B[k][g] = bf16_value(b_regs[lane][j] >> (16 * i))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for el in range(4):
            row = g + (8 if el >= 2 else 0)
            col = 2 * t + (el & 1)
            c[lane][el] += sum(A[row][k] * B[k][col] for k in range(16))


def check_step(split):
    """One warp step (4 blocks x 16 rows x 8 pairs) against the plain product."""
    rows, cols, kb = 16, 8, 4
    codes = [[[random.getrandbits(4) for _ in range(32)] for _ in range(kb)] for _ in range(rows)]
    scales = [[random.choice([0, 1, 100, 120, 127, 128, 129, 131]) for _ in range(kb)] for _ in range(rows)]
    if split:
        x = [[to_f32(random.uniform(-4, 4)) for _ in range(32 * kb)] for _ in range(cols)]
    else:
        x = [[bf16_value(bf16_rne(random.uniform(-4, 4))) for _ in range(32 * kb)] for _ in range(cols)]
    words = [[[sum(codes[r][b][8 * q + j] << (4 * j) for j in range(8)) for q in range(4)] for b in range(kb)] for r in range(rows)]
    slow = any(s > 128 for rs in scales for s in rs)  # the warp's vote
    c = [[0.0] * 4 for _ in range(32)]
    for q in range(4):
        for hh in range(2):
            a_regs, bh_regs, bl_regs = [], [], []
            for lane in range(32):
                g, t = lane // 4, lane % 4
                regs = []
                for rr, pi in ((g, 2 * hh), (g + 8, 2 * hh), (g, 2 * hh + 1), (g + 8, 2 * hh + 1)):
                    regs.append(decode(words[rr][t][q], pi, scales[rr][t], slow))
                a_regs.append(regs)
                xb = x[g][32 * t:32 * t + 32]
                bh, bl = [], []
                for j in range(2):
                    lo, hi = xb[8 * q + 2 * hh + j], xb[8 * q + 2 * hh + j + 4]
                    hb = bf16_rne(lo) | (bf16_rne(hi) << 16)
                    bh.append(hb)
                    rl = to_f32(lo - bf16_value(hb))
                    rh = to_f32(hi - bf16_value(hb >> 16))
                    bl.append(bf16_rne(rl) | (bf16_rne(rh) << 16))
                bh_regs.append(bh)
                bl_regs.append(bl)
            mma(c, a_regs, bh_regs)
            if split:
                mma(c, a_regs, bl_regs)
    bad = 0
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for el in range(4):
            row = g + (8 if el >= 2 else 0)
            col = 2 * t + (el & 1)
            want = sum(
                code_value(codes[row][b][j]) * 2.0 ** (scales[row][b] - 127) * x[col][32 * b + j]
                for b in range(kb)
                for j in range(32)
            )
            got = c[lane][el]
            tol = 1e-4 * sum(abs(code_value(codes[row][b][j]) * 2.0 ** (scales[row][b] - 127) * x[col][32 * b + j]) for b in range(kb) for j in range(32)) if split else 1e-9 * max(1.0, abs(want))
            if abs(got - want) > tol:
                bad += 1
                if bad < 5:
                    print(f"step split={split}: row {row} col {col}: got {got}, want {want}")
    return bad


def main():
    random.seed(7)
    bad = check_decode()
    for split in (False, True):
        for _ in range(3):
            bad += check_step(split)
    print("gemv_mma layout:", "OK" if bad == 0 else f"{bad} mismatches")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
