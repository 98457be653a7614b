// gemm_v2.h: the grouped GEMM v2 (NVIDIA only; MXMOE_HIP_GEMM=v2, docs/hip-gemm-v2.md): V2Shape,
// gemm_v2_epilogue, gemm_v2_body, moe_gemm{1,2}_v2_t<TM>[_split]_cb<CB> and the
// moe_gemm_v2_t<TM>[_split]_cb<CB>_smem globals the host reads. Included by hip/mxmoe.cu after
// gemm_v1.h, whose weight decode (WPart, W_PARTS, w_store) and GEMM_BF16_ARGS it reuses; relies
// on mx_fragment.h, moe_tile.h and moe_common.h as v1 does.
#pragma once

// ---- grouped GEMM v2 (NVIDIA; MXMOE_HIP_GEMM=v2, docs/hip-gemm-v2.md) ------------------------
// The same contract as gemm_body (grid x = column block of V2_TN = 128 weight rows, y = tile
// slot; the tile list built with p.tile_m = TM; the same operands, the same exact bf16 weights,
// the same hi + lo activations, the same epilogue arithmetic), rebuilt around dynamic shared
// memory (the host raises the per-function limit: cuFuncSetAttribute, driver.rs):
//   - K in steps of V2_BK = 64 (two 32-blocks), one barrier per step;
//   - a STAGES-deep cp.async ring for the activation tiles AND the packed weight codes (raw, as
//     stored); each thread copies its own weight row's codes and decodes them itself, so the
//     decode needs no barrier (cp.async.wait_group makes a thread's completed copies visible to
//     it); the scale bytes are loaded into a register one step ahead;
//   - the raw codes of step s + 1 are decoded (w_store, as v1: exact) into the second bf16 B
//     buffer while step s's MMAs run from the first;
//   - TM = 64, 32 or 16 pair rows (the host picks the narrow tiles when the token-expert pairs
//     per expert are few: fewer zero rows streamed through the matrix cores per weight byte);
//   - the epilogue stages the f32 tile in shared memory and walks it column-fastest: a warp
//     takes 32 consecutive columns of one row (stage 1: one QDQ block, its maximum by a 5-step
//     butterfly instead of shared atomics), so every store instruction writes one 128-byte line.
// AMD keeps v1 only (gfx942's LDS is 64 KB; built, not run either way).
#if defined(MX_NV)
#define V2_TN 128u
#define V2_BK 64u
#define V2_LDS (V2_BK + 8u)  // bf16 per shared row: 144 bytes, so ldmatrix's 8 rows hit 8 bank quads
#define V2_LDC (V2_TN + 4u)  // f32 per row of the epilogue tile
#define V2_THREADS 128u      // 4 warps; thread t owns weight row t of the tile

#if !defined(MX_HOST_EMU)  // hip/test/nv_emu.h: emu_dsmem
extern MX_SHARED __attribute__((aligned(16))) u16 v2_dsmem[];
#else
#define v2_dsmem ((u16*)emu_dsmem)
#endif

