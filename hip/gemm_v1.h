// gemm_v1.h: the grouped GEMM for prefill on matrix cores (v1; shaders/moe_gemm.wgsl): mx_to_bf16,
// the exact weight decode (WPart, w_fetch, w_store), gemm_epilogue (shared with the v2, mma and
// gfx950 GEMMs), gemm_body, moe_gemm{1,2}[_split]_cb{4,6,8} and GEMM_BF16_ARGS. Included by
// hip/mxmoe.cu after gemv_mma.h; relies on mx_fragment.h (fragments, mma, cp.async), moe_tile.h
// (load_tile, weight_row, code_of), moe_common.h and gemv_epilogue.h (p8_pos).
#pragma once

// ---- grouped GEMM (prefill) on matrix cores -------------------------------------------------
// A block = 4 warps (NVIDIA, 128 threads) or 4 wavefronts (AMD, 256), arranged WARPS_M x
// WARPS_N = 2 x 2; tile = GT_M = 64 rows (token-expert pairs of one expert) x GT_N = 128 weight
// rows (stage 1: the gate and up rows of 64 intermediate columns), K in steps of one 32-block
// (GT_K). A warp owns WT_M = 32 rows x WT_N = 64 columns (NVIDIA: 2 x 8 m16n8 fragments; AMD:
// 2 x 4 16x16); a warp whose rows all lie past the tile's row count skips its matrix work. (8
// warps of 32 x 32 were measured first: ncu found them bound by shared-memory traffic, L1 81 %
// busy; a 32 x 64 warp tile reads a third less per MMA, docs/h200-2026-12-01-hipgemm.)
//
// Per step, double-buffered in shared memory (one barrier a step):
//   - activations: bf16 rows (mx_to_bf16 wrote them: exact for QDQ'd values; hi + lo for the
//     unquantized ones of weight-only schemes, SPLIT), gathered by token row, copied one step
//     ahead with cp.async (NVIDIA sm_80+; AMD: plain loads), zero-filled past the tile's rows;
//   - weights: each thread owns its W_PARTS-th of one weight row's 32-block (NVIDIA: the whole
//     block, CB words + the scale byte); the packed bytes are fetched W_DEPTH steps ahead into a
//     ring of registers and dequantized exactly into the bf16 tile one step ahead (w_store:
//     MXFP4 by an f32 multiply, no table; other formats through a code table in shared memory).
//   - B fragments come in pairs (ldmatrix.x4); a pair's hi products are issued before its lo
//     ones, so no MMA waits on the one before it.
// Everything past the tile (rows, columns, K) is zero, so the fragments never branch on it.
// Grid: x = the column block (fastest), y = the tile slot, so the blocks running at once are a
// few tiles' column blocks: a tile's activation rows and its expert's weight rows are read from
// HBM about once and then served by L2 (with x = tile, every column pass re-read all of gemm2's
// activations, 94 MB hi + lo for gpt-oss at 2048 tokens, more than L2 holds).

#define GT_M 64u
#define GT_N 128u
#define GT_K 32u
#define LDS (GT_K + 8u)  // bf16 per shared row: 80 bytes, so ldmatrix's 8 rows hit 8 bank quads
#define GEMM_THREADS (4u * WARP)
#define WARPS_M 2u
#define WARPS_N 2u
#define WT_M (GT_M / WARPS_M)
#define WT_N (GT_N / WARPS_N)
#define MF (WT_M / FRAG_M)
#define NF (WT_N / FRAG_N)
#define A_CH (GT_M * GT_K / 8u / GEMM_THREADS)  // 16-byte activation chunks per thread and array
#define W_PARTS (GEMM_THREADS / GT_N)           // threads per weight row's 32-block

MX_DEVICE u32 bf16_bits_rne(float x) { return f2u(bf16_round(x)) >> 16; }

