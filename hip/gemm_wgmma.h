// gemm_wgmma.h: the mma GEMM (hip/gemm_mma.h) on Hopper's asynchronous warpgroup MMA
// (`wgmma.mma_async`, sm_90a only: the sm_90 PTX target is built as sm_90a, build.rs;
// MXMOE_HIP_MMA_VARIANT=wg256, and by default for 64-pair stages of K >= 2560 on compute
// capability 9.0; docs/hip-gemm-mma.md "wgmma"; session 9's first versions, on 128-row blocks
// and slower than mma.sync, are in docs/h200-2026-12-01s9-wg). Same kernel contract as the mma
// GEMM but for the block: the same arguments, tiles, activations (mx_to_bf16_p8's
// bf16 hi / lo in p8 order, row flags), weights (MXFP4 in the nv4 layout), A fragments (the
// weights decoded in registers exactly as gemm_mma_body does, the same k permutation) and
// epilogue (v1's gemm_epilogue on the same f32 tile), so the same products in another summation
// order. What changes is the block, the B side and the MMA:
//
//   - The block: MW = 256 weight rows (four warpgroups, 512 threads, one block per SM at <= 128
//     registers), the grid's x over 256-row blocks (gemm1: 128 intermediate columns), so each
//     staged activation tile feeds twice the MMAs of the mma GEMM's 128-row block. Nsight
//     Compute found both the mma GEMM and this one on 128-row blocks bound by the L1 data pipe's
//     wavefronts (76-79 %, the tensor pipe at 30-37 %), to which the activation tile re-read by
//     every column block is the largest contributor (docs/h100-2026-12-06s12-wgmma); on 128-row
//     blocks this kernel was slower than mma.sync everywhere, on 256 it is faster at long K.
//
//   - mma.sync (m16n8k16) is a synchronous per-warp instruction: gemm_mma_body issues TP / 8
//     MMAs per k16 and warp, each behind a 16-byte shared load of its B registers, and ncu saw
//     the warps wait on that chain (docs/hip-gemm-mma.md). wgmma.mma_async.m64nTPk16 is one
//     instruction per k16 for a warpgroup (4 warps, 64 weight rows x all TP pairs): A from each
//     warp's registers (per warp the m16n8k16 A fragment: PTX ISA "Register Fragments and Shared
//     Memory Matrix Layouts", wgmma .m64nNk16 A), B read by the tensor cores themselves from
//     shared memory through a matrix descriptor, D (f32) in registers, d[4j + c] at weight row
//     16 (warp % 4) + g + 8 (c >= 2), pair 8j + 2t + (c & 1) (the m16n8k16 C fragment of each
//     n8 block j). The warp issues the MMAs and goes on decoding the next word's weights.
//   - B in shared memory, the canonical K-major layout without swizzle: core matrices of 8
//     pairs x 8 k (16 bytes a pair row, rows at +16), the matrix descriptor's leading byte
//     offset (LBO) the distance between the two k cores of one k16, the stride byte offset (SBO)
//     the distance between 8-pair groups (PTX ISA, "Matrix Descriptor Format"; CUTLASS's
//     "INTERLEAVE" canonical layout ((8, n), 2) : ((16 B, SBO), LBO)). A ring slot holds, per
//     array (hi, lo), 16 k cores (the step's 128 k) of TP core rows each: core row (pair r, k
//     core kc) at kc x TP x 16 + r x 16; LBO = TP x 16, SBO = 128.
//   - The k permutation: MMA q = 2w + h of a step (word w, half h) takes A = gemm_mma_body's
//     a0 (h = 0) / a1 (h = 1) of word w, whose logical k 2t, 2t + 1 (k core 0) hold codes (2h,
//     2h + 4) and k 2t + 8, 2t + 9 (k core 1) codes (2h + 1, 2h + 5) of block 4s + t. The
//     activations in p8 order: group (t, w) (stored k 128s + 32t + 8w .. + 7, 16 bytes) holds
//     words (x0, x4), (x1, x5), (x2, x6), (x3, x7). So k core 4w + m (m = 2h + c) of a pair is
//     {group (0, w) word m, group (1, w) word m, group (2, w) word m, group (3, w) word m}: a
//     thread that loads the four groups of one (pair, w) (4 x 16 bytes) stores the four core
//     rows of k cores 4w .. 4w + 3 (4 x 16 bytes), a 4 x 4 transpose of registers, no ALU op.
//   - Staging through registers (no cp.async: the transpose needs them): item (array, pair r,
//     word w), lanes 8w' + r' of a warp = pairs r' of one w, so each quarter warp stores 128
//     consecutive bytes (no bank conflict) and each pair's 64 bytes of a group row come from
//     four lanes. Loaded one step ahead, stored after the step's MMAs are issued, published by
//     fence.proxy.async (generic-proxy stores, read by the async proxy) and one barrier a step.
//     Three slots: the stores of step s + 1 go to the slot step s - 2 read, which every
//     warpgroup has waited for before the barrier that ends step s - 1.
//   - One wgmma group per word (2 MMAs, 4 with lo), at most two in flight per warpgroup
//     (wait_group 1 after each commit): the registers of A (decoded) and D stay untouched
//     while their MMAs run (volatile asm operand fences fix the order around the async ops).
//   - wgmma is .sync.aligned over the warpgroup: its four warps must issue the same wgmma
//     instructions. So the decode path (one or two bf16 multiplies, by the scale bytes) is
//     chosen for the whole block at the barrier that ends the step before (bar.red.or), not per
//     warp as in gemm_mma_body: a per-warp choice gave wrong sums on the H100, and the CPU
//     emulation checks the warpgroup's wgmma sequence since (hip/test/nv_emu.h emu_wg_check).
// The products are the same exact bf16 x bf16 products as gemm_mma_body's; the tensor cores
// accumulate in f32 (the order differs from mma.sync's: the sums agree within f32 rounding).
#pragma once

