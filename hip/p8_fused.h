// p8_fused.h: NVIDIA only: mx_to_bf16_p8's layout written by other kernels, so that no
// conversion kernel runs: mx_qdq_lanes_p8 (the input QDQ), mx_route_wx_<NQ> and
// moe_route_lists_w{2,3}x_<NQ> (v6 routing with the hidden states' conversion). Included by
// hip/mxmoe.cu after gemm_mma.h (mm_warp_any); relies on quant.h (qdq_lane), gemv_epilogue.h
// (p8_pos), gemm_v1.h (bf16_bits_rne), lists.h (ListsShared), route_warp.h and route_lists_w3.h.
#pragma once

#if defined(MX_NV)
// Elements 8 gi .. 8 gi + 7 of x (row-major, rows of k values, k a multiple of 8) as
// mx_to_bf16_p8 writes them (gemm_mma.h; stored 0, 4, 1, 5, 2, 6, 3, 7: u32 word q = elements q
// and q + 4): hi and, with lo, the remainders (0 where hi is not finite). Returns the OR of the
// lo words (nonzero if some lo is not +0).
MX_DEVICE u32 p8_group(const float* x, u16* hi, u16* lo, u64 gi) {
  u64 base = 8u * gi;
  u32 hw[4], lw[4], nz = 0u;
#pragma unroll
  for (u32 q = 0; q < 4u; ++q) {
    float v0 = x[base + q], v1 = x[base + q + 4u];
    u32 h0 = bf16_bits_rne(v0), h1 = bf16_bits_rne(v1);
    hw[q] = h0 | (h1 << 16);
    u32 l0 = bf16_bits_rne((h0 & 0x7F80u) == 0x7F80u ? 0.0f : v0 - u2f(h0 << 16));
    u32 l1 = bf16_bits_rne((h1 & 0x7F80u) == 0x7F80u ? 0.0f : v1 - u2f(h1 << 16));
    lw[q] = l0 | (l1 << 16);
    nz |= lw[q];
  }
  uint4v hv = {hw[0], hw[1], hw[2], hw[3]};
  *(uint4v*)(hi + base) = hv;
  if (lo) {
    uint4v lv = {lw[0], lw[1], lw[2], lw[3]};
    *(uint4v*)(lo + base) = lv;
  }
  return nz;
}

// mx_qdq_lanes with its output as mx_to_bf16_p8 writes it for the matrix-core kernels (the
// input QDQ and the conversion in one pass): hi only, the bf16 (RNE, as the conversion) of the
// QDQ'd value, at element i's place (p8_pos; rows of k values, k a multiple of 32).
MX_KERNEL(256) void mx_qdq_lanes_p8(const u32* x, u16* hi, u32 n_blocks, u32 fmt, u32 mode) {
  u64 i = (u64)bid_x() * 256u + tid_x();
  if (i / 32u >= n_blocks) return;
  hi[p8_pos(i)] = (u16)bf16_bits_rne(u2f(qdq_lane(x, i, fmt, mode)));
}

// Row `row` of x (k values, k a multiple of 8) as mx_to_bf16_p8 writes it, by one warp: each
// lane takes groups of 8 (p8_group), and with lo the row's flag (1 if some lo is not +0; the u32s
// after the rows x k lo values). No barrier.
MX_DEVICE void p8_row_warp(const float* x, u16* hi, u16* lo, u32 row, u32 rows, u32 k, u32 lane) {
  u32 nz = 0u;
  for (u32 g = lane; g < k / 8u; g += 32u) nz |= p8_group(x, hi, lo, (u64)row * (k / 8u) + g);
  bool any = mm_warp_any(nz != 0u);
  if (lo && lane == 0u) ((u32*)(lo + (u64)rows * k))[row] = any ? 1u : 0u;
}