// Element (row, j) (row-major, pairs x inter) of gemm1's output as mx_to_bf16_p8 stores it:
// bf16 hi at its place in its group of 8 (0, 4, 1, 5, 2, 6, 3, 7), or in the c16 order
// (p.xc2: gemm2 is the wgmma GEMM of MXMOE_HIP_MMA_VARIANT=wg256c; gemv_epilogue.h c16_pos),
// and, for weight-only schemes (hi + lo), the bf16 of v - hi (0 where hi is Inf or NaN) pairs x
// inter elements further.
MX_DEVICE void gemm_p8_store(const MoeParams& p, u16* o, u32 row, u32 j, float v) {
  u64 pos = p.xc2 ? (u64)row * p.inter + c16_pos(j, p.inter) : p8_pos((u64)row * p.inter + j);
  u32 hb = bf16_bits_rne(v);
  o[pos] = (u16)hb;
  if (p.act_fmt == FMT_NONE) {
    float hf = u2f(hb << 16);
    o[(u64)p.m * p.top_k * p.inter + pos] = (u16)bf16_bits_rne((hb & 0x7F80u) == 0x7F80u ? 0.0f : v - hf);
  }
}

// fp32 -> bf16 (hi) and, with lo, the bf16 of the remainder x - hi (Inf/NaN: lo = 0).
MX_KERNEL(256) void mx_to_bf16(const float* x, u16* hi, u16* lo, u64 n) {
  u64 i = (u64)bid_x() * 256u + tid_x();
  if (i >= n) return;
  float v = x[i];
  u32 h = bf16_bits_rne(v);
  hi[i] = (u16)h;
  if (lo) {
    float hf = u2f(h << 16);
    lo[i] = (u16)bf16_bits_rne((h & 0x7F80u) == 0x7F80u ? 0.0f : v - hf);
  }
}

// This thread's part of a 32-block of one weight row: CB / W_PARTS words (32 / W_PARTS codes)
// and the block's scale byte.
template <u32 CB>
struct WPart {
  u32 w[CB / W_PARTS];
  u32 s;
};

// Fetch part `part` of block sidx (~0: no block; zero codes, which decode to +0).
template <u32 CB>
MX_DEVICE void w_fetch(WPart<CB>& r, const u32* wcodes, const u8* wscales, u64 sidx, u32 part) {
  const u32 NW = CB / W_PARTS;
  if (sidx == ~0ull) {
#pragma unroll
    for (u32 q = 0; q < NW; ++q) r.w[q] = 0u;
    r.s = 127u;
    return;
  }
  const u32* src = wcodes + sidx * CB + part * NW;
  if (NW % 4u == 0u) {
#pragma unroll
    for (u32 q = 0; q < NW; q += 4u) {
      uint4v v = *(const uint4v*)(src + q);
      r.w[q] = v.x; r.w[(q + 1u) % NW] = v.y; r.w[(q + 2u) % NW] = v.z; r.w[(q + 3u) % NW] = v.w;
    }
  } else if (NW % 2u == 0u) {
    typedef u32 u32x2 __attribute__((ext_vector_type(2)));
#pragma unroll
    for (u32 q = 0; q < NW; q += 2u) {
      u32x2 v = *(const u32x2*)(src + q);
      r.w[q] = v.x; r.w[(q + 1u) % NW] = v.y;
    }
  } else {
#pragma unroll
    for (u32 q = 0; q < NW; ++q) r.w[q] = src[q];
  }
  r.s = wscales[sidx];
}

