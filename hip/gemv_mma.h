// gemv_mma.h: the decode GEMV on NVIDIA matrix cores ("swap AB"), `moe_gemv{1,2}_mma[_split]_cb4`
// (MXMOE_HIP_GEMV=mma; src/backend/hip/choice/gemv.rs). Included from hip/mxmoe.cu after gemv.h
// (the v1 .. v3 GEMVs), whose fused combine (gemv2_combine) and GEMV_ARGS it reuses, with the
// tile list and row mapping of moe_tile.h (load_tile, weight_row) and gemv_epilogue.h's epilogues.
// NVIDIA only (mma.sync, bf16x2 fma, cvt.bf16x2); AMD keeps the v3 / v1 GEMVs. MXFP4 weights only
// (the other formats run the v1 GEMV).
//
// The weights are the A operand of mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 (A's rows = weight
// rows, k contiguous: the stored layout); the N = 8 columns are the tile's token-expert pairs (up
// to 8 of one expert), so one decode of a weight fragment serves all of them; at one token 7
// columns are zero. Fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
// point type" (hip/mx_fragment.h): with g = lane / 4, t = lane % 4, A register r0 = (row g, k 2t,
// 2t+1), r1 = (row g+8, k 2t, 2t+1), r2 = (row g, k 2t+8, 2t+9), r3 = (row g+8, k 2t+8, 2t+9); B
// r0 = (k 2t, 2t+1; column g), r1 = (k 2t+8, 2t+9; column g); C c0, c1 = (row g, columns 2t,
// 2t+1), c2, c3 = (row g+8, same columns). The low half of a bf16x2 register is the lower k.
//
// K is permuted (a dot product over k does not care in which order, if A and B agree): a warp
// step covers 4 consecutive 32-blocks b0 .. b0+3, lane (g, t) owns the whole 32-block b0 + t of
// rows g and g + 8 of each 16-row tile (one 16-byte load per row, straight from global memory,
// no shared memory, no barrier), and word q (codes 8q .. 8q+7) of that block feeds two MMAs
// (hh = 0, 1): fragment k {2t, 2t+1, 2t+8, 2t+9} <- codes {8q+2hh, 8q+2hh+4, 8q+2hh+1,
// 8q+2hh+5} of block b0 + t. The B lane (g, t) holds the same k of pair g: x[32 (b0+t) + the
// same codes' positions]. scripts/gemv_mma_layout.py checks this permutation against a plain
// matrix product.
//
// Decode, exact (NUMERICS.md 10.3; as w_store in gemm_body): the FP4 codes i and i + 4 of a word
// shifted left by 12 - 4i sit at bits 12..15 and 28..31; sign to bf16 bits 15 / 31, the three
// magnitude bits to bits 6..8 / 22..24 (exponent LSBs and mantissa MSB) give the E2M1 value times
// 2^-126 (code 1 = 0.5 is the bf16 subnormal 2^-127). One bf16x2 fma (PTX: bf16 arithmetic keeps
// subnormals; fma.rn with c = -0 is an exact product) by 2^(s - 1) (s = the block's E8M0 byte)
// gives code value x 2^(s - 127), exact for s <= 128 (at most 12, at least 2^-128, a bf16
// subnormal). A warp step with a byte > 128 anywhere (vote) takes the slow path: x 2^126, then
// x 2^(s - 127) (or NaN for 255): exact or overflowing to inf, as w_store.
//
// Activations: f32 in global memory; lane (g, t) loads its 32 values of pair g (8 float4) and
// converts them to bf16x2 (cvt.rn, RNE). SPLIT (weight-only schemes, f32 activations): also the
// remainder lo = bf16(x - hi) (0 where hi is not finite, as mx_to_bf16) and a second MMA; MX
// activations (QDQ'd, bf16-exact) need hi only.
//
// A block = GM_WARPS warps on the same GM_ROWS = 64 weight rows (stage 1: the gate and up rows of
// 32 intermediate columns, as the v1 GEMV), K split across the warps (warp w takes the 4-block
// steps w, w + GM_WARPS, ...); the warps' f32 C tiles are summed in shared memory in warp order
// (deterministic), then the v3 epilogues (gemv1: bias, router weight on input, activation,
// intermediate QDQ; gemv2: bias, router weight, and with `counters` the fused combine).
// Grid: x = tile slot (tiles of <= 8 pairs: p.tile_m = 8), y = column block (gemv1: 32
// intermediate columns; gemv2: 64 output rows). Two blocks per SM, <= 128 registers, one step of
// weight loads in flight per warp (a variant with two steps in flight and one block per SM was
// slower on the H200 at every measured size and was removed: docs/h200-2026-12-01s5-gemvmma; so
// was `mma2`, the block's weights prefetched into the L2 and K split across blocks with a
// fixed-order sum of their partial tiles: slower at every size, commit cb464fa,
// docs/h200-2026-12-01s6-gemv). `mmaw` (MXMOE_HIP_GEMV=mmaw; not measured yet): the same block
// of 64 rows with R = 2 16-row tiles per warp instead of GM_R = 4, the rows in two groups of 32,
// each group's K steps over 4 warps: 80 registers, three blocks (24 warps) per SM. A variant of
// mmab that streamed each warp's weight words and scale bytes through a two-step cp.async ring in
// shared memory (the next step's loads in flight at the same occupancy) measured no faster on
// the H200 (one gpt-oss token gemv1 0.028 vs 0.027 ms, DeepSeek-R1 0.068 vs 0.063) and was
// removed (session 8, docs/h200-2026-12-01s8-gemv): with 4-6 warps per scheduler issuing every
// ~9 cycles, the loop is bound by issue and dependencies, not by the loads' latency.
// hip/test/gemv_mma_emu.cpp runs the kernels on the CPU (GM_HOST_EMU) against a plain product.
#pragma once
#if defined(MX_NV)
#include "nv4.h"

