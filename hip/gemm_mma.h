// gemm_mma.h: the "swap AB" grouped GEMM for prefill (NVIDIA only; MXMOE_HIP_GEMM=mma,
// docs/hip-gemm-mma.md). Included from mxmoe.cu after the v1 and v2 GEMMs (it uses gemm_v1.h's
// gemm_epilogue and GEMM_BF16_ARGS, moe_tile.h's load_tile and weight_row, moe_common.h's
// MoeParams). MXFP4 weights only (cb4); MXFP6 / MXFP8 / MXINT8 weights keep v1 / v2.
//
// The idea is Marlin's (IST-DASLab/marlin, "Mixed-precision Auto-Regressive LINear kernels",
// Frantar et al. 2024): the quantized weights are the A operand of mma.sync and are decoded in
// registers straight from global memory, the activations are the B operand through a cp.async
// ring in shared memory. Our code is our own; what we take is the idea and the PTX ISA's
// documented fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"): with g = lane / 4 and t = lane % 4, A a0..a7 sit at rows g (a0, a1, a4, a5) and g + 8
// (a2, a3, a6, a7), columns 2t, 2t + 1 (a0..a3) and 2t + 8, 2t + 9 (a4..a7), packed two per
// register in that order; B b0..b3 at k 2t, 2t + 1, 2t + 8, 2t + 9 of column g; C c0..c3 at rows
// g (c0, c1) and g + 8, columns 2t, 2t + 1. A lane holds the same four k indices of A and of B:
// so any bijection between the MMA's logical k and the stored k that is the same on both
// sides leaves the product unchanged. We pick one that makes every lane's codes whole words:
//
//   - block = 8 warps, MM_ROWS = 128 weight rows (stage 1: the gate and up rows of 64
//     intermediate columns, as v1) x TP pair columns (token-expert pairs of one tile, 16, 32 or
//     64); warp w owns weight rows 16w .. 16w + 15 and all TP columns (TP / 8 n8 fragments);
//   - K in steps of MM_BK = 128 = four 32-blocks; in step s lane (g, t) owns block 4s + t of
//     weight rows g and g + 8: one 16-byte ld.global.nc per row brings its 32 FP4 codes (4 words);
//   - word w (codes 8w .. 8w + 7 of the block) feeds two k16 MMAs: code pairs (j, j + 4) are one
//     bf16x2 register each (the decode below makes pairs (j, j + 4) cheaply), MMA 0 takes pairs
//     0 and 1 (logical k 2t, 2t+1 <- codes 0, 4; k 2t+8, 2t+9 <- codes 1, 5), MMA 1 pairs 2 and 3;
//   - the B side must match: lane (g, t) needs, for column g, x[8w + 0], x[8w + 4], x[8w + 1],
//     x[8w + 5] (MMA 0) and x[8w + 2], x[8w + 6], x[8w + 3], x[8w + 7] (MMA 1) of block 4s + t.
//     mx_to_bf16_p8 writes the bf16 activations with every group of 8 in that order
//     (0, 4, 1, 5, 2, 6, 3, 7), so one 16-byte shared load per lane and word gives exactly the
//     two MMAs' B registers (no ldmatrix, no permute in the loop);
//   - the activations (TP rows x 128 bf16 a step, hi and, for weight-only schemes, lo) go
//     through an MmShape::STAGES-deep cp.async ring (one barrier per step), with the 16-byte
//     chunks XOR-swizzled so that the 8 lanes of a quarter warp hit 8 distinct bank groups;
//   - the weights need no shared memory and no barrier: each lane loads its own codes one step
//     (64-pair tiles) or two steps (16 / 32) ahead into registers.
// Exact weights, as v1's w_store: the FP4 magnitude bits at bf16 bits 6..8 and the sign at 15
// are the E2M1 value times 2^-126 (code 1 = 0.5 lands on the bf16 subnormal 2^-127); times
// 2^126 (exact), then times the E8M0 scale as a bf16 (2^(s - 127), subnormal for s = 0, NaN for
// 255) is exact: a product of two powers of two and a value with 2 significant bits is
// representable unless it overflows (to Inf, as v1's f32 product does) - bf16 has f32's
// exponent range. fma.rn.bf16x2 with a -0 addend rounds once (no rounding here) and keeps
// subnormals (PTX ISA, fma: "subnormal numbers are supported" for bf16). When every scale byte
// of a warp's step is <= 128 (a vote), one fma by 2^(s - 1) does both multiplies exactly.
// The f32 C fragments (rows = weight rows) are staged transposed through shared memory into
// v1's layout, and v1's gemm_epilogue finishes (bias, router weight, activation, intermediate
// QDQ, gemm2): the same arithmetic on the same values, so the same bits as v1 wherever v1's f32
// sums are reproduced (the MMA's k order differs: sums agree within f32 rounding, as v1 vs v2).
#pragma once