// Decode a part into 32 / W_PARTS bf16 at dst (16-byte aligned), exact (code value x scale).
// MXFP4: the 3 magnitude bits shifted to f32 bits 22..24 are the E2M1 value times 2^-126 (code
// 1 = 0.5 lands on the f32 subnormal 2^-127), the sign goes to bit 31; multiplying by 2^126 and
// then by the scale is exact (2^126 x scale would overflow f32 for bytes > 128), and so is
// keeping the top 16 bits (a product has at most 2 significant bits and is >= 2^-128; NaN
// stays NaN). As fp4_pair (gemv.h), with f32 in place of f16.
// Other formats: the code's f32 value from tab (shared) x scale, rounded to bf16 (RNE; exact
// but for products deep in the subnormal range, NUMERICS.md 10.3).
template <u32 CB>
MX_DEVICE void w_store(const WPart<CB>& r, const u32* tab, u16* dst) {
  const u32 NC = 32u / W_PARTS;  // codes
  u32 o[NC / 2u];
  u32 s = r.s;
  if (CB == 4u) {
    float sc = e8m0_value(s);
#pragma unroll
    for (u32 i = 0; i < NC / 2u; ++i) {
      u32 b = r.w[i / 4u] >> (8u * (i % 4u));
      float lo = (u2f(((b & 7u) << 22) | ((b & 8u) << 28)) * 0x1p126f) * sc;
      float hi = (u2f(((b & 0x70u) << 18) | ((b & 0x80u) << 24)) * 0x1p126f) * sc;
      o[i] = (f2u(lo) >> 16) | (f2u(hi) & 0xFFFF0000u);
    }
  } else {
    float sc = e8m0_value(s);
#pragma unroll
    for (u32 i = 0; i < NC / 2u; ++i) o[i] = 0u;
#pragma unroll
    for (u32 q = 0; q < NC; ++q) o[q / 2u] |= bf16_bits_rne(u2f(tab[code_of(r.w, q, CB)]) * sc) << (16u * (q % 2u));
  }
#pragma unroll
  for (u32 i = 0; i < NC / 8u; ++i) {
    uint4v v = {o[4u * i], o[4u * i + 1u], o[4u * i + 2u], o[4u * i + 3u]};
    ((uint4v*)dst)[i] = v;
  }
}

// The GEMM epilogue from the f32 tile sC [TM rows][TN + 1] (shared), NT threads: gemm1 bias,
// router weight on input, activation and the intermediate QDQ (the tile's TN / 2 intermediate
// columns from jb: TN / 64 blocks per row, maxima in rowmax [TM][TN / 64], zeroed); gemm2
// bias and router weight (output columns jb .. jb + TN).
// XBO (the mma GEMM's gemm1, whose gemm2 takes bf16 in mx_to_bf16_p8's order): gemm1 writes
// its output as mx_to_bf16_p8 would (gemm_p8_store) instead of f32, and column block 0 the row
// flags of its rows (so the mma path needs no conversion kernel between the GEMMs).
template <u32 TM, u32 TN, u32 NT, bool XBO = false>
MX_DEVICE void gemm_epilogue(const MoeParams& p, bool is1, u32 e, u32 start, u32 cnt, u32 jb,
                             const float* sC, u32* rowmax, const u32* pair_of_row, u32* out,
                             const float* bias, const float* topw) {
  u32 tid = tid_x(), h = p.hidden, inter = p.inter;
  const u32 per_row = NT / TM;  // threads per tile row
  const u32 IC = TN / 2u, NB = IC / 32u;
  u32 r = tid / per_row, part = tid % per_row;
  if (is1) {
    // Column c of the IC intermediate columns: gate in tile column c (SiLU) or 2c (SwiGLU-OAI),
    // up in IC + c or 2c + 1. A thread's columns lie in one 32-block.
    const u32 cols = IC / per_row;
    static_assert(cols <= 32u && 32u % cols == 0u, "epilogue columns straddle a block");
    u32 vals[cols];
    u32 mx = 0u, blk = part * cols / 32u;
    float rw1 = 1.0f;
    if (p.on_input && r < cnt) rw1 = topw[pair_of_row[start + r]];
    bool silu = p.activation == ACT_SILU;
#pragma unroll
    for (u32 i = 0; i < cols; ++i) {
      u32 c = part * cols + i, j = jb + c;
      u32 gi = silu ? c : 2u * c, ui = silu ? IC + c : 2u * c + 1u;
      u32 grow = silu ? j : 2u * j, urow = silu ? inter + j : 2u * j + 1u;
      float g = sC[r * (TN + 1u) + gi], u = sC[r * (TN + 1u) + ui];
      if (p.has_bias13 && j < inter) {
        g += bias[(u64)e * 2u * inter + grow];
        u += bias[(u64)e * 2u * inter + urow];
      }
      if (p.on_input && r < cnt) {
        g *= rw1;
        u *= rw1;
      }
      u32 v = f2u(bf16_point(p, activate(p, bf16_point(p, g), bf16_point(p, u))));
      vals[i] = v;
      if (j < inter) mx = umax(mx, v & 0x7FFFFFFFu);
    }
    if (p.act_fmt != FMT_NONE) atomic_max_u32(&rowmax[r * NB + blk], mx);
    sync_threads();
    if (r < cnt) {
      u32 byte = p.act_fmt != FMT_NONE ? mx_scale_byte(p.act_fmt, p.act_mode, rowmax[r * NB + blk]) : 0u;
#pragma unroll
      for (u32 i = 0; i < cols; ++i) {
        u32 o = vals[i], j = jb + part * cols + i;
        if (p.act_fmt != FMT_NONE) o = intermediate_qdq(p, o, byte);
        if (j < inter) {
          if (XBO)
            gemm_p8_store(p, (u16*)out, start + r, j, u2f(o));
          else
            out[(u64)(start + r) * inter + j] = o;
        }
      }
      // The row flags after the lo values (mx_to_bf16_p8's: 1 if some lo of the row is not
      // +0). With bf16 intermediates every lo is +0 (v - bf16(v) = +0; lo of Inf / NaN is +0);
      // otherwise 1, which only keeps the lo MMAs (the same sums either way).
      if (XBO && p.act_fmt == FMT_NONE && bid_x() == 0u && part == 0u) {
        u64 n = (u64)p.m * p.top_k * inter;
        ((u32*)((u16*)out + 2u * n))[start + r] = p.round_bf16 ? 0u : 1u;
      }
    }
  } else if (r < cnt) {
    const u32 cols = TN / per_row;
    float w = p.on_input ? 1.0f : topw[pair_of_row[start + r]];
#pragma unroll
    for (u32 i = 0; i < cols; ++i) {
      u32 c = part * cols + i, n = jb + c;
      if (n < h) {
        float v = sC[r * (TN + 1u) + c];
        if (p.has_bias2) v += bias[(u64)e * h + n];
        if (!p.on_input) v *= w;
        out[(u64)(start + r) * h + n] = f2u(bf16_point(p, v));
      }
    }
  }
}

