// lists.h: the expert lists (shaders/moe_lists.wgsl: ListsShared, lists_body, moe_lists{,_v2})
// and decode's fused routing + lists v1 .. v5 (moe_route_lists{,_v2,_v3,_v4}, moe_route_lists_w1,
// moe_route_lists_w1g, lists_one_token). Included by hip/mxmoe.cu after moe_common.h (MoeParams);
// relies on route.h (RouteParams, RouteShared, route_token, route_scores, route_select_ranked,
// route_weights_serial) and exact_math.h (exact_div).
#pragma once

// lists: one 256-thread block (shaders/moe_lists.wgsl): per-expert row lists and the tile list.
struct ListsShared {
  u32 count[1024];
  u32 offset[1024];
  u32 scan_rows[256];
  u32 scan_tiles[256];
};

// FAST (v2): the prefix sums by a shuffle butterfly per 32 lanes and one barrier (the same
// integers as the 8-step Hillis-Steele scan, which takes 16 barriers).
template <bool FAST>
MX_DEVICE void lists_body(const MoeParams& p, const i32* topk_ids, const i32* expert_map,
                          u32* pair_of_row, i32* row_of_pair, u32* tiles, ListsShared& ls) {
  u32* count = ls.count;
  u32* offset = ls.offset;
  u32* scan_rows = ls.scan_rows;
  u32* scan_tiles = ls.scan_tiles;
  u32 lid = tid_x();
  u32 el = p.e_local, na = p.m * p.top_k, tm = p.tile_m;
  for (u32 e = lid; e < 1024u; e += 256u) count[e] = 0u;
  sync_threads();
  for (u32 a = lid; a < na; a += 256u) {
    i32 id = topk_ids[a];
    i32 l = p.has_map ? expert_map[id] : id;
    if (l >= 0) atomic_add_u32(&count[l], 1u);
  }
  sync_threads();
  u32 e0 = lid * 4u, rows_here = 0u, tiles_here = 0u;
  for (u32 e = e0; e < umin(e0 + 4u, el); ++e) {
    rows_here += count[e];
    tiles_here += (count[e] + tm - 1u) / tm;
  }
  u32 incl_rows, incl_tiles, all_tiles;
  if (FAST) {
    // Butterfly scan: after step m, tr / tt are the sums over this lane's aligned run of 2m
    // lanes and pr / pt the inclusive prefix within it (the partner run lies below when the
    // lane's bit m is set).
    u32 pr = rows_here, pt = tiles_here, tr = rows_here, tt = tiles_here;
#pragma unroll
    for (u32 m = 1u; m < 32u; m <<= 1) {
      u32 orr = f2u(shfl_xor(u2f(tr), m)), ot = f2u(shfl_xor(u2f(tt), m));
      if ((lid & m) != 0u) {
        pr += orr;
        pt += ot;
      }
      tr += orr;
      tt += ot;
    }
    if ((lid & 31u) == 0u) {
      scan_rows[lid >> 5] = tr;
      scan_tiles[lid >> 5] = tt;
    }
    sync_threads();
    all_tiles = 0u;
    for (u32 w = 0u; w < 8u; ++w) {
      if (w < (lid >> 5)) {
        pr += scan_rows[w];
        pt += scan_tiles[w];
      }
      all_tiles += scan_tiles[w];
    }
    incl_rows = pr;
    incl_tiles = pt;
  } else {
    scan_rows[lid] = rows_here;
    scan_tiles[lid] = tiles_here;
    for (u32 s = 1u; s < 256u; s <<= 1) {
      sync_threads();
      u32 r = 0u, t = 0u;
      if (lid >= s) {
        r = scan_rows[lid - s];
        t = scan_tiles[lid - s];
      }
      sync_threads();
      scan_rows[lid] += r;
      scan_tiles[lid] += t;
    }
    sync_threads();
    incl_rows = scan_rows[lid];
    incl_tiles = scan_tiles[lid];
    all_tiles = scan_tiles[255];
  }
  u32 acc = incl_rows - rows_here, nt = incl_tiles - tiles_here;
  for (u32 e = e0; e < umin(e0 + 4u, el); ++e) {
    u32 c = count[e];
    offset[e] = acc;
    for (u32 s = 0u; s < c; s += tm) {
      tiles[1u + 3u * nt] = e;
      tiles[2u + 3u * nt] = acc + s;
      tiles[3u + 3u * nt] = acc + umin(s + tm, c);
      nt++;
    }
    acc += c;
  }
  if (lid == 255u) tiles[0] = all_tiles;
  sync_threads();
  for (u32 e = e0; e < umin(e0 + 4u, el); ++e) count[e] = 0u;
  sync_threads();
  for (u32 a = lid; a < na; a += 256u) {
    i32 id = topk_ids[a];
    i32 l = p.has_map ? expert_map[id] : id;
    if (l >= 0) {
      u32 r = offset[l] + atomic_add_u32(&count[l], 1u);
      pair_of_row[r] = a;
      row_of_pair[a] = (i32)r;
    } else {
      row_of_pair[a] = -1;
    }
  }
}