#if defined(MX_NV) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MX_WGMMA 1

#if !defined(MX_HOST_EMU)  // hip/test/nv_emu.h gives the CPU twins
MX_DEVICE void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
MX_DEVICE void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
MX_DEVICE void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Generic-proxy shared-memory writes made visible to the async proxy (wgmma's B reads).
MX_DEVICE void wg_fence_proxy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
MX_DEVICE void wg_sts128(void* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(p)), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}
MX_DEVICE uint4v wg_ld16(const void* p) {
  uint4v v;
  asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
MX_DEVICE u32 wg_smem(const void* p) { return smem_addr(p); }
// Orders register accesses around the async MMAs (an empty volatile asm that "changes" r).
MX_DEVICE void wg_reg(u32& r) { asm volatile("" : "+r"(r)::"memory"); }
MX_DEVICE void wg_reg(float& r) { asm volatile("" : "+f"(r)::"memory"); }

#define WG_D8(o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
// d += A (this warp's 16 rows of the warpgroup's 64) x B (descriptor), m64nNk16, bf16 -> f32.
// (site: for the CPU emulation's check that a warpgroup's warps run the same wgmma.)
template <u32 N>
MX_DEVICE void wgmma_bf16(float* d, const u32* a, u64 desc, u32 site) {
  static_assert(N == 16u || N == 32u || N == 64u, "wgmma n16 / n32 / n64");
  if constexpr (N == 16u) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}"
        : WG_D8(0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1u));
  } else if constexpr (N == 32u) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}"
        : WG_D8(0), WG_D8(8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1u));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
        : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1u));
  }
}
#undef WG_D8
#endif  // !MX_HOST_EMU

// The matrix descriptor of a K-major, unswizzled B operand at shared address addr (PTX ISA,
// "Matrix Descriptor Format": bits 0-13 address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, base
// offset 0, bits 62-63 swizzle mode 0 = none).
MX_DEVICE u64 wg_desc(u32 addr, u32 lbo, u32 sbo) {
  return (u64)((addr >> 4) & 0x3FFFu) | ((u64)((lbo >> 4) & 0x3FFFu) << 16) | ((u64)((sbo >> 4) & 0x3FFFu) << 32);
}