#if defined(MX_NV)
#include "nv4.h"
#define MM_ROWS 128u     // weight rows per block
#define MM_THREADS 256u  // 8 warps, 16 weight rows each
#define MM_BK 128u       // k per step: four 32-blocks
#define MM_ROWB 256u     // bytes of one pair row of a ring stage (MM_BK bf16)

#if !defined(MX_HOST_EMU)  // hip/test/nv_emu.h: emu_dsmem
extern MX_SHARED __attribute__((aligned(16))) unsigned char mm_dsmem[];
#else
#define mm_dsmem emu_dsmem
#endif

// One kernel's dynamic shared memory (bytes): [ring: STAGES x (hi[, lo]) x TP rows x MM_ROWB];
// the epilogue's f32 [TP][MM_ROWS + 1] (v1's sC layout) reuses it from the start.
// FM: m16 fragments (16-row groups of weight rows) per warp; the 8 warps are 8 / FM row groups
// x FM pair groups of TP / FM columns. FM = 2 reads each B fragment for two MMAs of A, half the
// shared-memory bytes per MMA, and decodes each weight twice (in two warps).
template <u32 TP, bool SPLIT, u32 FM = 1u, u32 WDX = 0u>
struct MmShape {
  static constexpr u32 STAGES = (TP >= 64u && SPLIT) ? 3u : 4u;
  // weight steps in flight (registers): WDX, else 1 (64-pair tiles) or 2
  static constexpr u32 WD = WDX ? WDX : (TP >= 64u ? 1u : 2u);
  static constexpr u32 WN = FM;                   // warps along the pairs
  static constexpr u32 WTP = TP / WN;             // pair columns per warp
  static constexpr u32 MNF = WTP / 8u;            // n8 fragments per warp
  static constexpr u32 GMAX = (SPLIT ? 2u : 4u) / FM;
  static constexpr u32 G = MNF < GMAX ? MNF : GMAX;  // fragments per group (skipped past the tile's pairs)
  static constexpr u32 TILE = TP * MM_ROWB;    // bytes, one array
  static constexpr u32 STAGE = (SPLIT ? 2u : 1u) * TILE;
  static constexpr u32 PIPE = STAGES * STAGE;
  static constexpr u32 LDC = MM_ROWS + 1u;
  static constexpr u32 EPI = TP * LDC * 4u;
  static constexpr u32 SMEM = PIPE > EPI ? PIPE : EPI;
  static constexpr u32 CH = TP * (MM_ROWB / 16u) / MM_THREADS;  // 16-byte chunks per thread and array
  static_assert(TP == 16u || TP == 32u || TP == 64u, "pair tiles");
  static_assert((FM == 1u || FM == 2u) && WTP % 8u == 0u, "warp tiles");
  static_assert(CH >= 1u && CH * MM_THREADS == TP * (MM_ROWB / 16u), "chunks divide evenly");
  static_assert(MM_THREADS % (MM_ROWB / 16u) == 0u, "a thread's chunks share their column");
  static_assert(MNF % G == 0u, "whole groups");
  static_assert(STAGES >= 3u, "the step s + STAGES - 1 copies go to the slot step s - 1 used");
  static_assert(SMEM <= 227u * 1024u, "sm_90's per-block limit");
};

// The 16-byte chunk c (0..15) of pair row r sits at chunk mm_swz(r, c) of the row: lane (g, t)
// reads chunk 4t + w of row 8j + g, and a quarter warp (g in {2q, 2q + 1}, t in 0..3) then hits
// chunks whose low three bits (t & 1, ((w ^ t & 2 ^ g) & 3)) are all distinct: no bank conflict.
MX_DEVICE u32 mm_swz(u32 r, u32 c) { return c ^ ((c >> 2) & 2u) ^ (r & 1u); }