#define GM_WARPS 8u
#define GM_THREADS (32u * GM_WARPS)
#define GM_R 4u                // 16-row tiles per warp (mmaw: 2)
#define GM_ROWS (16u * GM_R)   // weight rows per block
#define GM_COLS 8u             // token-expert pairs per tile (the MMA's N)

// The three PTX primitives (hip/test/gemv_mma_emu.cpp, GM_HOST_EMU, defines host twins to run
// this file's kernels on the CPU, lane by lane).
#if !defined(GM_HOST_EMU)
// d = a * b + c on bf16x2 (RNE; subnormals kept).
MX_DEVICE u32 bf16x2_fma(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// bf16x2 {lo, hi} (RNE; cvt puts its first source in the upper half).
MX_DEVICE u32 bf16x2_pack(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
MX_DEVICE bool warp_any(bool v) {
  u32 r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n vote.sync.any.pred q, p, 0xffffffff;\n"
      " selp.u32 %0, 1, 0, q;\n}"
      : "=r"(r)
      : "r"((u32)v));
  return r != 0u;
}
#endif
#if !defined(GM_HOST_EMU)
MX_DEVICE uint4v gm_opaque(uint4v v) {
  asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
  return v;
}
MX_DEVICE u32 bf16x2_clamp(u32 v) {
  u32 d;
  asm("max.bf16x2 %0, %1, %2;\n\tmin.bf16x2 %0, %0, %3;" : "=r"(d) : "r"(v), "r"(0xFF7FFF7Fu), "r"(0x7F7F7F7Fu));
  return d;
}
#endif
template <bool B>
struct GmBool {
  static constexpr bool value = B;
};
// Codes i and i + 4 (i < 4) of word w (nv4 layout, hip/nv4.h) as bf16x2 (low half: code i),
// value x 2^-126.
MX_DEVICE u32 fp4_bf16_pair(u32 w, u32 i) { return nv4_pair(w, i); }
// The remainders x - bf16(x) of a bf16x2 pair hb = {x0, x1} (x0 low), as bf16x2 clamped to the
// finite bf16 range: where hi is infinite (x infinite, or rounding up to inf) the remainder is
// NaN or -inf and becomes -+max, so that hi + lo stays that infinity (mx_to_bf16 sets lo = 0
// there; the sums are the same); min / max return the non-NaN operand (PTX ISA).
MX_DEVICE u32 gm_rest2(float x0, float x1, u32 hb) {
  u32 lo = bf16x2_pack(x0 - u2f(hb << 16), x1 - u2f(hb & 0xFFFF0000u));
  return bf16x2_clamp(lo);
}

// One warp step: the GM_R tiles' codes (row g, row g + 8), their scale factors f, the
// activations at xp (32 f32 of pair g, block b0 + t; null: zeros) into acc.
// XB (`mmab`): the activations come as bf16 in mx_to_bf16_p8's order (gemm_mma.h; each group of
// 8 stored 0, 4, 1, 5, 2, 6, 3, 7): bh4 / bl4 (null: zeros) point at the lane's block of hi / lo,
// and the 16 bytes of word q are exactly {hh 0: r0, r1; hh 1: r0, r1} of both MMAs' B.
// MAYBE0: xp / bh4 may be null (the step that ends K: zeros); else they always point at data.
template <bool SPLIT, bool SLOW, u32 R, bool XB = false, bool MAYBE0 = true>
MX_DEVICE void gm_step(FragC* acc, const uint4v (*wi)[2], const u32 (*f)[2], const float4v* xp,
                       const uint4v* bh4 = nullptr, const uint4v* bl4 = nullptr) {
  // Fast path: x f (2^(s - 1)); slow path: x 2^126, then x f (2^(s - 127)).
  const u32 F1 = 0x7E807E80u;
  const u32 NZ = 0x80008000u;  // -0, -0: fma(a, b, -0) = a * b exactly
  // The words pass through an empty volatile asm in each of the two instances (fast and slow
  // path): otherwise the compiler hoists the decode shifts of every word above the branch and
  // keeps them all live (128 registers and spills).
  uint4v w[R][2];
#pragma unroll
  for (u32 r = 0; r < R; ++r)
#pragma unroll
    for (u32 hh = 0; hh < 2u; ++hh) w[r][hh] = gm_opaque(wi[r][hh]);
#pragma unroll
  for (u32 q = 0; q < 4u; ++q) {
    asm volatile("" ::: "memory");
    float4v x0 = {0.0f, 0.0f, 0.0f, 0.0f}, x1 = x0;
    uint4v h4 = {0u, 0u, 0u, 0u}, l4 = h4;
    if (XB) {
      if (!MAYBE0 || bh4) {
        h4 = bh4[q];
        if (SPLIT) l4 = bl4[q];
      }
    } else if (!MAYBE0 || xp) {
      x0 = xp[2u * q];
      x1 = xp[2u * q + 1u];
    }
    // hh = 0: x[8q + {0, 4}], x[8q + {1, 5}]; hh = 1: x[8q + {2, 6}], x[8q + {3, 7}].
#pragma unroll
    for (u32 hh = 0; hh < 2u; ++hh) {
      FragB bh, bl;
      if (XB) {
        bh.r[0] = hh ? h4.z : h4.x;
        bh.r[1] = hh ? h4.w : h4.y;
        bl.r[0] = hh ? l4.z : l4.x;
        bl.r[1] = hh ? l4.w : l4.y;
      } else {
        float l0 = hh ? x0.z : x0.x, h0 = hh ? x1.z : x1.x, l1 = hh ? x0.w : x0.y, h1 = hh ? x1.w : x1.y;
        bh.r[0] = bf16x2_pack(l0, h0);
        bh.r[1] = bf16x2_pack(l1, h1);
        if (SPLIT) {
          bl.r[0] = gm_rest2(l0, h0, bh.r[0]);
          bl.r[1] = gm_rest2(l1, h1, bh.r[1]);
        }
      }
#pragma unroll
      for (u32 r = 0; r < R; ++r) {
        u32 w0 = q == 0u ? w[r][0].x : q == 1u ? w[r][0].y : q == 2u ? w[r][0].z : w[r][0].w;
        u32 w1 = q == 0u ? w[r][1].x : q == 1u ? w[r][1].y : q == 2u ? w[r][1].z : w[r][1].w;
        FragA a;
        a.r[0] = bf16x2_fma(fp4_bf16_pair(w0, 2u * hh), SLOW ? F1 : f[r][0], NZ);
        a.r[1] = bf16x2_fma(fp4_bf16_pair(w1, 2u * hh), SLOW ? F1 : f[r][1], NZ);
        a.r[2] = bf16x2_fma(fp4_bf16_pair(w0, 2u * hh + 1u), SLOW ? F1 : f[r][0], NZ);
        a.r[3] = bf16x2_fma(fp4_bf16_pair(w1, 2u * hh + 1u), SLOW ? F1 : f[r][1], NZ);
        if (SLOW) {
          a.r[0] = bf16x2_fma(a.r[0], f[r][0], NZ);
          a.r[1] = bf16x2_fma(a.r[1], f[r][1], NZ);
          a.r[2] = bf16x2_fma(a.r[2], f[r][0], NZ);
          a.r[3] = bf16x2_fma(a.r[3], f[r][1], NZ);
        }
        mma(acc[r], a, bh);
        if (SPLIT) mma(acc[r], a, bl);
      }
    }
  }
}

// XB: gemv1's value v of element i (row-major pair x intermediate index) stored for gemv2 as
// mx_to_bf16_p8 stores it: bf16 hi at i's place in its group of 8 (0, 4, 1, 5, 2, 6, 3, 7) and,
// where gemv2 takes hi + lo (f32 intermediates of weight-only schemes), the bf16 of v - hi
// (0 where hi is Inf or NaN) lo_off elements further.
MX_DEVICE void gm_store_xb(const MoeParams& p, u16* o, u64 i, u64 lo_off, float v) {
  u64 pos = p8_pos(i);
  u32 hb = bf16x2_pack(v, 0.0f) & 0xFFFFu;
  o[pos] = (u16)hb;
  if (p.act_fmt == FMT_NONE && !p.round_bf16) {
    float r = (hb & 0x7F80u) == 0x7F80u ? 0.0f : v - u2f(hb << 16);
    o[lo_off + pos] = (u16)(bf16x2_pack(r, 0.0f) & 0xFFFFu);
  }
}

// XB: the activations as bf16 (mx_to_bf16_p8's order); XBO: gemv1 writes its output that way
// (gm_store_xb) for gemv2 (both in `mmab`; XBO alone in `mmao`, gemv1 of one to three tokens,
// where converting the hidden states in a kernel of its own costs more than it saves).
// ROWS (gemv2 only): output rows per block, GM_ROWS or 32 (`mmab32`; R = 2: one group of 8
// warps splitting K, twice the blocks, for grids of less than two waves).
template <bool SPLIT, u32 R, bool XB = false, bool XBO = XB, u32 ROWS = GM_ROWS>
MX_DEVICE void gemv_mma_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                             const float* x, const u32* wcodes, const u8* wscales, u32* out,
                             const float* bias, const float* topw, const i32* row_of_pair,
                             u32* counters, u32* final_out) {
  // R 16-row tiles per warp: the block's ROWS rows in RG groups of 16 R rows, each group's
  // K split across KW warps (R = 4: one group of 8 warps; R = 2, mmaw: two groups of 4).
  constexpr u32 RG = ROWS / (16u * R), KW = GM_WARPS / RG;
  static_assert(RG >= 1u && GM_WARPS % RG == 0u, "ROWS: a multiple of 16 R dividing the warps");
  MX_SHARED float red[GM_WARPS][ROWS][GM_COLS + 1u];
  MX_SHARED u32 tmax[GM_COLS];
  u32 tid = tid_x(), lane = tid % 32u, warp = tid / 32u, g = lane >> 2, t = lane & 3u;
  u32 kw = RG == 1u ? warp : warp % KW;           // K warp
  u32 r0 = RG == 1u ? 0u : 16u * R * (warp / KW);  // first row of the warp's group
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_x(), &e, &start, &cnt)) return;
  if (tid < GM_COLS) tmax[tid] = 0u;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u;
  u32 nrows = is1 ? 2u * inter : h;
  u32 jb = is1 ? bid_y() * 32u : bid_y() * ROWS;
  Nv4Rows lay = nv4_rows(p.wrows, nrows, kblocks);  // the codes' row order (hip/nv4.h)
  u64 ebase = e * lay.es;  // the expert's first 32-block
  const uint4v* wc = (const uint4v*)wcodes + ebase;  // one 16-byte word per 32-block
  const u8* ws = wscales + ebase;
  // Rows 16 r + g + 8 hh of the block; a row outside the matrix reads row 0 with factor 0.
  u32 roff[R][2];
  u32 okmask = 0u;