// MW: weight rows per block (128: 2 warpgroups, 256 threads, the mma GEMM's grid; 256: 4
// warpgroups, 512 threads, each staged activation tile feeding twice the rows). C16: the
// activations come in the c16 order (gemv_epilogue.h c16_pos) and go to shared memory by
// cp.async as they are (one 16-byte chunk = one core row), each k core column padded by 16
// bytes so that the 16 chunks of a pair row's step land in 8 distinct bank groups.
template <u32 TP, bool SPLIT, u32 MW = 128u, bool C16 = false>
struct WgShape {
  static constexpr u32 NT = 2u * MW;               // threads: one warp per 16 weight rows
  static constexpr u32 SLOTS = 3u;
  static constexpr u32 KC = TP * 16u + (C16 ? 16u : 0u);  // bytes of one k core column (TP core rows)
  static constexpr u32 TILE = 16u * KC;            // one array of a slot: the step's 128 k
  static constexpr u32 STAGE = (SPLIT ? 2u : 1u) * TILE;
  static constexpr u32 PIPE = SLOTS * STAGE;
  static constexpr u32 LDC = MW + 1u;
  static constexpr u32 EPI = TP * LDC * 4u;
  static constexpr u32 SMEM = PIPE > EPI ? PIPE : EPI;
  static constexpr u32 ITEMS = (SPLIT ? 2u : 1u) * TP * 4u;  // (array, pair, word) per step
  static constexpr u32 NI = (ITEMS + NT - 1u) / NT;
  static constexpr u32 CITEMS = (SPLIT ? 2u : 1u) * TP * 16u;  // C16: (array, pair, chunk) per step
  static constexpr u32 CN = (CITEMS + NT - 1u) / NT;
  static constexpr u32 ND = TP / 2u;                 // f32 accumulators per thread
  static constexpr u32 WD = 1u;                      // weight steps in flight (registers)
  static_assert(TP == 16u || TP == 32u || TP == 64u, "pair tiles (wgmma n16 / n32 / n64)");
  static_assert(MW == 128u || MW == 256u, "two or four warpgroups");
  static_assert((TP * 4u) % 32u == 0u, "a warp's items lie in one array");
  static_assert(SMEM <= 227u * 1024u, "sm_90's per-block limit");
};

template <u32 TP, bool SPLIT, u32 MW, bool C16>
MX_DEVICE void gemm_wg_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                            const u16* xh, const u16* xl, const u32* wcodes, const u8* wscales,
                            u32* out, const float* bias, const float* topw) {
  typedef WgShape<TP, SPLIT, MW, C16> S;
  typedef MmW<1u> W;
  if (dynamic_smem_bytes() < S::SMEM) __builtin_trap();
  MX_SHARED u64 xoff[TP];
  MX_SHARED u32 rowmax[TP * (MW / 64u)];
  unsigned char* ring = mm_dsmem;
  float* sC = (float*)mm_dsmem;
  u32 tid = tid_x(), lane = tid % 32u, warp = tid / 32u, g = lane >> 2, t = lane & 3u;
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_y(), &e, &start, &cnt)) return;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u, steps = (kblocks + 3u) / 4u;
  u32 nrows = is1 ? 2u * inter : h;
  u32 jb = is1 ? bid_x() * (MW / 2u) : bid_x() * MW;
  mm_tile_rows<TP, MW / 64u, S::NT>(p, is1, pair_of_row, start, cnt, K, xoff, rowmax);
  // This lane's weight rows: tile rows 16 warp + g and + 8 (gemm_mma_body with FM = 1).
  const Nv4Rows lay = nv4_rows(p.wrows, nrows, kblocks);
  const u32* wce = wcodes + e * lay.es * 4u;
  const u8* wse = wscales + e * lay.es;
  u32 wb[2];