// The layout of one kernel's dynamic shared memory (bytes; every region a multiple of 16):
// [A ring: STAGES x (hi[, lo]) x TM x V2_LDS bf16][B: 2 x V2_TN x V2_LDS bf16][W ring: STAGES x
// 2 blocks x V2_TN rows x CB words]; the epilogue's f32 [TM][V2_LDC] reuses it from the start.
template <u32 TM, u32 CB, bool SPLIT>
struct V2Shape {
  static constexpr u32 STAGES = TM >= 64u ? 3u : 4u;
  static constexpr u32 V_WM = TM >= 64u ? 2u : 1u;
  static constexpr u32 V_WN = (V2_THREADS / 32u) / V_WM;
  static constexpr u32 V_TM = TM / V_WM, V_TN = V2_TN / V_WN;
  static constexpr u32 V_MF = V_TM / FRAG_M, V_NF = V_TN / FRAG_N;
  static constexpr u32 V_ATILE = TM * V2_LDS;                    // bf16
  static constexpr u32 V_ASTAGE = (SPLIT ? 2u : 1u) * V_ATILE;    // bf16
  static constexpr u32 V_BTILE = V2_TN * V2_LDS;                 // bf16
  static constexpr u32 W_STAGE = 2u * V2_TN * CB;               // u32
  static constexpr u32 A_BYTES = STAGES * V_ASTAGE * 2u;
  static constexpr u32 B_BYTES = 2u * V_BTILE * 2u;
  static constexpr u32 W_BYTES = STAGES * W_STAGE * 4u;
  static constexpr u32 PIPE = A_BYTES + B_BYTES + W_BYTES;
  static constexpr u32 EPI = TM * V2_LDC * 4u;
  static constexpr u32 SMEM = PIPE > EPI ? PIPE : EPI;
  static constexpr u32 V_ACH = TM * (V2_BK / 8u) / V2_THREADS;  // 16-byte activation chunks per thread and array
  static_assert(V_WM * V_WN * 32u == V2_THREADS, "4 warps");
  static_assert(V_WM * V_TM == TM && V_WN * V_TN == V2_TN, "warp tiles cover the tile");
  static_assert(V_TM % FRAG_M == 0u && V_TN % (2u * FRAG_N) == 0u, "whole fragments, B in pairs (load_b2)");
  static_assert(V_ACH >= 1u && V_ACH * V2_THREADS == TM * (V2_BK / 8u), "activation chunks divide evenly");
  static_assert(V2_THREADS / (V2_BK / 8u) == 16u, "chunk c of a thread is row tid / 8 + 16 c");
  static_assert(STAGES >= 3u, "step s writes slot s - 1 while it decodes slot s + 1 (and wait_group<STAGES - 2>)");
  static_assert(A_BYTES % 16u == 0u && B_BYTES % 16u == 0u && W_BYTES % 16u == 0u, "16-byte regions");
  static_assert((V2_LDS * 2u) % 16u == 0u && (V2_LDC * 4u) % 16u == 0u, "16-byte rows");
  static_assert(CB == 4u || CB == 6u || CB == 8u, "code widths");
  static_assert(SMEM <= 227u * 1024u, "sm_90's per-block limit");
};

// The stage-1 / stage-2 epilogue from the f32 tile sC [TM][V2_LDC], column-fastest. Per value
// the arithmetic of gemm_epilogue (bias, router weight, activation, bf16 points, intermediate
// QDQ with the block maximum of the same bits), so the same results.
template <u32 TM>
MX_DEVICE void gemm_v2_epilogue(const MoeParams& p, bool is1, u32 e, u32 start, u32 cnt, u32 jb,
                                const float* sC, const u32* pair_of_row, u32* out, const float* bias,
                                const float* topw) {
  const u32 NW = V2_THREADS / 32u;
  u32 tid = tid_x(), lane = tid % 32u, warp = tid / 32u, h = p.hidden, inter = p.inter;
  if (is1) {
    // Intermediate column c (of IC = 64 from jb): gate in tile column c (SiLU) or 2c
    // (SwiGLU-OAI), up in IC + c or 2c + 1 (weight_row with ic = IC).
    const u32 IC = V2_TN / 2u, NB = IC / 32u;
    bool silu = p.activation == ACT_SILU;
    for (u32 it = warp; it < TM * NB; it += NW) {
      u32 r = it / NB, blk = it % NB;
      if (r >= cnt) continue;  // the same r for the whole warp
      u32 c = blk * 32u + lane, j = jb + c;
      u32 gi = silu ? c : 2u * c, ui = silu ? IC + c : 2u * c + 1u;
      u32 grow = silu ? j : 2u * j, urow = silu ? inter + j : 2u * j + 1u;
      float g = sC[r * V2_LDC + gi], u = sC[r * V2_LDC + ui];
      if (p.has_bias13 && j < inter) {
        g += bias[(u64)e * 2u * inter + grow];
        u += bias[(u64)e * 2u * inter + urow];
      }
      if (p.on_input) {
        float rw = topw[pair_of_row[start + r]];
        g *= rw;
        u *= rw;
      }
      u32 v = f2u(bf16_point(p, activate(p, bf16_point(p, g), bf16_point(p, u))));
      if (p.act_fmt != FMT_NONE) {
        // The block's largest magnitude bits over the 32 lanes (columns past I count 0, as
        // v1's skipped atomics); every lane gets the same (a butterfly of max).
        u32 a = j < inter ? (v & 0x7FFFFFFFu) : 0u;
        for (u32 m = 16u; m > 0u; m >>= 1) a = umax(a, f2u(shfl_xor(u2f(a), m)));
        v = intermediate_qdq(p, v, mx_scale_byte(p.act_fmt, p.act_mode, a));
      }
      if (j < inter) out[(u64)(start + r) * inter + j] = v;
    }
  } else {
    const u32 NQ = V2_TN / 32u;
    for (u32 it = warp; it < TM * NQ; it += NW) {
      u32 r = it / NQ, c = (it % NQ) * 32u + lane, n = jb + c;
      if (r >= cnt) continue;
      if (n < h) {
        float v = sC[r * V2_LDC + c];
        if (p.has_bias2) v += bias[(u64)e * h + n];
        if (!p.on_input) v *= topw[pair_of_row[start + r]];
        out[(u64)(start + r) * h + n] = f2u(bf16_point(p, v));
      }
    }
  }
}