// mx_to_bf16 (fp32 -> bf16 hi and the bf16 of the remainder lo), each group of 8 written in the
// order the mma GEMM's B fragments take (p8_pos); one block per row of k values (k a multiple
// of 8: rows of 32-blocks). With lo, the row's flag lo_rows[row] (the u32s right after the rows
// x k lo values: lo + rows * k) is 1 if some lo of the row is not +0, else 0: a row of
// bf16-representable values (lo all +0) lets the mma GEMM skip the lo MMAs of a tile whose rows
// all say 0 (gemm_mma_split).
MX_KERNEL(256) void mx_to_bf16_p8(const float* x, u16* hi, u16* lo, u32 rows, u32 k) {
  MX_SHARED u32 any;
  u32 row = bid_x(), tid = tid_x();
  if (row >= rows) return;
  if (tid == 0u) any = 0u;
  sync_threads();
  u32 nz = 0u;
  for (u32 c = tid; c < k; c += 256u) {
    u64 i = (u64)row * k + c;
    u64 o = p8_pos(i);  // gemv_epilogue.h
    float v = x[i];
    u32 hb = bf16_bits_rne(v);
    hi[o] = (u16)hb;
    if (lo) {
      float hf = u2f(hb << 16);
      u32 lb = bf16_bits_rne((hb & 0x7F80u) == 0x7F80u ? 0.0f : v - hf);
      lo[o] = (u16)lb;
      nz |= lb;
    }
  }
  if (nz) any = 1u;  // (every writer stores 1)
  sync_threads();
  if (lo && tid == 0u) ((u32*)(lo + (u64)rows * k))[row] = any;
}

// A layer's MXFP4 code words rearranged in place into the nv4 layout (hip/nv4.h), once at
// upload, for the matrix-core GEMV and GEMM.
MX_KERNEL(256) void mx_nv4_repack(u32* w, u64 n) {
  u64 i = (u64)bid_x() * 256u + tid_x();
  if (i < n) w[i] = nv4_word(w[i]);
}

// The same words, and the scale bytes, copied from the stored order (experts x nrows x kblocks
// 32-blocks) into the nv4 rows order (hip/nv4.h Nv4Rows; MXMOE_HIP_NV4_ROWS), once at upload:
// one thread per destination block, zero codes and scale 127 (+0) in the padding (rows past
// nrows, blocks past kblocks).
MX_KERNEL(256) void mx_nv4_rows(const u32* w, const u8* s, u32* wd, u8* sd, u32 experts, u32 nrows,
                                u32 kblocks) {
  Nv4Rows l = nv4_rows(1u, nrows, kblocks);
  u64 i = (u64)bid_x() * 256u + tid_x();
  if (i >= (u64)experts * l.es) return;
  u64 e = i / l.es;
  u32 rem = (u32)(i - e * l.es);
  u32 grp = rem / l.rg, q = rem % l.rg;  // q = step x 64 + row x 4 + t
  u32 row = 16u * grp + (q % 64u) / 4u, b = 4u * (q / 64u) + q % 4u;
  mx_u32x4 v = {0u, 0u, 0u, 0u};
  u32 sc = 127u;
  if (row < nrows && b < kblocks) {
    u64 src = ((u64)e * nrows + row) * kblocks + b;
    v.x = nv4_word(w[4u * src]);
    v.y = nv4_word(w[4u * src + 1u]);
    v.z = nv4_word(w[4u * src + 2u]);
    v.w = nv4_word(w[4u * src + 3u]);
    sc = s[src];
  }
  wd[4u * i] = v.x;
  wd[4u * i + 1u] = v.y;
  wd[4u * i + 2u] = v.z;
  wd[4u * i + 3u] = v.w;
  sd[i] = (u8)sc;
}