template <u32 CB, bool SPLIT>
MX_DEVICE void gemm_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                         const u16* xh, const u16* xl, const u32* wcodes, const u8* wscales,
                         u32* out, const float* bias, const float* topw) {
  // Two stages of [A hi | A lo] (bf16 [GT_M][LDS] each) then two of B (bf16 [GT_N][LDS]); the
  // epilogue's sC [GT_M][GT_N + 1] f32 reuses them.
  const u32 A_TILE = GT_M * LDS, A_STAGE = (SPLIT ? 2u : 1u) * A_TILE, B_TILE = GT_N * LDS;
  const u32 PIPE = 2u * A_STAGE + 2u * B_TILE, EPI = 2u * GT_M * (GT_N + 1u);
  MX_SHARED __attribute__((aligned(16))) u16 smem[PIPE > EPI ? PIPE : EPI];
  MX_SHARED u32 tab[256];
  MX_SHARED u64 xoff[GT_M];
  MX_SHARED u64 wrow[GT_N];  // the row's first scale index; ~0 = no row
  MX_SHARED u32 rowmax[GT_M * (GT_N / 64u)];
  float* sC = (float*)smem;
  u32 tid = tid_x(), lane = tid % WARP, warp = tid / WARP;
  u32 wm = warp / WARPS_N, wn = warp % WARPS_N;
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_y(), &e, &start, &cnt)) return;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u;
  u32 nrows = is1 ? 2u * inter : h;
  u32 jb = is1 ? bid_x() * (GT_N / 2u) : bid_x() * GT_N;
  if (CB != 4u)
    for (u32 i = tid; i < 256u; i += GEMM_THREADS) tab[i] = mx_dequant_bits(p.weight_fmt, i, 127u);
  for (u32 r = tid; r < GT_M; r += GEMM_THREADS) {
    u64 o = ~0ull;
    if (r < cnt) o = is1 ? (u64)(pair_of_row[start + r] / p.top_k) * K : (u64)(start + r) * K;
    xoff[r] = o;
  }
  for (u32 r = tid; r < GT_M * (GT_N / 64u); r += GEMM_THREADS) rowmax[r] = 0u;
  for (u32 r = tid; r < GT_N; r += GEMM_THREADS) {
    u32 row = weight_row(p, is1, r, jb, GT_N / 2u);
    bool ok = is1 ? weight_row_ok(p, r, jb, GT_N / 2u) : row < nrows;
    wrow[r] = ok ? ((u64)e * nrows + row) * kblocks : ~0ull;
  }
  sync_threads();
  // This thread's share of a step: activation chunks c < A_CH (row ar + c * AR_STEP, 8 bf16
  // at ak) of hi (and lo); weight part bh of row br's block.
  const u32 AR_STEP = GEMM_THREADS / (GT_K / 8u);
  const u32 ar = tid / (GT_K / 8u), ak = (tid % (GT_K / 8u)) * 8u;
  const u32 br = tid / W_PARTS, bh = tid % W_PARTS;
  static_assert(A_CH * GEMM_THREADS * 8u == GT_M * GT_K && W_PARTS * GT_N == GEMM_THREADS, "thread shares");
  const u32 W_DEPTH = CB == 4u ? 4u : 2u;  // weight steps in flight (registers)
  const u32 BPART = 32u / W_PARTS;          // bf16 per weight part
  u64 axo[A_CH];