template <u32 TM, u32 CB, bool SPLIT>
MX_DEVICE void gemm_v2_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                            const u16* xh, const u16* xl, const u32* wcodes, const u8* wscales,
                            u32* out, const float* bias, const float* topw) {
  typedef V2Shape<TM, CB, SPLIT> S;
  static_assert(W_PARTS == 1u, "w_store decodes a whole 32-block per call (NVIDIA: W_PARTS 1)");
  static_assert(V2_THREADS == V2_TN, "one weight row per thread");
  // A launch with less dynamic shared memory than this layout would write past it: stop here
  // (an error at the next synchronize) instead of computing garbage.
  if (dynamic_smem_bytes() < S::SMEM) __builtin_trap();
  u16* sA = v2_dsmem;
  u16* sB = sA + S::A_BYTES / 2u;
  u32* sW = (u32*)(sB + 2u * S::V_BTILE);
  float* sC = (float*)v2_dsmem;
  MX_SHARED u32 tab[256];
  MX_SHARED u64 xoff[TM];
  u32 tid = tid_x(), lane = tid % 32u, warp = tid / 32u;
  u32 wm = warp / S::V_WN, wn = warp % S::V_WN;
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_y(), &e, &start, &cnt)) return;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u, steps = (kblocks + 1u) / 2u;
  u32 nrows = is1 ? 2u * inter : h;
  u32 jb = is1 ? bid_x() * (V2_TN / 2u) : bid_x() * V2_TN;
  if (CB != 4u)
    for (u32 i = tid; i < 256u; i += V2_THREADS) tab[i] = mx_dequant_bits(p.weight_fmt, i, 127u);
  for (u32 r = tid; r < TM; r += V2_THREADS) {
    u64 o = ~0ull;
    if (r < cnt) o = is1 ? (u64)(pair_of_row[start + r] / p.top_k) * K : (u64)(start + r) * K;
    xoff[r] = o;
  }
  // This thread's weight row: tile row tid; its first block's index (~0: past the matrix).
  const u32 br = tid;
  const u32 wrow_ = weight_row(p, is1, br, jb, V2_TN / 2u);
  const bool rok = is1 ? weight_row_ok(p, br, jb, V2_TN / 2u) : wrow_ < nrows;
  const u64 bwo = rok ? ((u64)e * nrows + wrow_) * kblocks : ~0ull;
  sync_threads();
  // Activation chunk c of this thread: row tid / 8 + 16 c, bf16 (tid % 8) * 8 .. + 8 of the step.
  const u32 ar = tid / 8u, ak = (tid % 8u) * 8u;
  u64 axo[S::V_ACH];