#pragma unroll
  for (u32 r = 0; r < R; ++r)
#pragma unroll
    for (u32 hh = 0; hh < 2u; ++hh) {
      u32 wr = r0 + 16u * r + g + 8u * hh;
      u32 row = weight_row(p, is1, wr, jb);
      bool ok = is1 ? weight_row_ok(p, wr, jb) : row < nrows;
      roff[r][hh] = ok ? nv4_row_off(lay, row) : 0u;
      okmask |= ok ? 1u << (2u * r + hh) : 0u;
    }
  // Column g of B: pair g of the tile (zero past the tile's pairs).
  bool col = g < cnt;
  const float* xr = x;
  u64 xrow = 0u;
  if (col) xrow = is1 ? (u64)(pair_of_row[start + g] / p.top_k) : (u64)(start + g);
  xr = x + xrow * K;
  // XB: x is bf16 (u16) hi of xrows rows, lo right after them.
  const u16* xhr = (const u16*)x + xrow * K;
  u64 xlo = (u64)(is1 ? p.m : p.m * p.top_k) * K;
  FragC acc[R];
#pragma unroll
  for (u32 r = 0; r < R; ++r)
#pragma unroll
    for (u32 c = 0; c < 4u; ++c) acc[r].v[c] = 0.0f;
  // A step's weight words and scale bytes (32-bit indices: rows x blocks of one expert do not
  // wrap, and the compiler does not keep sixteen 64-bit row pointers alive across the loop).
  uint4v w[R][2];
  u32 sb[R][2];
  auto load_step = [&](u32 b, uint4v (&wv)[R][2], u32 (&sv)[R][2]) {
#pragma unroll
    for (u32 r = 0; r < R; ++r)
#pragma unroll
      for (u32 hh = 0; hh < 2u; ++hh) {
        u32 ix = roff[r][hh] + nv4_blk_off(lay, b);
        wv[r][hh] = load_stream16(wc + ix);
        sv[r][hh] = load_stream_u8(ws + ix);
      }
  };
  // One K step from block b0 + t of each lane; TAIL: the step that ends K (lanes past it get
  // factor 0 and zero activations: a zero factor alone would make 0 x inf = NaN), the other
  // steps load without tests. A lane of a column past the tile's pairs reads pair 0's
  // activations (row 0 above): its product column is never stored.
  auto kstep = [&](u32 b0, auto tail) __attribute__((always_inline)) {
    constexpr bool TAIL = decltype(tail)::value;
    u32 bu = b0 + t;
    bool kin = !TAIL || bu < kblocks;
    u32 b = kin ? bu : kblocks - 1u;
    load_step(b, w, sb);
    // This lane's activations (pair g, block b), read per word inside the step (L1 / L2 hits).
    const float4v* xp = kin ? (const float4v*)(xr + (u64)b * 32u) : nullptr;
    const uint4v* bh4 = XB && kin ? (const uint4v*)(xhr + (u64)b * 32u) : nullptr;
    const uint4v* bl4 = XB && kin ? (const uint4v*)(xhr + xlo + (u64)b * 32u) : nullptr;
    // Factors: 2^(s - 1) as bf16x2 (fast path), 0 for rows / blocks outside the matrix.
    u32 f1[R][2], f2[R][2];
    bool big = false;
#pragma unroll
    for (u32 r = 0; r < R; ++r)
#pragma unroll
      for (u32 hh = 0; hh < 2u; ++hh) {
        u32 s = sb[r][hh];
        bool ok = kin && ((okmask >> (2u * r + hh)) & 1u) != 0u;
        f1[r][hh] = ok ? (s + 126u) * 0x00800080u : 0u;
        big = big || (ok && s > 128u);
      }
    if (warp_any(big)) {
      // Every row: x 2^126 (the code values), then x 2^(s - 127) as bf16 (0: the subnormal
      // 2^-127; 255: NaN; 0 outside the matrix).
#pragma unroll
      for (u32 r = 0; r < R; ++r)
#pragma unroll
        for (u32 hh = 0; hh < 2u; ++hh) {
          u32 s = sb[r][hh];
          bool ok = kin && ((okmask >> (2u * r + hh)) & 1u) != 0u;
          f2[r][hh] = !ok ? 0u : s == 255u ? 0x7FC07FC0u : s == 0u ? 0x00400040u : s * 0x00800080u;
        }
      gm_step<SPLIT, true, R, XB, TAIL>(acc, w, f2, xp, bh4, bl4);
    } else {
      gm_step<SPLIT, false, R, XB, TAIL>(acc, w, f1, xp, bh4, bl4);
    }
  };
  u32 b0 = 4u * kw;
  for (; b0 + 3u < kblocks; b0 += 4u * KW) kstep(b0, GmBool<false>{});
  if (b0 < kblocks) kstep(b0, GmBool<true>{});
  // The warps' partial tiles, summed in warp order.