// The CPU emulation (hip/test/nv_emu.h) gives its own twins of the PTX functions below.
#if !defined(MX_HOST_EMU)
// d = a * b + c on bf16 pairs (PTX ISA: fma.rn.bf16x2, sm_80+).
MX_DEVICE u32 fma_bf16x2(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// c += a * b, m16n8k16 bf16 -> f32 (not volatile: the compiler may interleave independent MMAs).
MX_DEVICE void mma_ab(FragC& c, const u32* a, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes from shared memory in one instruction (LLVM split some into two 8-byte loads).
MX_DEVICE uint4v lds128(const void* p) {
  uint4v v;
  asm("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(smem_addr(p)));
  return v;
}

// The bf16 bits of FP4 codes J (low half) and J + 4 (high half) of the nv4 word v (hip/nv4.h
// nv4_pair, restated in PTX), times 2^-126: for J < 3 the word shifted left by 3J under one
// mask, for J = 3 three shifts and masks.
// (volatile: so that LLVM does not hoist the 32 raw pairs of a step above the branch between
// the one- and two-multiply decodes, which holds them all in registers at once and spills.)
template <u32 J>
MX_DEVICE u32 fp4_bf16_pair_raw(u32 v) {
  u32 r;
  if (J < 3u) {
    asm volatile("{\n .reg .b32 x;\n shl.b32 x, %1, %2;\n and.b32 %0, x, 0x81C081C0;\n}"
                 : "=r"(r)
                 : "r"(v), "n"(3u * J));
  } else {
    asm volatile(
        "{\n .reg .b32 x, y;\n shr.b32 x, %1, 6;\n and.b32 x, x, 0x01800180;\n"
        " shr.b32 y, %1, 5;\n and.b32 y, y, 0x00400040;\n or.b32 x, x, y;\n"
        " shl.b32 y, %1, 5;\n and.b32 y, y, 0x80008000;\n or.b32 %0, x, y;\n}"
        : "=r"(r)
        : "r"(v));
  }
  return r;
}
#endif  // !MX_HOST_EMU
#define MM_BF16X2_2P126 0x7E807E80u  // 2^126, twice
#define MM_BF16X2_NEG0 0x80008000u   // -0, twice (a * b + -0 = a * b, signs of zeros included)
// The E8M0 byte as a bf16 (exact: 2^-127 is a bf16 subnormal; 255 = NaN), twice.
MX_DEVICE u32 e8m0_bf16x2(u32 s) {
  u32 b = s == 0u ? 0x0040u : (s == 255u ? 0x7FC0u : s << 7);
  return b | (b << 16);
}
#if !defined(MX_HOST_EMU)
// Whether b holds on any lane of the warp (vote.sync.any; every lane gets the same answer).
MX_DEVICE bool mm_warp_any(bool b) {
  u32 r;
  asm("{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n vote.sync.any.pred q, p, 0xffffffff;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"((u32)b));
  return r != 0u;
}

// Whether b holds on any thread of the block (bar.red.or: also a barrier for the whole block).
MX_DEVICE bool mm_block_any(bool b) {
  u32 r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, 0, p;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"((u32)b)
      : "memory");
  return r != 0u;
}

#endif  // !MX_HOST_EMU

// Compile-time values for the generic lambdas below (no <type_traits> here).
template <bool B>
struct MmB {
  static constexpr bool value = B;
};
template <u32 J>
struct MmU {
  static constexpr u32 value = J;
};

// A lane's weights of one step: rows g and g + 8 of each of its FM fragments (w[2 m + i]), block
// 4s + t: 4 code words and the scale byte each.
template <u32 FM>
struct MmW {
  u32 w[2u * FM][4];
  u32 s[2u * FM];
};

// Step st's weights of a lane (lane t of its quad): block 4 st + t of each of its 2 FM weight
// rows wb[i] (nv4_row_off within the expert whose codes and scales start at wcodes, wscales;
// ~0: past the matrix), zero codes and scale 127 past the matrix or K (+0); bq: the layout's
// step stride (hip/nv4.h Nv4Rows). gemm_mma_body and hip/gemm_wgmma.h's gemm_wg_body.
template <u32 FM>
MX_DEVICE void mm_fetch(MmW<FM>& r, const u32* wb, u32 st, u32 t, u32 kblocks, u32 bq, const u32* wcodes,
                        const u8* wscales) {
  u32 b = 4u * st + t;
#pragma unroll
  for (u32 i = 0; i < 2u * FM; ++i) {
    bool ok = wb[i] != ~0u && b < kblocks;
    mx_u32x4 v = {0u, 0u, 0u, 0u};
    u32 s = 127u;
    if (ok) {
      u32 blk = wb[i] + st * bq + t;  // (an expert's blocks fit 32 bits)
      v = load_stream16(wcodes + (u64)blk * 4u);
      s = load_stream_u8(wscales + blk);
    }
    r.w[i][0] = v.x;
    r.w[i][1] = v.y;
    r.w[i][2] = v.z;
    r.w[i][3] = v.w;
    r.s[i] = s;
  }
}

// A tile's prologue, shared by gemm_mma_body and hip/gemm_wgmma.h's gemm_wg_body (NT threads):
// xoff[r] = where tile row r's K activations start (the token's row for gemm1, the pair's for
// gemm2; ~0 past the tile's cnt rows), and the epilogue's row maxima (TP x NB) zeroed.
template <u32 TP, u32 NB, u32 NT>
MX_DEVICE void mm_tile_rows(const MoeParams& p, bool is1, const u32* pair_of_row, u32 start, u32 cnt,
                            u32 K, u64* xoff, u32* rowmax) {
  for (u32 r = tid_x(); r < TP; r += NT) {
    u64 o = ~0ull;
    if (r < cnt) o = is1 ? (u64)(pair_of_row[start + r] / p.top_k) * K : (u64)(start + r) * K;
    xoff[r] = o;
  }
  for (u32 r = tid_x(); r < TP * NB; r += NT) rowmax[r] = 0u;
}
// Block tile row tr's offset in its expert's weight blocks (hip/nv4.h nv4_row_off; ~0: past
// the matrix; u32 to save registers); ic: the block's intermediate columns (gemm1).
MX_DEVICE u32 mm_weight_row(const MoeParams& p, bool is1, const Nv4Rows& lay, u32 tr, u32 jb, u32 ic,
                            u32 nrows) {
  u32 row = weight_row(p, is1, tr, jb, ic);
  bool ok = is1 ? weight_row_ok(p, tr, jb, ic) : row < nrows;
  return ok ? nv4_row_off(lay, row) : ~0u;
}

// The multipliers of scale byte s for mm_dec: one fma by 2^(s - 1) (m1; exact: raw x 2^(s - 1) =
// code x 2^(s - 127)), or with TWO (some scale byte > 128, where 2^(s - 1) is no bf16) by 2^126
// and then by the scale as a bf16 (m2).
template <bool TWO>
MX_DEVICE void mm_mults(u32 s, u32& m1, u32& m2) {
  m1 = TWO ? MM_BF16X2_2P126 : ((s + 126u) << 7) * 0x10001u;
  m2 = e8m0_bf16x2(s);
}
// Codes J and J + 4 of the nv4 word v times their block's scale, as bf16x2 (exact).
template <bool TWO, u32 J>
MX_DEVICE u32 mm_dec(u32 v, u32 m1, u32 m2) {
  u32 r = fma_bf16x2(fp4_bf16_pair_raw<J>(v), m1, MM_BF16X2_NEG0);
  return TWO ? fma_bf16x2(r, m2, MM_BF16X2_NEG0) : r;
}

template <u32 TP, bool SPLIT, u32 FM, u32 V>
MX_DEVICE void gemm_mma_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                             const u16* xh, const u16* xl, const u32* wcodes, const u8* wscales,
                             u32* out, const float* bias, const float* topw) {
  // V: 0 = session 5's loop (guards on every pair group), 1 = unguarded loop for whole warps'
  // columns (below) and, in gemm_mma_split, the lo skip. (V = 2, three weight steps in flight
  // for 16-pair tiles, MmShape WDX = 3, measured no faster on the H200: gpt-oss-120b 64 / 256
  // tokens 0.443 / 0.974 vs 0.444 / 0.977 ms, DeepSeek-R1 64 / 512 1.030 / 3.816 vs 1.034 /
  // 3.861; no kernel is built with it.)
  typedef MmShape<TP, SPLIT, FM, (V >= 2u && TP < 64u) ? 3u : 0u> S;
  typedef MmW<FM> W;
  // A launch with less dynamic shared memory than the layout would write past it: stop.
  if (dynamic_smem_bytes() < S::SMEM) __builtin_trap();
  MX_SHARED u64 xoff[TP];
  MX_SHARED u32 rowmax[TP * (MM_ROWS / 64u)];
  unsigned char* ring = mm_dsmem;
  float* sC = (float*)mm_dsmem;
  u32 tid = tid_x(), lane = tid % 32u, warp = tid / 32u, g = lane >> 2, t = lane & 3u;
  // This warp: weight rows 16 FM rg .. + 16 FM, pair columns pc0 .. pc0 + WTP.
  const u32 rg = warp / S::WN, pc0 = (warp % S::WN) * S::WTP;
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_y(), &e, &start, &cnt)) return;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u, steps = (kblocks + 3u) / 4u;
  u32 nrows = is1 ? 2u * inter : h;
  u32 jb = is1 ? bid_x() * (MM_ROWS / 2u) : bid_x() * MM_ROWS;
  mm_tile_rows<TP, MM_ROWS / 64u, MM_THREADS>(p, is1, pair_of_row, start, cnt, K, xoff, rowmax);
  // This lane's weight rows (tile rows 16 (FM rg + m) + g, + 8) in the expert's blocks.
  const Nv4Rows lay = nv4_rows(p.wrows, nrows, kblocks);
  const u32* wce = wcodes + e * lay.es * 4u;
  const u8* wse = wscales + e * lay.es;
  u32 wb[2u * FM];