#pragma unroll
  for (u32 i = 0; i < 2u; ++i) wb[i] = mm_weight_row(p, is1, lay, 16u * warp + g + 8u * i, jb, MW / 2u, nrows);
  sync_threads();
  // Staging item n of this thread: i = tid + 256 n < ITEMS; array i / (4 TP), and within it
  // (j = i % (4 TP)) pair 8 (j / 32) + j % 8, word (j / 8) % 4.
  uint4v stg[S::NI][4];
  auto sload = [&](u32 st) __attribute__((always_inline)) {
#pragma unroll
    for (u32 n = 0; n < S::NI; ++n) {
      u32 i = tid + S::NT * n;
      u32 j = i % (4u * TP), r = 8u * (j / 32u) + j % 8u, w = (j / 8u) % 4u;
      const u16* src = (i >= 4u * TP) ? xl : xh;
      u64 xo = i < S::ITEMS ? xoff[r] : ~0ull;
#pragma unroll
      for (u32 q = 0; q < 4u; ++q) {
        bool ok = xo != ~0ull && 4u * st + q < kblocks;
        uint4v z = {0u, 0u, 0u, 0u};
        stg[n][q] = ok ? wg_ld16(src + xo + (u64)st * MM_BK + 32u * q + 8u * w) : z;
      }
    }
  };
  auto sstore = [&](u32 st) __attribute__((always_inline)) {
    unsigned char* base = ring + (st % S::SLOTS) * S::STAGE;
#pragma unroll
    for (u32 n = 0; n < S::NI; ++n) {
      u32 i = tid + S::NT * n;
      if (i < S::ITEMS) {
        u32 j = i % (4u * TP), r = 8u * (j / 32u) + j % 8u, w = (j / 8u) % 4u;
        unsigned char* d = base + (i / (4u * TP)) * S::TILE + 4u * w * S::KC + r * 16u;
        wg_sts128(d, stg[n][0].x, stg[n][1].x, stg[n][2].x, stg[n][3].x);
        wg_sts128(d + S::KC, stg[n][0].y, stg[n][1].y, stg[n][2].y, stg[n][3].y);
        wg_sts128(d + 2u * S::KC, stg[n][0].z, stg[n][1].z, stg[n][2].z, stg[n][3].z);
        wg_sts128(d + 3u * S::KC, stg[n][0].w, stg[n][1].w, stg[n][2].w, stg[n][3].w);
      }
    }
  };
  // C16: step st's chunks into their slot by cp.async (the caller commits): item i = (array,
  // pair r, chunk kc), kc = i % 16 (16 lanes read a pair's 256 bytes; 8 lanes write 8 bank
  // groups); zeros past the tile's pairs. The last step of K % 128 != 0 (kb < 4 blocks,
  // chunks of kb words) goes word by word, zeros for the words of blocks past K.
  auto cissue = [&](u32 st) __attribute__((always_inline)) {
    unsigned char* base = ring + (st % S::SLOTS) * S::STAGE;
    u32 kb = c16_words(st, K);
#pragma unroll
    for (u32 n = 0; n < S::CN; ++n) {
      u32 i = tid + S::NT * n;
      if (S::CITEMS % S::NT == 0u || i < S::CITEMS) {
        u32 kc = i % 16u, r = (i / 16u) % TP;
        const u16* src = i >= 16u * TP ? xl : xh;
        unsigned char* d = base + (i / (16u * TP)) * S::TILE + kc * S::KC + r * 16u;
        u64 xo = xoff[r];
        bool v = xo != ~0ull;
        const u16* sp = src + (v ? xo + c16_chunk(st, kc, K) : 0ull);
        if (kb == 4u) {
          copy16_async(d, sp, v);
        } else {
#pragma unroll
          for (u32 q = 0; q < 4u; ++q) {
            bool ok = v && q < kb;
            copy4_async(d + 4u * q, ok ? sp + 2u * q : src, ok);
          }
        }
      }
    }
  };
  // Step st's weights of this lane (zero codes and scale 127 past the matrix or K: +0).
  auto fetch = [&](u32 st, W& r)
                   __attribute__((always_inline)) { mm_fetch<1u>(r, wb, st, t, kblocks, lay.bq, wce, wse); };
  float d[S::ND];