#pragma unroll
  for (u32 r = 0; r < R; ++r) {
    red[kw][r0 + 16u * r + g][2u * t] = acc[r].v[0];
    red[kw][r0 + 16u * r + g][2u * t + 1u] = acc[r].v[1];
    red[kw][r0 + 16u * r + g + 8u][2u * t] = acc[r].v[2];
    red[kw][r0 + 16u * r + g + 8u][2u * t + 1u] = acc[r].v[3];
  }
  sync_threads();
  if (is1 && ROWS == GM_ROWS) {
    // Thread = (pair t1, intermediate column c): v3's epilogue with 8 pairs.
    u32 t1 = tid / 32u, c = tid % 32u, j = jb + c;
    bool tv = t1 < cnt;
    bool silu = p.activation == ACT_SILU;
    u32 gi = silu ? c : 2u * c, ui = silu ? 32u + c : 2u * c + 1u;
    float gv = 0.0f, uv = 0.0f;
#pragma unroll
    for (u32 w = 0; w < KW; ++w) {
      gv += red[w][gi][t1];
      uv += red[w][ui][t1];
    }
    if (XBO) {
      u32 val = gemv1_value(p, e, start, t1, j, tv, gv, uv, pair_of_row, bias, topw, tmax);
      u64 na = (u64)p.m * p.top_k;
      if (tv) gm_store_xb(p, (u16*)out, (u64)(start + t1) * p.inter + j, na * p.inter, u2f(val));
    } else {
      gemv1_finish(p, e, start, t1, j, tv, gv, uv, pair_of_row, bias, topw, tmax, out);
    }
  } else if (!is1) {
    for (u32 i = tid; i < ROWS * GM_COLS; i += GM_THREADS) {
      u32 wr = i % ROWS, t2 = i / ROWS, n = jb + wr;
      if (t2 < cnt && n < h) {
        float v = 0.0f;
#pragma unroll
        for (u32 w = 0; w < KW; ++w) v += red[w][wr][t2];
        if (p.has_bias2) v += bias[(u64)e * h + n];
        if (!p.on_input) v *= topw[pair_of_row[start + t2]];
        out[(u64)(start + t2) * h + n] = f2u(bf16_point(p, v));
      }
    }
    if (counters) gemv2_combine<ROWS>(p, tiles, row_of_pair, out, counters, final_out, jb);
  }
}