#pragma unroll
  for (u32 i = 0; i < 2u * FM; ++i)
    wb[i] = mm_weight_row(p, is1, lay, 16u * (FM * rg + i / 2u) + g + 8u * (i % 2u), jb, MM_ROWS / 2u, nrows);
  sync_threads();
  // Activation chunks of this thread: rows tid / 16 + 16 c, chunk tid % 16 (8 bf16); the rows'
  // offsets are read from shared memory at each issue (registers are the scarce resource).
  const u32 ach = tid % 16u, ar0 = tid / 16u;
  // Step st's activation copies into ring slot st % STAGES (the caller commits). K is a multiple
  // of 32: a chunk lies wholly inside or wholly past it (zeros past it, as past the tile's pairs).
  auto issue = [&](u32 st) __attribute__((always_inline)) {
    unsigned char* dst = ring + (st % S::STAGES) * S::STAGE;
    u64 k0 = (u64)st * MM_BK + ach * 8u;
    bool kin = k0 < K;
#pragma unroll
    for (u32 c = 0; c < S::CH; ++c) {
      u32 r = ar0 + 16u * c;
      unsigned char* d = dst + r * MM_ROWB + mm_swz(r, ach) * 16u;
      u64 xo = xoff[r];
      bool v = kin && xo != ~0ull;
      copy16_async(d, xh + (v ? xo + k0 : 0ull), v);
      if (SPLIT) copy16_async(d + S::TILE, xl + (v ? xo + k0 : 0ull), v);
    }
  };
  // Step st's weights of this lane (zero codes and scale 127 past the matrix or K: +0).
  auto fetch = [&](u32 st, W& r)
                   __attribute__((always_inline)) { mm_fetch<FM>(r, wb, st, t, kblocks, lay.bq, wce, wse); };

  FragC acc[FM][S::MNF];
