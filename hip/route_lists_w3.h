// route_lists_w3.h: v6's routing + lists of a few tokens in one block (route_lists_w3_block,
// moe_route_lists_w3_<NQ>). Included by hip/mxmoe.cu right after route_warp.h, whose
// route_warp_simple it runs; relies on lists.h (ListsShared, lists_body). p8_fused.h reuses
// route_lists_w3_block.
#pragma once

// v6's routing + lists of a few tokens (2 .. MXMOE_HIP_FUSED_ROUTE, default 16) with a (top-k)
// softmax router in one 256-thread block: warp w routes tokens w, w + 8, .. (route_warp_simple,
// no barrier), then the block builds the lists from the ids it wrote (lists_body; the barrier
// orders the block's global writes before its reads, as moe_route_lists does).
// The block's work, shared with moe_route_lists_w3x_<NQ> (its routing block).
template <u32 NQ>
MX_DEVICE void route_lists_w3_block(const RouteParams& rp, const MoeParams& p, const float* logits,
                                    i32* ids, float* weights, const i32* expert_map,
                                    u32* pair_of_row, i32* row_of_pair, u32* tiles,
                                    ListsShared& ls) {
  for (u32 t = tid_x() >> 5; t < rp.m; t += 8u)
    route_warp_simple<NQ>(rp, t, tid_x() & 31u, logits, ids, weights);
  sync_threads();
  lists_body<true>(p, ids, expert_map, pair_of_row, row_of_pair, tiles, ls);
}
#define ROUTE_LISTS_W3(NQ)                                                                        \
  MX_KERNEL(256) void moe_route_lists_w3_##NQ(RouteParams rp, MoeParams p, const float* logits,  \
                                              const u32* bias, i32* ids, float* weights,          \
                                              const i32* expert_map, u32* pair_of_row,             \
                                              i32* row_of_pair, u32* tiles) {                      \
    MX_SHARED ListsShared ls;                                                                     \
    route_lists_w3_block<NQ>(rp, p, logits, ids, weights, expert_map, pair_of_row, row_of_pair,   \
                             tiles, ls);                                                          \
  }
ROUTE_LISTS_W3(4)
ROUTE_LISTS_W3(8)
ROUTE_LISTS_W3(32)