#pragma unroll
  for (u32 c = 0; c < A_CH; ++c) axo[c] = xoff[ar + c * AR_STEP];
  const u64 bwo = wrow[br];
  const bool active = wm * WT_M < cnt;
  FragC acc[MF][NF];
#pragma unroll
  for (u32 i = 0; i < MF; ++i)
#pragma unroll
    for (u32 j = 0; j < NF; ++j)
#pragma unroll
      for (u32 c = 0; c < FRAG_C; ++c) acc[i][j].v[c] = 0.0f;
  u32 steps = kblocks;
  // Prologue: weight steps 0 .. W_DEPTH - 1 in flight, step 0 staged.
  WPart<CB> wr[W_DEPTH];
#pragma unroll
  for (u32 d = 0; d < W_DEPTH; ++d)
    w_fetch<CB>(wr[d], wcodes, wscales, (bwo == ~0ull || d >= steps) ? ~0ull : bwo + d, bh);
  {
#pragma unroll
    for (u32 c = 0; c < A_CH; ++c) {
      u16* sa = smem + (ar + c * AR_STEP) * LDS + ak;
      bool v = axo[c] != ~0ull;
      copy16_async(sa, xh + (v ? axo[c] + ak : 0ull), v);
      if (SPLIT) copy16_async(sa + A_TILE, xl + (v ? axo[c] + ak : 0ull), v);
    }
    copy_commit();
    w_store<CB>(wr[0], tab, smem + 2u * A_STAGE + br * LDS + bh * BPART);
    copy_wait_all();
  }
  sync_threads();
  for (u32 s0 = 0; s0 < steps; s0 += W_DEPTH) {
#pragma unroll
    for (u32 d = 0; d < W_DEPTH; ++d) {
      u32 s = s0 + d;
      if (s < steps) {
        u32 cur = s & 1u, nxt = cur ^ 1u;
        bool more = s + 1u < steps;
        // wr[d] (step s) was decoded last step: refill it with step s + W_DEPTH.
        u32 sf = s + W_DEPTH;
        w_fetch<CB>(wr[d], wcodes, wscales, (bwo == ~0ull || sf >= steps) ? ~0ull : bwo + sf, bh);
        if (more) {
          u64 k0 = (u64)(s + 1u) * GT_K + ak;
#pragma unroll
          for (u32 c = 0; c < A_CH; ++c) {
            u16* sa = smem + nxt * A_STAGE + (ar + c * AR_STEP) * LDS + ak;
            bool v = axo[c] != ~0ull;
            copy16_async(sa, xh + (v ? axo[c] + k0 : 0ull), v);
            if (SPLIT) copy16_async(sa + A_TILE, xl + (v ? axo[c] + k0 : 0ull), v);
          }
          copy_commit();
        }
        if (active) {
          const u16* sAh = smem + cur * A_STAGE + (wm * WT_M) * LDS;
          const u16* sB = smem + 2u * A_STAGE + cur * B_TILE + (wn * WT_N) * LDS;
#pragma unroll 1
          for (u32 k16 = 0; k16 < GT_K; k16 += FRAG_K) {
            FragA ah[MF], al[MF];
#pragma unroll
            for (u32 i = 0; i < MF; ++i) {
              load_a(ah[i], sAh + (i * FRAG_M) * LDS + k16, LDS, lane);
              if (SPLIT) load_a(al[i], sAh + A_TILE + (i * FRAG_M) * LDS + k16, LDS, lane);
            }
            // hi products of a fragment pair, then the lo ones: no mma waits on the one before.
#pragma unroll
            for (u32 j = 0; j < NF; j += 2u) {
              FragB b0, b1;
              load_b2(b0, b1, sB + (j * FRAG_N) * LDS + k16, LDS, lane);
#pragma unroll
              for (u32 i = 0; i < MF; ++i) {
                mma(acc[i][j], ah[i], b0);
                mma(acc[i][j + 1u], ah[i], b1);
              }
              if (SPLIT)
#pragma unroll
                for (u32 i = 0; i < MF; ++i) {
                  mma(acc[i][j], al[i], b0);
                  mma(acc[i][j + 1u], al[i], b1);
                }
            }
          }
        }
        if (more) {
          w_store<CB>(wr[(d + 1u) % W_DEPTH], tab, smem + 2u * A_STAGE + nxt * B_TILE + br * LDS + bh * BPART);
          copy_wait_all();
        }
        sync_threads();
      }
    }
  }