#pragma unroll
  for (u32 m = 0; m < FM; ++m)
#pragma unroll
    for (u32 j = 0; j < S::MNF; ++j)
#pragma unroll
      for (u32 c = 0; c < FRAG_C; ++c) acc[m][j].v[c] = 0.0f;
  // This lane's B offsets (bytes in a stage) for word w of fragment j: row pc0 + 8j + g (pc0 and
  // 8j even: the swizzle sees g's parity), chunk 4t + w.
  // mm_swz(g, 4t + w) = 4t + (w ^ x), x = (t & 2) ^ (g & 1) (w < 4: (4t + w) >> 2 = t), so
  // the offset of word w is that of word 0 with w XORed into bits 4..5 (one register, not four).
  const u32 boff0 = (pc0 + g) * MM_ROWB + mm_swz(g, 4u * t) * 16u;
  // Prologue: steps 0 .. STAGES - 2 in flight (one group each, empty past the end).
#pragma unroll
  for (u32 st = 0; st + 1u < S::STAGES; ++st) {
    if (st < steps) issue(st);
    copy_commit();
  }
  // One K step on weights wr (this lane's, loaded WD steps ahead). TWO: the two-multiply
  // decode (some scale byte of the warp's step > 128, where 2^(s - 1) is no bf16); else one
  // fma by 2^(s - 1) (exact: raw x 2^(s - 1) = code x 2^(s - 127)), the same bits.
  auto step = [&](u32 s, const W& wr, auto two, auto full) __attribute__((always_inline)) {
    constexpr bool TWO = decltype(two)::value;
    constexpr bool FULL = decltype(full)::value && !TWO;
    // Step s's group is complete once at most STAGES - 2 newer ones are pending; the barrier
    // publishes every thread's copies and frees slot (s - 1) % STAGES (step s - 1's reads).
    copy_wait_group<(int)S::STAGES - 2>();
    sync_threads();
    {
      u32 tn = s + S::STAGES - 1u;
      if (tn < steps) issue(tn);
      copy_commit();
    }
    const unsigned char* bs = ring + (s % S::STAGES) * S::STAGE;
    u32 m1[2u * FM], m2[2u * FM];
#pragma unroll
    for (u32 i = 0; i < 2u * FM; ++i) mm_mults<TWO>(wr.s[i], m1[i], m2[i]);
    auto dec = [&](u32 v, u32 i, auto jc) __attribute__((always_inline)) -> u32 {
      return mm_dec<TWO, decltype(jc)::value>(v, m1[i], m2[i]);
    };
#pragma unroll
    for (u32 w = 0; w < 4u; ++w) {
      // A registers of fragment m: {row g, row g + 8} x {pair 0, pair 1} (MMA 0), pairs 2, 3
      // (MMA 1).
      u32 a0[FM][4], a1[FM][4];
#pragma unroll
      for (u32 m = 0; m < FM; ++m) {
        u32 i0 = 2u * m, i1 = 2u * m + 1u;
        a0[m][0] = dec(wr.w[i0][w], i0, MmU<0>());
        a0[m][1] = dec(wr.w[i1][w], i1, MmU<0>());
        a0[m][2] = dec(wr.w[i0][w], i0, MmU<1>());
        a0[m][3] = dec(wr.w[i1][w], i1, MmU<1>());
        a1[m][0] = dec(wr.w[i0][w], i0, MmU<2>());
        a1[m][1] = dec(wr.w[i1][w], i1, MmU<2>());
        a1[m][2] = dec(wr.w[i0][w], i0, MmU<3>());
        a1[m][3] = dec(wr.w[i1][w], i1, MmU<3>());
      }
#pragma unroll
      for (u32 q = 0; q < S::MNF / S::G; ++q) {
        // (FULL: every group holds pairs, no branch: ptxas interleaves the groups' loads and
        // MMAs; the same MMAs in the same order per accumulator as the guarded loop.)
        if (FULL || pc0 + q * S::G * 8u < cnt) {  // the same for the whole warp
          uint4v bh[S::G], bl[S::G];
#pragma unroll
          for (u32 jj = 0; jj < S::G; ++jj) {
            const unsigned char* b = bs + (q * S::G + jj) * 8u * MM_ROWB + (boff0 ^ (16u * w));
            bh[jj] = lds128(b);
            if (SPLIT) bl[jj] = lds128(b + S::TILE);
          }
#pragma unroll
          for (u32 jj = 0; jj < S::G; ++jj)
#pragma unroll
            for (u32 m = 0; m < FM; ++m) mma_ab(acc[m][q * S::G + jj], a0[m], bh[jj].x, bh[jj].y);
          if (SPLIT)
#pragma unroll
            for (u32 jj = 0; jj < S::G; ++jj)
#pragma unroll
              for (u32 m = 0; m < FM; ++m) mma_ab(acc[m][q * S::G + jj], a0[m], bl[jj].x, bl[jj].y);
#pragma unroll
          for (u32 jj = 0; jj < S::G; ++jj)
#pragma unroll
            for (u32 m = 0; m < FM; ++m) mma_ab(acc[m][q * S::G + jj], a1[m], bh[jj].z, bh[jj].w);
          if (SPLIT)
#pragma unroll
            for (u32 jj = 0; jj < S::G; ++jj)
#pragma unroll
              for (u32 m = 0; m < FM; ++m) mma_ab(acc[m][q * S::G + jj], a1[m], bl[jj].z, bl[jj].w);
        }
      }
    }
  };
  // Weights WD steps ahead in a ring of R = WD + 1 register sets (the loop unrolled by R, so
  // the ring is registers: no copies, and a load has WD whole steps to land).
  constexpr u32 R = S::WD + 1u;
  W wr[R];