#pragma unroll
  for (u32 c = 0; c < S::ND; ++c) d[c] = 0.0f;
  const u32 ring_addr = wg_smem(ring);
  // One K step's MMAs on weights wr (gemm_mma_body's decode; TWO: the two-multiply path).
  auto step = [&](u32 s, const W& wr, auto two) __attribute__((always_inline)) {
    constexpr bool TWO = decltype(two)::value;
    u32 m1[2], m2[2];
#pragma unroll
    for (u32 i = 0; i < 2u; ++i) mm_mults<TWO>(wr.s[i], m1[i], m2[i]);
    auto dec = [&](u32 v, u32 i, auto jc) __attribute__((always_inline)) -> u32 {
      return mm_dec<TWO, decltype(jc)::value>(v, m1[i], m2[i]);
    };
    const u32 slot = ring_addr + (s % S::SLOTS) * S::STAGE;
#pragma unroll
    for (u32 w = 0; w < 4u; ++w) {
      u32 a0[4], a1[4];
      a0[0] = dec(wr.w[0][w], 0u, MmU<0>());
      a0[1] = dec(wr.w[1][w], 1u, MmU<0>());
      a0[2] = dec(wr.w[0][w], 0u, MmU<1>());
      a0[3] = dec(wr.w[1][w], 1u, MmU<1>());
      a1[0] = dec(wr.w[0][w], 0u, MmU<2>());
      a1[1] = dec(wr.w[1][w], 1u, MmU<2>());
      a1[2] = dec(wr.w[0][w], 0u, MmU<3>());
      a1[3] = dec(wr.w[1][w], 1u, MmU<3>());
#pragma unroll
      for (u32 c = 0; c < 4u; ++c) {
        wg_reg(a0[c]);
        wg_reg(a1[c]);
      }
      wg_fence();
      // MMA q = 2w + h: k cores 2q, 2q + 1 of the slot's arrays.
      const u32 q0 = slot + 4u * w * S::KC;
      constexpr u32 site = TWO ? 4u : 0u;
      wgmma_bf16<TP>(d, a0, wg_desc(q0, S::KC, 128u), site);
      if (SPLIT) wgmma_bf16<TP>(d, a0, wg_desc(q0 + S::TILE, S::KC, 128u), site + 1u);
      wgmma_bf16<TP>(d, a1, wg_desc(q0 + 2u * S::KC, S::KC, 128u), site + 2u);
      if (SPLIT) wgmma_bf16<TP>(d, a1, wg_desc(q0 + 2u * S::KC + S::TILE, S::KC, 128u), site + 3u);
      wg_commit();
      wg_wait<1>();
    }
  };
  // Prologue: step 0's activations in slot 0, step 1's in registers, the weights WD ahead.
  constexpr u32 R = S::WD + 1u;
  W wr[R];