// Two blocks (16 warps) per multiprocessor, <= 128 registers.
#define GEMV_MMA_KERNELS(SPLIT, SFX)                                                           \
  MX_KERNEL_OCC(GM_THREADS, 2) void moe_gemv1_mma##SFX##_cb4(GEMV_ARGS) {                      \
    gemv_mma_body<SPLIT, GM_R>(p, true, GEMV_PASS);                                            \
  }                                                                                            \
  MX_KERNEL_OCC(GM_THREADS, 2) void moe_gemv2_mma##SFX##_cb4(GEMV_ARGS) {                      \
    gemv_mma_body<SPLIT, GM_R>(p, false, GEMV_PASS);                                           \
  }
GEMV_MMA_KERNELS(false, )
GEMV_MMA_KERNELS(true, _split)
// mmaw: two 16-row tiles per warp (80 registers), three blocks (24 warps) per multiprocessor.
#define GEMV_MMAW_KERNELS(SPLIT, SFX)                                                          \
  MX_KERNEL_OCC(GM_THREADS, 3) void moe_gemv1_mmaw##SFX##_cb4(GEMV_ARGS) {                     \
    gemv_mma_body<SPLIT, 2u>(p, true, GEMV_PASS);                                              \
  }                                                                                            \
  MX_KERNEL_OCC(GM_THREADS, 3) void moe_gemv2_mmaw##SFX##_cb4(GEMV_ARGS) {                     \
    gemv_mma_body<SPLIT, 2u>(p, false, GEMV_PASS);                                             \
  }