#pragma unroll
  for (u32 d = 0; d < S::WD; ++d)
    if (d < steps) fetch(d, wr[d]);
  auto loop = [&](auto full) __attribute__((always_inline)) {
    for (u32 s0 = 0; s0 < steps; s0 += R) {
#pragma unroll
      for (u32 d = 0; d < R; ++d) {
        u32 s = s0 + d;
        if (s < steps) {
          if (s + S::WD < steps) fetch(s + S::WD, wr[(d + S::WD) % R]);
          bool big = false;
#pragma unroll
          for (u32 i = 0; i < 2u * FM; ++i) big = big || wr[d].s[i] > 128u;
          // (FM = 2: the two-multiply decode only; both paths' registers do not fit there.)
          if (FM == 2u || mm_warp_any(big))
            step(s, wr[d], MmB<true>(), full);
          else
            step(s, wr[d], MmB<false>(), full);
        }
      }
    }
  };
  // UNGUARDED: a warp whose pair groups all hold pairs of the tile (the whole tile, for FM = 1) runs
  // the loop without the per-group guards: one straight run of shared loads and MMAs per word
  // that ptxas can interleave (the guards made each group a basic block of its own: its loads
  // waited, then its MMAs ran in two dependent chains of four). V = 0: the guarded loop only.
  // (The two-multiply decode keeps the guards: the rare path, one copy less of the code.)
  // (Not for split 32 / 64-pair tiles: with both arrays' B registers in flight ptxas spills
  // there (up to 392 bytes of spill loads at 128 registers), and the H200 measured the split
  // 64-pair kernel 25 % slower with it, docs/h200-2026-12-01s6-gemm.)
  constexpr bool UNGUARDED = V >= 1u && (!SPLIT || TP <= 16u);
  if (UNGUARDED && pc0 + S::WTP - S::G * 8u < cnt)
    loop(MmB<true>());
  else
    loop(MmB<false>());
  copy_wait_all();  // (only empty groups remain)
  sync_threads();   // every warp is done with the ring: the epilogue tile overwrites it
  // C: rows = weight rows (tile column of v1's sC), columns = pairs (sC rows).
#pragma unroll
  for (u32 m = 0; m < FM; ++m)
#pragma unroll
    for (u32 j = 0; j < S::MNF; ++j)
#pragma unroll
      for (u32 c = 0; c < FRAG_C; ++c)
        sC[(pc0 + 8u * j + 2u * t + (c & 1u)) * S::LDC + 16u * (FM * rg + m) + g + (c >= 2u ? 8u : 0u)] =
            acc[m][j].v[c];
  sync_threads();
  // gemm1's output goes to gemm2 as bf16 in mx_to_bf16_p8's order (hi, lo, row flags).
  gemm_epilogue<TP, MM_ROWS, MM_THREADS, true>(p, is1, e, start, cnt, jb, sC, rowmax, pair_of_row, out, bias, topw);
}