#pragma unroll
  for (u32 dd = 0; dd < S::WD; ++dd)
    if (dd < steps) fetch(dd, wr[dd]);
  if constexpr (C16) {
    cissue(0u);
    copy_commit();
    copy_wait_all();
  } else {
    sload(0u);
    sstore(0u);
    if (1u < steps) sload(1u);
  }
  wg_fence_proxy();
  // Which decode a step runs is decided for the whole block (wgmma is .aligned over the
  // warpgroup: its warps must run the same instructions, so no warp may branch on its own
  // scales), by the barrier that ends the step before it (bar.red.or).
  auto big_of = [&](const W& r) __attribute__((always_inline)) { return r.s[0] > 128u || r.s[1] > 128u; };
  bool two = mm_block_any(steps > 0u && big_of(wr[0]));
  for (u32 s0 = 0; s0 < steps; s0 += R) {
#pragma unroll
    for (u32 dd = 0; dd < R; ++dd) {
      u32 s = s0 + dd;
      if (s < steps) {
        if (s + S::WD < steps) fetch(s + S::WD, wr[(dd + S::WD) % R]);
        // C16: step s + 1's copies into its slot (last read by step s - 2, which every
        // warpgroup finished before the barrier that ended step s - 1), in flight during
        // step s's MMAs.
        if constexpr (C16) {
          if (s + 1u < steps) cissue(s + 1u);
          copy_commit();
        }
        if (two)
          step(s, wr[dd], MmB<true>());
        else
          step(s, wr[dd], MmB<false>());
        if constexpr (C16) {
          copy_wait_all();
        } else {
          // Step s + 1's activations into its slot (the same slot rule), step s + 2's loads.
          if (s + 1u < steps) sstore(s + 1u);
          if (s + 2u < steps) sload(s + 2u);
        }
        wg_fence_proxy();
        two = mm_block_any(s + 1u < steps && big_of(wr[(dd + 1u) % R]));
      }
    }
  }
  wg_wait<0>();
#pragma unroll
  for (u32 c = 0; c < S::ND; ++c) wg_reg(d[c]);
  sync_threads();  // every warpgroup is done with the ring: the epilogue tile overwrites it
#pragma unroll
  for (u32 j = 0; j < TP / 8u; ++j)
#pragma unroll
    for (u32 c = 0; c < 4u; ++c)
      sC[(8u * j + 2u * t + (c & 1u)) * S::LDC + 16u * warp + g + (c >= 2u ? 8u : 0u)] = d[4u * j + c];
  sync_threads();
  gemm_epilogue<TP, MW, S::NT, true>(p, is1, e, start, cnt, jb, sC, rowmax, pair_of_row, out, bias, topw);
}

// The split kernel (weight-only schemes): tiles whose activation rows are all bf16-representable
// run the hi-only body (gemm_mma_split's lo skip, bit-exact for the same reason).
template <u32 TP, u32 MW, bool C16>
MX_DEVICE void gemm_wg_split(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                             const u16* xh, const u16* xl, const u32* wcodes, const u8* wscales,
                             u32* out, const float* bias, const float* topw) {
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_y(), &e, &start, &cnt)) return;
  u32 K = is1 ? p.hidden : p.inter, rows = is1 ? p.m : p.m * p.top_k;
  const u32* lo_rows = (const u32*)(xl + (u64)rows * K);
  bool nz = false;
  for (u32 r = tid_x(); r < cnt; r += 2u * MW)
    nz = nz || lo_rows[is1 ? pair_of_row[start + r] / p.top_k : start + r] != 0u;
  if (!mm_block_any(nz))
    gemm_wg_body<TP, false, MW, C16>(p, is1, pair_of_row, tiles, xh, xl, wcodes, wscales, out, bias, topw);
  else
    gemm_wg_body<TP, true, MW, C16>(p, is1, pair_of_row, tiles, xh, xl, wcodes, wscales, out, bias, topw);
}

// moe_gemm{1,2}_mma_t<TP>[_split]<VS>_cb4 and their dynamic shared memory (the mma GEMM's naming:
// variant "wg256" of MXMOE_HIP_MMA_VARIANT, src/backend/hip/choice/gemm.rs: MW = 256, 512
// threads, grid x over 256-row blocks). MW = 128 (the mma GEMM's grid, "wg") was measured
// slower than mma.sync everywhere on the H100 (gpt-oss-120b 2048 tokens 7.0 vs 4.0 ms,
// DeepSeek-R1 9.4 vs 8.6; docs/h100-2026-12-06s12-wgmma), as session 9's versions were on
// the H200 (docs/h200-2026-12-01s9-wg); no kernel is built with it.
#define GEMM_WG_VARIANT(TP, SPLIT, SFX, MW, C16, VS)                                             \
  extern "C" __attribute__((device, used)) const u32 moe_gemm_mma_t##TP##SFX##VS##_cb4_smem =   \
      WgShape<TP, SPLIT, MW, C16>::SMEM;                                                        \
  MX_KERNEL_OCC(2u * MW, 256u / MW) void moe_gemm1_mma_t##TP##SFX##VS##_cb4(GEMM_BF16_ARGS) {   \
    if (SPLIT)                                                                                  \
      gemm_wg_split<TP, MW, C16>(p, true, GEMM_BF16_PASS);                                      \
    else                                                                                        \
      gemm_wg_body<TP, false, MW, C16>(p, true, GEMM_BF16_PASS);                                \
  }                                                                                             \
  MX_KERNEL_OCC(2u * MW, 256u / MW) void moe_gemm2_mma_t##TP##SFX##VS##_cb4(GEMM_BF16_ARGS) {   \
    if (SPLIT)                                                                                  \
      gemm_wg_split<TP, MW, C16>(p, false, GEMM_BF16_PASS);                                     \
    else                                                                                        \
      gemm_wg_body<TP, false, MW, C16>(p, false, GEMM_BF16_PASS);                               \
  }