GEMV_MMAW_KERNELS(false, )
GEMV_MMAW_KERNELS(true, _split)
// mmab: mmaw with bf16 activations in mx_to_bf16_p8's order (XB): gemv1 reads the hidden states
// converted by mx_to_bf16_p8 and writes its output that way for gemv2 (hi, then lo).
#define GEMV_MMAB_KERNELS(SPLIT, SFX)                                                          \
  MX_KERNEL_OCC(GM_THREADS, 3) void moe_gemv1_mmab##SFX##_cb4(GEMV_ARGS) {                     \
    gemv_mma_body<SPLIT, 2u, true>(p, true, GEMV_PASS);                                        \
  }                                                                                            \
  MX_KERNEL_OCC(GM_THREADS, 3) void moe_gemv2_mmab##SFX##_cb4(GEMV_ARGS) {                     \
    gemv_mma_body<SPLIT, 2u, true>(p, false, GEMV_PASS);                                       \
  }
GEMV_MMAB_KERNELS(false, )
GEMV_MMAB_KERNELS(true, _split)
// mmao: mmab's gemv1 on f32 activations (converted in the loop, as mmaw), its output for mmab's
// gemv2.
#define GEMV_MMAO_KERNELS(SPLIT, SFX)                                                          \
  MX_KERNEL_OCC(GM_THREADS, 3) void moe_gemv1_mmao##SFX##_cb4(GEMV_ARGS) {                     \
    gemv_mma_body<SPLIT, 2u, false, true>(p, true, GEMV_PASS);                                 \
  }
GEMV_MMAO_KERNELS(false, )
GEMV_MMAO_KERNELS(true, _split)
// mmab32: mmab's gemv2 with 32 output rows per block.
#define GEMV_MMAB32_KERNELS(SPLIT, SFX)                                                        \
  MX_KERNEL_OCC(GM_THREADS, 3) void moe_gemv2_mmab32##SFX##_cb4(GEMV_ARGS) {                   \
    gemv_mma_body<SPLIT, 2u, true, true, 32u>(p, false, GEMV_PASS);                            \
  }
GEMV_MMAB32_KERNELS(false, )
GEMV_MMAB32_KERNELS(true, _split)
// mmab4: mmab's hi-only gemv1 (MX activations) at four blocks per multiprocessor (<= 64
// registers): for grids just over one wave of three (DeepSeek-R1 at one token: 8 x 64 = 512
// blocks, 1.29 waves of 396 on the H200, one of 528).
MX_KERNEL_OCC(GM_THREADS, 4) void moe_gemv1_mmab4_cb4(GEMV_ARGS) {
  gemv_mma_body<false, 2u, true>(p, true, GEMV_PASS);
}

#endif