// A split kernel (weight-only schemes: activations as bf16 hi + lo). V >= 1: a tile whose
// activation rows are all bf16-representable (every lo +0: mx_to_bf16_p8's row flags) runs the
// hi-only body. Bit-exact: the skipped MMAs add products w x (+0) = +-0 to an accumulator that
// starts at +0 and is never -0 (x + (-x) rounds to +0), so they change no bit; except where a
// weight is Inf or NaN, where w x 0 = NaN: the hi-only sum then keeps the Inf that the f32
// reference (w x x, x exact) has, where the hi + lo sum gave NaN.
template <u32 TP, u32 FM, u32 V>
MX_DEVICE void gemm_mma_split(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                              const u16* xh, const u16* xl, const u32* wcodes, const u8* wscales,
                              u32* out, const float* bias, const float* topw) {
  if (V >= 1u) {
    u32 e, start, cnt;
    if (!load_tile(tiles, bid_y(), &e, &start, &cnt)) return;
    u32 K = is1 ? p.hidden : p.inter, rows = is1 ? p.m : p.m * p.top_k;
    const u32* lo_rows = (const u32*)(xl + (u64)rows * K);
    bool nz = false;
    for (u32 r = tid_x(); r < cnt; r += MM_THREADS)
      nz = nz || lo_rows[is1 ? pair_of_row[start + r] / p.top_k : start + r] != 0u;
    if (!mm_block_any(nz)) {
      gemm_mma_body<TP, false, FM, V>(p, is1, pair_of_row, tiles, xh, xl, wcodes, wscales, out, bias, topw);
      return;
    }
  }
  gemm_mma_body<TP, true, FM, V>(p, is1, pair_of_row, tiles, xh, xl, wcodes, wscales, out, bias, topw);
}

// moe_gemm{1,2}_mma_t<TP>[_split][<VS>]_cb4 and per (TP, split, VS) the dynamic shared memory
// its launch must give, as a PTX global the host reads (src/backend/hip/kernels.rs dyn_smem).
// OCC blocks per multiprocessor (launch bounds: 2 -> <= 128 registers). VS: the variant suffix
// (MXMOE_HIP_MMA_VARIANT, src/backend/hip/choice/gemm.rs): none = V 1, _v0 = session 5's kernel.
#define GEMM_MMA_VARIANT(TP, FM, SPLIT, SFX, V, OCC, VS)                                          \
  extern "C" __attribute__((device, used)) const u32 moe_gemm_mma_t##TP##SFX##VS##_cb4_smem =     \
      MmShape<TP, SPLIT, FM>::SMEM;                                                               \
  MX_KERNEL_OCC(MM_THREADS, OCC) void moe_gemm1_mma_t##TP##SFX##VS##_cb4(GEMM_BF16_ARGS) {         \
    if (SPLIT)                                                                                    \
      gemm_mma_split<TP, FM, V>(p, true, GEMM_BF16_PASS);                                         \
    else                                                                                          \
      gemm_mma_body<TP, false, FM, V>(p, true, GEMM_BF16_PASS);                                   \
  }                                                                                               \
  MX_KERNEL_OCC(MM_THREADS, OCC) void moe_gemm2_mma_t##TP##SFX##VS##_cb4(GEMM_BF16_ARGS) {         \
    if (SPLIT)                                                                                    \
      gemm_mma_split<TP, FM, V>(p, false, GEMM_BF16_PASS);                                        \
    else                                                                                          \
      gemm_mma_body<TP, false, FM, V>(p, false, GEMM_BF16_PASS);                                  \
  }
#define GEMM_MMA_TILES(V, OCC, VS)                 \
  GEMM_MMA_VARIANT(64, 1, false, , V, OCC, VS)     \
  GEMM_MMA_VARIANT(64, 1, true, _split, V, OCC, VS) \
  GEMM_MMA_VARIANT(32, 1, false, , V, OCC, VS)     \
  GEMM_MMA_VARIANT(32, 1, true, _split, V, OCC, VS) \
  GEMM_MMA_VARIANT(16, 1, false, , V, OCC, VS)     \
  GEMM_MMA_VARIANT(16, 1, true, _split, V, OCC, VS)
GEMM_MMA_TILES(1, 2, )
GEMM_MMA_TILES(0, 2, _v0)
// (FM = 2, 32 weight rows per warp, was measured slower on the H200 at 64-pair tiles: gpt-oss-120b
// 2048 tokens 4.81 vs 4.12 ms, docs/h200-2026-12-01s5-hipgemm3; no kernel is built with it.)
#endif