#define GEMM_WG_TILES(MW, C16, VS)                  \
  GEMM_WG_VARIANT(64, false, , MW, C16, VS)         \
  GEMM_WG_VARIANT(64, true, _split, MW, C16, VS)    \
  GEMM_WG_VARIANT(32, false, , MW, C16, VS)         \
  GEMM_WG_VARIANT(32, true, _split, MW, C16, VS)    \
  GEMM_WG_VARIANT(16, false, , MW, C16, VS)         \
  GEMM_WG_VARIANT(16, true, _split, MW, C16, VS)
GEMM_WG_TILES(256u, false, _wg256)
// wg256c (MXMOE_HIP_MMA_VARIANT=wg256c): the activations in the c16 order, copied by cp.async
// (gemm1's from mx_p8_to_c16, gemm2's written so by gemm1's epilogue, MoeParams xc2).
GEMM_WG_TILES(256u, true, _wg256c)

// The hidden states' bf16 hi (and lo, with the row flags after it) from mx_to_bf16_p8's order
// into the c16 order (gemv_epilogue.h c16_pos) for a wg256c gemm1: one thread per chunk (row,
// 128-k step s, chunk 4w + m), whose word t is word m of p8 group (t, w) (hip/gemm_wgmma.h's
// header: the same four 4-byte loads the wg256 kernel stages), written as one 16-byte store (kb
// words in a last step of kb < 4 blocks). Block y = row (grid y up to 65535 rows per launch:
// the host launches it in slices of rows, `row0`).
MX_KERNEL(256) void mx_p8_to_c16(const u16* hi, const u16* lo, u16* dhi, u16* dlo, u32 rows, u32 K, u32 row0) {
  u32 row = row0 + bid_y(), c = bid_x() * 256u + tid_x();
  u32 steps = (K + 127u) / 128u;
  if (row >= rows || c >= 16u * steps) return;
  u32 st = c / 16u, kc = c % 16u, w = kc / 4u, m = kc % 4u, kb = c16_words(st, K);
  u64 base = (u64)row * K;
  for (u32 a = 0; a < (lo ? 2u : 1u); ++a) {
    const u32* src = (const u32*)((a ? lo : hi) + base + 128u * st);
    u32* dst = (u32*)((a ? dlo : dhi) + base + c16_chunk(st, kc, K));
    u32 v[4];
#pragma unroll
    for (u32 t = 0; t < 4u; ++t) v[t] = t < kb ? src[16u * t + 4u * w + m] : 0u;
    if (kb == 4u) {
      uint4v q = {v[0], v[1], v[2], v[3]};
      *(uint4v*)dst = q;
    } else {
      for (u32 t = 0; t < kb; ++t) dst[t] = v[t];
    }
  }
  if (lo && c == 0u) ((u32*)(dlo + (u64)rows * K))[row] = ((const u32*)(lo + (u64)rows * K))[row];
}

#endif  // MX_NV && __CUDA_ARCH_FEAT_SM90_ALL