// The lists kernel and, for decode, routing + lists in one 256-thread block (one launch fewer;
// the routing threads are mx_route's 64, so the same bits: the (few) tokens are routed one
// after the other, then the lists). Variants: v1 (plain), v2 (FAST: shuffles), v3 (v2 routing
// with the plain softmax router specialised, route_token's second template argument).
#define LISTS_KERNEL(NAME, FAST)                                                                  \
  MX_KERNEL(256) void NAME(MoeParams p, const i32* topk_ids, const i32* expert_map,            \
                           u32* pair_of_row, i32* row_of_pair, u32* tiles) {                    \
    MX_SHARED ListsShared ls;                                                                   \
    lists_body<FAST>(p, topk_ids, expert_map, pair_of_row, row_of_pair, tiles, ls);             \
  }
#define ROUTE_LISTS_KERNEL(NAME, FAST, ...)                                                       \
  MX_KERNEL(256) void NAME(RouteParams rp, MoeParams p, const float* logits, const u32* bias,  \
                           i32* ids, float* weights, const i32* expert_map, u32* pair_of_row,   \
                           i32* row_of_pair, u32* tiles) {                                      \
    MX_SHARED RouteShared s;                                                                    \
    MX_SHARED ListsShared ls;                                                                   \
    for (u32 t = 0; t < rp.m; ++t)                                                              \
      route_token<__VA_ARGS__>(rp, t, tid_x(), logits, bias, ids, weights, s);                  \
    lists_body<FAST>(p, ids, expert_map, pair_of_row, row_of_pair, tiles, ls);                  \
  }
LISTS_KERNEL(moe_lists, false)
LISTS_KERNEL(moe_lists_v2, true)
ROUTE_LISTS_KERNEL(moe_route_lists, false, false)
ROUTE_LISTS_KERNEL(moe_route_lists_v2, true, true)
ROUTE_LISTS_KERNEL(moe_route_lists_v3, true, true, true)
ROUTE_LISTS_KERNEL(moe_route_lists_v4, true, true, false, 256u)


// The lists of ONE token whose k experts (s.sel) are distinct: each local expert has at most
// one pair, the row of slot j is the number of valid slots with a lower local expert (lists_body
// orders the rows by local expert), and each valid slot is one tile. Threads < k do the work
// (s.bi as scratch); every thread of the block calls it (barriers).
MX_DEVICE void lists_one_token(const MoeParams& p, u32 lid, u32 k, const i32* expert_map,
                               u32* pair_of_row, i32* row_of_pair, u32* tiles, RouteShared& s) {
  i32 l = -1;
  if (lid < k) {
    i32 id = (i32)s.sel[lid];
    l = p.has_map ? expert_map[id] : id;
    s.bi[lid] = l;
  }
  sync_threads();
  if (lid < k) {
    u32 r = 0u, nv = 0u;
    for (u32 j = 0; j < k; ++j) {
      i32 o = s.bi[j];
      if (o >= 0) {
        nv++;
        if (o < l) r++;
      }
    }
    if (l >= 0) {
      pair_of_row[r] = lid;
      row_of_pair[lid] = (i32)r;
      tiles[1u + 3u * r] = (u32)l;
      tiles[2u + 3u * r] = r;
      tiles[3u + 3u * r] = r + 1u;
    } else {
      row_of_pair[lid] = -1;
    }
    if (lid == 0u) tiles[0] = nv;
  }
}