#pragma unroll
  for (u32 i = 0; i < MF; ++i)
#pragma unroll
    for (u32 j = 0; j < NF; ++j)
#pragma unroll
      for (u32 c = 0; c < FRAG_C; ++c)
        sC[(wm * WT_M + i * FRAG_M + c_row(lane, c)) * (GT_N + 1u) + wn * WT_N + j * FRAG_N + c_col(lane, c)] =
            acc[i][j].v[c];
  sync_threads();
  gemm_epilogue<GT_M, GT_N, GEMM_THREADS>(p, is1, e, start, cnt, jb, sC, rowmax, pair_of_row, out, bias, topw);
}

#define GEMM_BF16_ARGS                                                                        \
  MoeParams p, const u32 *pair_of_row, const u32 *tiles, const u16 *xh, const u16 *xl,         \
      const u32 *wcodes, const u8 *wscales, u32 *out, const float *bias, const float *topw
#define GEMM_BF16_PASS pair_of_row, tiles, xh, xl, wcodes, wscales, out, bias, topw
// NVIDIA: 4 blocks (16 warps) per multiprocessor, <= 128 registers; the split kernels, whose
// hi and lo fragments need more, 3 (<= 168). AMD: the LDS holds one block on gfx942.
#if defined(MX_NV)
#define GEMM_KERNEL MX_KERNEL_OCC(GEMM_THREADS, 4)
#define GEMM_KERNEL_SPLIT MX_KERNEL_OCC(GEMM_THREADS, 3)
#else
#define GEMM_KERNEL MX_KERNEL(GEMM_THREADS)
#define GEMM_KERNEL_SPLIT MX_KERNEL(GEMM_THREADS)
#endif
#define GEMM_KERNELS(CB)                                                                                          \
  GEMM_KERNEL void moe_gemm1_cb##CB(GEMM_BF16_ARGS) { gemm_body<CB, false>(p, true, GEMM_BF16_PASS); }       \
  GEMM_KERNEL void moe_gemm2_cb##CB(GEMM_BF16_ARGS) { gemm_body<CB, false>(p, false, GEMM_BF16_PASS); }      \
  GEMM_KERNEL_SPLIT void moe_gemm1_split_cb##CB(GEMM_BF16_ARGS) { gemm_body<CB, true>(p, true, GEMM_BF16_PASS); }  \
  GEMM_KERNEL_SPLIT void moe_gemm2_split_cb##CB(GEMM_BF16_ARGS) { gemm_body<CB, true>(p, false, GEMM_BF16_PASS); }
GEMM_KERNELS(4)
GEMM_KERNELS(6)
GEMM_KERNELS(8)