#pragma unroll
  for (u32 c = 0; c < S::V_ACH; ++c) axo[c] = xoff[ar + 16u * c];

  // (The lambdas are forced inline: clang left the larger ones as calls with their closures in
  // local memory.)
  // Issue step t's copies into ring slot t % STAGES (the caller commits the group). K is a
  // multiple of 32, so an 8-wide chunk lies wholly inside or wholly past it (the last step of a
  // K % 64 == 32 matrix is half zeros), and so does each 32-block of the weights.
  auto issue = [&](u32 t) __attribute__((always_inline)) {
    u32 slot = t % S::STAGES;
    u64 k0 = (u64)t * V2_BK + ak;
    bool kin = k0 < K;
#pragma unroll
    for (u32 c = 0; c < S::V_ACH; ++c) {
      u16* sa = sA + slot * S::V_ASTAGE + (ar + 16u * c) * V2_LDS + ak;
      bool v = kin && axo[c] != ~0ull;
      copy16_async(sa, xh + (v ? axo[c] + k0 : 0ull), v);
      if (SPLIT) copy16_async(sa + S::V_ATILE, xl + (v ? axo[c] + k0 : 0ull), v);
    }
#pragma unroll
    for (u32 b = 0; b < 2u; ++b) {
      u32 blk = 2u * t + b;
      bool v = bwo != ~0ull && blk < kblocks;
      u32* sw = sW + slot * S::W_STAGE + (b * V2_TN + br) * CB;
      const u32* src = wcodes + (v ? (bwo + blk) * CB : 0ull);
      if (CB == 6u) {
        // 24 bytes a block: 8-byte aligned only.
#pragma unroll
        for (u32 q = 0; q < CB; q += 2u) copy8_async(sw + q, src + q, v);
      } else {
#pragma unroll
        for (u32 q = 0; q < CB; q += 4u) copy16_async(sw + q, src + q, v);
      }
    }
  };
  // Step t's two scale bytes (block 2t in bits 0..7, 2t + 1 in 8..15); 127 (2^0) past the
  // matrix, where the codes are zeros: +0 either way, as v1's w_fetch.
  auto scales = [&](u32 t) __attribute__((always_inline)) -> u32 {
    u32 b0 = 2u * t, b1 = b0 + 1u;
    u32 s0 = (bwo != ~0ull && b0 < kblocks) ? (u32)wscales[bwo + b0] : 127u;
    u32 s1 = (bwo != ~0ull && b1 < kblocks) ? (u32)wscales[bwo + b1] : 127u;
    return s0 | (s1 << 8);
  };
  // Decode step t's raw codes (this thread's row, its own copies) into B buffer t & 1.
  auto decode = [&](u32 t, u32 sc) __attribute__((always_inline)) {
    u32 slot = t % S::STAGES;
    u16* dst = sB + (t & 1u) * S::V_BTILE + br * V2_LDS;
#pragma unroll
    for (u32 b = 0; b < 2u; ++b) {
      const u32* sw = sW + slot * S::W_STAGE + (b * V2_TN + br) * CB;
      WPart<CB> wp;
      if (CB == 6u) {
        typedef u32 u32x2 __attribute__((ext_vector_type(2)));
#pragma unroll
        for (u32 q = 0; q < CB; q += 2u) {
          u32x2 v = *(const u32x2*)(sw + q);
          wp.w[q] = v.x;
          wp.w[(q + 1u) % CB] = v.y;
        }
      } else {
#pragma unroll
        for (u32 q = 0; q < CB; q += 4u) {
          uint4v v = *(const uint4v*)(sw + q);
          wp.w[q] = v.x;
          wp.w[(q + 1u) % CB] = v.y;
          wp.w[(q + 2u) % CB] = v.z;
          wp.w[(q + 3u) % CB] = v.w;
        }
      }
      wp.s = (sc >> (8u * b)) & 0xFFu;
      w_store<CB>(wp, tab, dst + 32u * b);
    }
  };

  const bool active = wm * S::V_TM < cnt;
  FragC acc[S::V_MF][S::V_NF];
#pragma unroll
  for (u32 i = 0; i < S::V_MF; ++i)
#pragma unroll
    for (u32 j = 0; j < S::V_NF; ++j)
#pragma unroll
      for (u32 c = 0; c < FRAG_C; ++c) acc[i][j].v[c] = 0.0f;
  // Prologue: steps 0 .. STAGES - 2 in flight (one group each, empty past the end), step 0
  // decoded and published.