// Decode's routing + lists for ONE token and a plain softmax or top-k softmax router (no
// correction bias, no groups: the host checks, as for v3), in one warp (MXMOE_HIP_ROUTE=v4):
// no block-wide barriers in the arg-max rounds, no prefix sums. moe_route_lists_v3 spends
// ~7 us of a ~58 us gpt-oss forward in one 256-thread block, mostly waiting at barriers
// (docs/h200-2026-12-01-session4). The same bits as v3:
//   - the k arg-max rounds pick the greatest key (ties to the lower index: a total order, so any
//     reduction order finds the same winner), each lane scanning experts lane + 32 q in
//     increasing order as route_token's threads do;
//   - the softmax sum is route_token's: 64 partial sums (thread v: experts v, v + 64, ... in
//     order; lane l holds v = l and v = l + 32) reduced by the same tree (v + 32, then 16, 8,
//     .. 1: a butterfly gives lane 0 exactly the tree's sum; a + b == b + a in IEEE);
//   - the weights by route_weights_serial itself (lane 0, slot order);
//   - the lists of one token: its k experts are distinct, so each local expert has at most one
//     pair, the row of slot j is the number of valid slots with a lower local expert (lists_body
//     orders the rows by local expert), and each valid slot is one tile.
MX_KERNEL(32) void moe_route_lists_w1(RouteParams rp, MoeParams p, const float* logits,
                                      const u32* bias, i32* ids, float* weights,
                                      const i32* expert_map, u32* pair_of_row, i32* row_of_pair,
                                      u32* tiles) {
  MX_SHARED RouteShared s;
  u32 lane = tid_x(), e = rp.n_experts, k = rp.top_k;
  for (u32 i = lane; i < e; i += 32u) s.lg[i] = logits[i];
  sync_threads();
  u32 taken = 0u;  // bit q: expert lane + 32 q is chosen (e <= 1024)
  i32 first = -1;
  for (u32 j = 0; j < k; ++j) {
    i32 bi = -1;
    float bv = 0.0f;
    u32 q = 0u;
    for (u32 i = lane; i < e; i += 32u, ++q) {
      if (((taken >> q) & 1u) == 0u && (bi < 0 || key_gt(s.lg[i], bv))) {
        bi = (i32)i;
        bv = s.lg[i];
      }
    }
    warp_best(bv, bi);
    if (bi >= 0 && ((u32)bi & 31u) == lane) taken |= 1u << ((u32)bi >> 5);
    if (j == 0u) first = bi;
    if (lane == 0u) s.sel[j] = (u32)bi;
  }
  float mx = s.lg[first];
  if (rp.scoring == SCORING_SOFTMAX) {
    float lo = 0.0f, hi = 0.0f;
    for (u32 i = lane; i < e; i += 64u) lo += fast_exp(s.lg[i] - mx);
    for (u32 i = lane + 32u; i < e; i += 64u) hi += fast_exp(s.lg[i] - mx);
    float v = lo + hi;
#pragma unroll
    for (u32 m = 16u; m > 0u; m >>= 1) v = v + shfl_xor(v, m);
    if (lane == 0u) s.sum[0] = v;
  }
  if (lane == 0u) route_weights_serial(rp, 0u, s, mx, u2f(rp.scaling), ids, weights);
  sync_threads();
  lists_one_token(p, lane, k, expert_map, pair_of_row, row_of_pair, tiles, s);
}

// Decode's routing + lists for ONE token and any router (MXMOE_HIP_ROUTE=v5; meant for the
// routers with exact scores, DeepSeek's sigmoid with correction bias and groups, whose
// moe_route_lists_v4 takes ~25 us of a ~140 us forward at 1 token): all 256 threads compute the
// scores (route_scores, as v4) and select the groups and experts by rank (route_select_ranked,
// as v4; until session 6 one warp ran the group and expert rounds here, which ncu measured at
// 38 k cycles with 7 of 8 warps waiting), then ONE warp computes the selected scores, their sum
// in slot order (lane 0's order through shfl_idx, as route_token's lid 0 loop) and exact
// division, or route_weights_serial; then the lists of one token. The same bits as
// route_token.
MX_KERNEL(256) void moe_route_lists_w1g(RouteParams rp, MoeParams p, const float* logits,
                                       const u32* bias, i32* ids, float* weights,
                                       const i32* expert_map, u32* pair_of_row, i32* row_of_pair,
                                       u32* tiles) {
  MX_SHARED RouteShared s;
  u32 lid = tid_x(), e = rp.n_experts, k = rp.top_k;
  route_scores<false, 256u>(rp, 0u, lid, logits, bias, s);
  const float* lg = s.lg;
  bool exact_softmax = rp.has_bias != 0u && rp.scoring == SCORING_SOFTMAX;
  route_select_ranked(rp, lid, 256u, s);
  if (lid < 32u) {
    u32 lane = lid;
    i32 first = (i32)s.sel[0], mysel = lane < k ? (i32)s.sel[lane] : -1;
    float mx = lg[first];
    if (rp.scoring == SCORING_SOFTMAX && !exact_softmax) {
      float lo = 0.0f, hi = 0.0f;
      for (u32 i = lane; i < e; i += 64u) lo += fast_exp(lg[i] - mx);
      for (u32 i = lane + 32u; i < e; i += 64u) hi += fast_exp(lg[i] - mx);
      float v = lo + hi;
#pragma unroll
      for (u32 m = 16u; m > 0u; m >>= 1) v = v + shfl_xor(v, m);
      if (lane == 0u) s.sum[0] = v;
    }
    float scaling = u2f(rp.scaling);
    if (rp.scoring == SCORING_SIGMOID || exact_softmax) {
      u32 sc = lane < k ? r_score(s, rp, (u32)mysel) : 0u;
      float total = 0.0f;
      if (rp.renormalize != 0u)
        for (u32 j = 0; j < k; ++j) total = total + shfl_idx(u2f(sc), j);
      if (lane < k) {
        u32 w = sc;
        if (rp.renormalize != 0u) w = exact_div(w, f2u(total));
        ids[lane] = mysel;
        weights[lane] = u2f(w) * scaling;
      }
    } else if (lane == 0u) {
      route_weights_serial(rp, 0u, s, mx, scaling, ids, weights);
    }
  }
  sync_threads();
  lists_one_token(p, lid, k, expert_map, pair_of_row, row_of_pair, tiles, s);
}