// v6's warp routing of more tokens than one block routes with their lists (mx_route_w_<NQ>)
// with the hidden states' bf16 conversion folded in, for weight-only schemes whose expert kernels
// take mx_to_bf16_p8's layout (the mma GEMM, the mmab GEMV): the warp that routes token t also
// converts its row of x (rows = tokens, k = hidden), so no conversion kernel runs. (The same
// fold into the few-token block moe_route_lists_w3_<NQ> made 16 gpt-oss tokens slower on the
// H200, 0.176 vs 0.170 ms: 8 warps converting 16 rows after routing take longer than the
// conversion kernel's 16 blocks; docs/h200-2026-12-01s7-fold.)
#define ROUTE_WARP_X_KERNELS(NQ)                                                                  \
  MX_KERNEL(128) void mx_route_wx_##NQ(RouteParams rp, const float* logits, const u32* bias,      \
                                       i32* ids, float* weights, const float* x, u16* xh,         \
                                       u16* xl, u32 k) {                                          \
    u32 t = bid_x() * 4u + (tid_x() >> 5);                                                        \
    if (t >= rp.m) return;                                                                        \
    route_warp_simple<NQ>(rp, t, tid_x() & 31u, logits, ids, weights);                            \
    p8_row_warp(x, xh, xl, t, rp.m, k, tid_x() & 31u);                                            \
  }
ROUTE_WARP_X_KERNELS(4)
ROUTE_WARP_X_KERNELS(8)
ROUTE_WARP_X_KERNELS(32)

// v6's fused few-token routing + lists (moe_route_lists_w2_<NQ>: one token, one warp;
// moe_route_lists_w3_<NQ>: up to MXMOE_HIP_FUSED_ROUTE tokens, 256 threads) with the hidden
// states' conversion to mx_to_bf16_p8's layout in blocks of their own, for the mmab GEMV: block
// 0 routes and builds the lists as the plain kernel does, blocks 1 .. n convert one group of 8
// values per thread (rows x k / 8 groups), on other multiprocessors at the same time; no row
// flags (the GEMV does not read them). (Folded into the routing block itself, after routing,
// the conversion made 16 gpt-oss tokens slower: docs/h200-2026-12-01s7-fold.)
MX_DEVICE bool p8_convert_block(u32 rows, u32 k, const float* x, u16* xh, u16* xl, u32 threads) {
  if (bid_x() == 0u) return false;
  u64 gi = (u64)(bid_x() - 1u) * threads + tid_x();
  if (gi < (u64)rows * (k / 8u)) p8_group(x, xh, xl, gi);
  return true;
}
#define ROUTE_LISTS_X(NQ)                                                                         \
  MX_KERNEL(32) void moe_route_lists_w2x_##NQ(RouteParams rp, MoeParams p, const float* logits,  \
                                              const u32* bias, i32* ids, float* weights,          \
                                              const i32* expert_map, u32* pair_of_row,             \
                                              i32* row_of_pair, u32* tiles, const float* x,        \
                                              u16* xh, u16* xl, u32 k) {                           \
    if (p8_convert_block(rp.m, k, x, xh, xl, 32u)) return;                                        \
    u32 lane = tid_x();                                                                           \
    i32 sel = route_warp_simple<NQ>(rp, 0u, lane, logits, ids, weights);                         \
    lists_one_token_warp(p, lane, rp.top_k, sel, expert_map, pair_of_row, row_of_pair, tiles);   \
  }                                                                                               \
  MX_KERNEL(256) void moe_route_lists_w3x_##NQ(RouteParams rp, MoeParams p, const float* logits, \
                                               const u32* bias, i32* ids, float* weights,         \
                                               const i32* expert_map, u32* pair_of_row,            \
                                               i32* row_of_pair, u32* tiles, const float* x,       \
                                               u16* xh, u16* xl, u32 k) {                          \
    MX_SHARED ListsShared ls;                                                                     \
    if (p8_convert_block(rp.m, k, x, xh, xl, 256u)) return;                                       \
    route_lists_w3_block<NQ>(rp, p, logits, ids, weights, expert_map, pair_of_row, row_of_pair,   \
                             tiles, ls);                                                          \
  }