#pragma unroll
  for (u32 t = 0; t + 1u < S::STAGES; ++t) {
    if (t < steps) issue(t);
    copy_commit();
  }
  u32 sc = scales(0u);
  copy_wait_group<(int)S::STAGES - 2>();
  decode(0u, sc);
  sync_threads();
  for (u32 s = 0; s < steps; ++s) {
    // Slot (s - 1) % STAGES is free: its activations fed step s - 1's MMAs (all warps passed
    // the barrier since), its codes were decoded in step s - 2 by this thread.
    u32 t = s + S::STAGES - 1u;
    if (t < steps) issue(t);
    copy_commit();
    bool more = s + 1u < steps;
    if (more) sc = scales(s + 1u);  // consumed after the MMAs
    if (active) {
      const u16* sAh = sA + (s % S::STAGES) * S::V_ASTAGE + (wm * S::V_TM) * V2_LDS;
      const u16* sBt = sB + (s & 1u) * S::V_BTILE + (wn * S::V_TN) * V2_LDS;
#pragma unroll 1
      for (u32 k16 = 0; k16 < V2_BK; k16 += FRAG_K) {
        FragA ah[S::V_MF], al[S::V_MF];
#pragma unroll
        for (u32 i = 0; i < S::V_MF; ++i) {
          load_a(ah[i], sAh + (i * FRAG_M) * V2_LDS + k16, V2_LDS, lane);
          if (SPLIT) load_a(al[i], sAh + S::V_ATILE + (i * FRAG_M) * V2_LDS + k16, V2_LDS, lane);
        }
#pragma unroll
        for (u32 j = 0; j < S::V_NF; j += 2u) {
          FragB b0, b1;
          load_b2(b0, b1, sBt + (j * FRAG_N) * V2_LDS + k16, V2_LDS, lane);
#pragma unroll
          for (u32 i = 0; i < S::V_MF; ++i) {
            mma(acc[i][j], ah[i], b0);
            mma(acc[i][j + 1u], ah[i], b1);
          }
          if (SPLIT)
#pragma unroll
            for (u32 i = 0; i < S::V_MF; ++i) {
              mma(acc[i][j], al[i], b0);
              mma(acc[i][j + 1u], al[i], b1);
            }
        }
      }
    }
    if (more) {
      // Step s + 1's group is complete once at most STAGES - 2 newer ones are pending.
      copy_wait_group<(int)S::STAGES - 2>();
      decode(s + 1u, sc);
    }
    sync_threads();  // B buffer (s + 1) & 1 and slot s + 1's activations, for every warp
  }
  copy_wait_all();  // (only empty groups can remain; the epilogue tile overwrites the ring)
#pragma unroll
  for (u32 i = 0; i < S::V_MF; ++i)
#pragma unroll
    for (u32 j = 0; j < S::V_NF; ++j)
#pragma unroll
      for (u32 c = 0; c < FRAG_C; ++c)
        sC[(wm * S::V_TM + i * FRAG_M + c_row(lane, c)) * V2_LDC + wn * S::V_TN + j * FRAG_N + c_col(lane, c)] =
            acc[i][j].v[c];
  sync_threads();
  gemm_v2_epilogue<TM>(p, is1, e, start, cnt, jb, sC, pair_of_row, out, bias, topw);
}

// moe_gemm{1,2}_v2_t<TM>[_split]_cb<CB>, and per (TM, split, CB) the dynamic shared memory its
// launch must give, as a PTX global the host reads from the module text (one source of truth:
// src/backend/hip/kernels.rs v2_smem). OCC blocks per multiprocessor (launch bounds: the
// register budget): 64-row tiles take ~100 KB, so 2; the narrow ones 3.
#define GEMM_V2_VARIANT(TM, OCC, CB, SPLIT, SFX)                                                     \
  extern "C" __attribute__((device, used)) const u32 moe_gemm_v2_t##TM##SFX##_cb##CB##_smem =     \
      V2Shape<TM, CB, SPLIT>::SMEM;                                                                 \
  MX_KERNEL_OCC(V2_THREADS, OCC) void moe_gemm1_v2_t##TM##SFX##_cb##CB(GEMM_BF16_ARGS) {             \
    gemm_v2_body<TM, CB, SPLIT>(p, true, GEMM_BF16_PASS);                                           \
  }                                                                                                 \
  MX_KERNEL_OCC(V2_THREADS, OCC) void moe_gemm2_v2_t##TM##SFX##_cb##CB(GEMM_BF16_ARGS) {             \
    gemm_v2_body<TM, CB, SPLIT>(p, false, GEMM_BF16_PASS);                                          \
  }
#define GEMM_V2_KERNELS(TM, OCC)              \
  GEMM_V2_VARIANT(TM, OCC, 4, false, )        \
  GEMM_V2_VARIANT(TM, OCC, 4, true, _split)   \
  GEMM_V2_VARIANT(TM, OCC, 6, false, )        \
  GEMM_V2_VARIANT(TM, OCC, 6, true, _split)   \
  GEMM_V2_VARIANT(TM, OCC, 8, false, )        \
  GEMM_V2_VARIANT(TM, OCC, 8, true, _split)
GEMM_V2_KERNELS(64, 2)
GEMM_V2_KERNELS(32, 3)
GEMM_V2_KERNELS(16, 3)
#endif