ROUTE_LISTS_X(4)
ROUTE_LISTS_X(8)
ROUTE_LISTS_X(32)

// One token of a weight-only scheme with a softmax router (gpt-oss): gemv1 routes the token
// itself, so no route kernel runs before it (`moe_gemv1_mmab_rt_<NQ>[_split]_cb4`, replacing
// moe_route_lists_w2x_<NQ> + moe_gemv1_mmab[_split]_cb4). Every block: warp 0 routes the token
// and builds its lists (route_warp_simple, lists_one_token_warp: the same functions as w2x, so
// the same bits) into shared memory while warps 1..7 convert the hidden states to
// mx_to_bf16_p8's layout in shared memory (hi, then lo when SPLIT); one barrier; block (0, 0)
// copies the routing and the lists out for gemv2, the combine and the caller; then mmab's gemv1
// on the shared copies. Hidden sizes up to RT_MAX_K (the host checks).
#define RT_MAX_K 4096u
template <u32 NQ, bool SPLIT>
MX_DEVICE void gemv1_routed(const RouteParams& rp, const MoeParams& p, const float* logits,
                            i32* ids, float* weights, const i32* expert_map, u32* pair_of_row,
                            i32* row_of_pair, u32* tiles, const float* x, const u32* wcodes,
                            const u8* wscales, u32* out, const float* bias) {
  MX_SHARED u32 s_tiles[1u + 3u * 32u];
  MX_SHARED u32 s_por[32];
  MX_SHARED i32 s_rop[32];
  MX_SHARED i32 s_ids[32];
  MX_SHARED float s_w[32];
  MX_SHARED uint4v s_x[2u * RT_MAX_K / 8u];
  u32 tid = tid_x(), k = rp.top_k, hk = p.hidden;
  u16* xh = (u16*)s_x;
  if (tid < 32u) {
    i32 sel = route_warp_simple<NQ>(rp, 0u, tid, logits, s_ids, s_w);
    lists_one_token_warp(p, tid, k, sel, expert_map, s_por, s_rop, s_tiles);
  } else {
    for (u32 gi = tid - 32u; gi < hk / 8u; gi += GM_THREADS - 32u)
      p8_group(x, xh, SPLIT ? xh + hk : nullptr, gi);
  }
  sync_threads();
  if (bid_x() == 0u && bid_y() == 0u) {
    u32 nv = s_tiles[0];
    if (tid < k) {
      ids[tid] = s_ids[tid];
      weights[tid] = s_w[tid];
      row_of_pair[tid] = s_rop[tid];
    }
    if (tid < nv) pair_of_row[tid] = s_por[tid];
    if (tid < 1u + 3u * nv) tiles[tid] = s_tiles[tid];
  }
  gemv_mma_body<SPLIT, 2u, true>(p, true, s_por, s_tiles, (const float*)s_x, wcodes, wscales, out,
                                 bias, s_w, s_rop, nullptr, nullptr);
}
#define GEMV1_ROUTED_K(NQ, SPLIT, SFX)                                                            \
  MX_KERNEL_OCC(GM_THREADS, 3) void moe_gemv1_mmab_rt_##NQ##SFX##_cb4(                            \
      RouteParams rp, MoeParams p, const float* logits, i32* ids, float* weights,                 \
      const i32* expert_map, u32* pair_of_row, i32* row_of_pair, u32* tiles, const float* x,      \
      const u32* wcodes, const u8* wscales, u32* out, const float* bias) {                        \
    gemv1_routed<NQ, SPLIT>(rp, p, logits, ids, weights, expert_map, pair_of_row, row_of_pair,    \
                            tiles, x, wcodes, wscales, out, bias);                                \
  }
#define GEMV1_ROUTED(NQ)          \
  GEMV1_ROUTED_K(NQ, false, )     \
  GEMV1_ROUTED_K(NQ, true, _split)
GEMV1_ROUTED(4)
GEMV1_ROUTED(8)
GEMV1_ROUTED(32)
#endif
