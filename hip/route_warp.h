// route_warp.h: routing by warps, without block barriers in the selection (MXMOE_HIP_ROUTE=v6,
// the default). Included by hip/mxmoe.cu after route.h and lists.h (RouteParams, key_ord;
// MoeParams from moe_common.h, the exact scores of exact_math.h) and by the CPU emulation
// hip/test/route_emu.cpp, which runs every kernel here against a port of src/moe/route.rs.
//
// The selection is route_token's (src/moe/route.rs top_k_indices): k rounds, each taking the
// greatest key (key_ord: IEEE order, -0 == +0) among the candidates left, ties to the lower
// expert. A lane holds the keys of experts lane + 32 q (q < NQ) in registers; a round is the
// lane's best by a fixed tree over q (the lower q, so the lower expert, on ties), the warp's
// greatest key by one reduction (redux.sync.max.u32 on sm_80+) and the lowest expert holding
// it by a second (redux.sync.min.u32): two reductions instead of a 5-step shuffle butterfly
// on (value, index) pairs. The order is total, so the winner is route_token's.
//
// The weights are computed in parallel, lane j for slot j, with the sums over the slots in
// slot order (every lane adds the k shuffled terms one after the other, as
// route_weights_serial's loop does): the same operations on the same operands, so the same
// bits. The selected logits come back from their keys (key_val): exact, except that both zeros
// give +0, which changes no result here: x - (+-0) = x and (+-0) - y = -y for nonzero operands,
// a difference of two zeros is a zero and exp(+-0) = 1 either way; exact_sigmoid(+-0) = 1/2.
#pragma once

// ---- warp reductions on u32 (all 32 lanes of the group take part and get the result) -------
#if defined(MX_NV) && __CUDA_ARCH__ >= 800 && !defined(MX_HOST_EMU)
MX_DEVICE u32 warp_max_u32(u32 v) {
  u32 r;
  asm volatile("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
  return r;
}
MX_DEVICE u32 warp_min_u32(u32 v) {
  u32 r;
  asm volatile("redux.sync.min.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
  return r;
}
MX_DEVICE u32 warp_or_u32(u32 v) {
  u32 r;
  asm volatile("redux.sync.or.b32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
  return r;
}
#else
// AMD (a 32-lane half of the wavefront, as shfl_xor) and the CPU emulations: a butterfly.
MX_DEVICE u32 warp_max_u32(u32 v) {
  for (u32 m = 16u; m > 0u; m >>= 1) v = umax(v, f2u(shfl_xor(u2f(v), m)));
  return v;
}
MX_DEVICE u32 warp_min_u32(u32 v) {
  for (u32 m = 16u; m > 0u; m >>= 1) v = umin(v, f2u(shfl_xor(u2f(v), m)));
  return v;
}
MX_DEVICE u32 warp_or_u32(u32 v) {
  for (u32 m = 16u; m > 0u; m >>= 1) v = v | f2u(shfl_xor(u2f(v), m));
  return v;
}
#endif
MX_DEVICE u32 shfl_idx_u32(u32 v, u32 src) { return f2u(shfl_idx(u2f(v), src)); }

// key_ord's inverse: the float whose key is k (both zeros have the key of +0, which it gives).
MX_DEVICE float key_val(u32 k) {
  return u2f((k & 0x80000000u) != 0u ? (k & 0x7FFFFFFFu) : ~k);
}

// The lane's best key among key[0..NQ) and its q: a fixed tree; on equal keys the lower q (the
// lower expert) stays. Key 0 is no candidate (key_ord never gives 0 for a non-NaN value).
template <u32 NQ>
MX_DEVICE void lane_best(const u32 (&key)[NQ], u32& bk, u32& bq) {
  u32 kk[NQ], qq[NQ];
#pragma unroll
  for (u32 q = 0; q < NQ; ++q) {
    kk[q] = key[q];
    qq[q] = q;
  }
#pragma unroll
  for (u32 st = 1u; st < NQ; st <<= 1)
#pragma unroll
    for (u32 q = 0; q + st < NQ; q += 2u * st)
      if (kk[q + st] > kk[q]) {
        kk[q] = kk[q + st];
        qq[q] = qq[q + st];
      }
  bk = kk[0];
  bq = qq[0];
}

// k (<= 32) rounds over the warp's keys (lane's key[q]: expert lane + 32 q, 0 = no candidate;
// the winners are cleared). Lane j < k gets slot j's expert (sel; -1 when no candidate was left,
// as route_token leaves it) and key (selk); every lane gets slot 0's key (key0).
template <u32 NQ>
MX_DEVICE void warp_select(u32 (&key)[NQ], u32 lane, u32 k, i32& sel, u32& selk, u32& key0) {
  sel = -1;
  selk = 0u;
  key0 = 0u;
  for (u32 j = 0; j < k; ++j) {
    u32 bk, bq;
    lane_best<NQ>(key, bk, bq);
    u32 mk = warp_max_u32(bk);
    u32 w = warp_min_u32(bk == mk && mk != 0u ? lane + 32u * bq : 0xFFFFFFFFu);
    if (w != 0xFFFFFFFFu && (w & 31u) == lane) {
#pragma unroll
      for (u32 q = 0; q < NQ; ++q)
        if (q == (w >> 5)) key[q] = 0u;
    }
    if (j == lane) {
      sel = w == 0xFFFFFFFFu ? -1 : (i32)w;
      selk = mk;
    }
    if (j == 0u) key0 = mk;
  }
}

// Route token t with a softmax or top-k softmax router without a correction bias or groups
// (the host checks; n_experts <= 32 NQ, top_k <= 32) in one warp: ids and weights of the
// token, and lane j's slot expert (returned). The same bits as route_token<.., SIMPLE> and
// moe_route_lists_w1: the softmax sum is theirs (64 partial sums, thread v: experts v, v + 64,
// ..; lane l holds v = l and v = l + 32; then the tree v + 32, 16, .., 1 as a butterfly, whose
// lanes all get lane 0's sum), the weights route_weights_serial's expressions.
template <u32 NQ>
MX_DEVICE i32 route_warp_simple(const RouteParams& rp, u32 t, u32 lane, const float* logits,
                                i32* ids, float* weights) {
  u32 e = rp.n_experts, k = rp.top_k;
  const float* lgt = logits + (u64)t * e;
  float v[NQ];
  u32 key[NQ];
#pragma unroll
  for (u32 q = 0; q < NQ; ++q) {
    u32 i = lane + 32u * q;
    v[q] = i < e ? lgt[i] : 0.0f;
    key[q] = i < e ? key_ord(v[q]) : 0u;
  }
  i32 sel;
  u32 selk, key0;
  warp_select<NQ>(key, lane, k, sel, selk, key0);
  float mx = key_val(key0);
  float mine = lane < k ? fast_exp(key_val(selk) - mx) : 0.0f;
  float w;
  if (rp.scoring == SCORING_TOPK_SOFTMAX) {
    float total = 0.0f;
    for (u32 j = 0; j < k; ++j) total += shfl_idx(mine, j);
    w = mine / total;
  } else {
    float lo = 0.0f, hi = 0.0f;
#pragma unroll
    for (u32 q = 0; q < NQ; q += 2u)
      if (lane + 32u * q < e) lo += fast_exp(v[q] - mx);
#pragma unroll
    for (u32 q = 1; q < NQ; q += 2u)
      if (lane + 32u * q < e) hi += fast_exp(v[q] - mx);
    float sum = lo + hi;
#pragma unroll
    for (u32 m = 16u; m > 0u; m >>= 1) sum = sum + shfl_xor(sum, m);
    w = mine / sum;
    if (rp.renormalize != 0u) {
      float total = 0.0f;
      for (u32 j = 0; j < k; ++j) total += shfl_idx(w, j);
      w = w / total;
    }
  }
  if (lane < k) {
    ids[(u64)t * k + lane] = sel;
    weights[(u64)t * k + lane] = w * u2f(rp.scaling);
  }
  return sel;
}

// The lists of ONE token (lists_one_token's, by one warp without shared memory): lane j < k
// holds slot j's expert (sel). Each local expert has at most one pair (the k experts are
// distinct); the row of slot j is the number of valid slots with a lower local expert (moe_lists
// orders the rows by local expert); each valid slot is one tile.
MX_DEVICE void lists_one_token_warp(const MoeParams& p, u32 lane, u32 k, i32 sel,
                                    const i32* expert_map, u32* pair_of_row, i32* row_of_pair,
                                    u32* tiles) {
  i32 l = -1;
  if (lane < k && sel >= 0) l = p.has_map ? expert_map[sel] : sel;
  u32 r = 0u, nv = 0u;
  for (u32 j = 0; j < k; ++j) {
    i32 o = (i32)shfl_idx_u32((u32)l, j);
    if (o >= 0) {
      nv++;
      if (o < l) r++;
    }
  }
  if (lane < k) {
    if (l >= 0) {
      pair_of_row[r] = lane;
      row_of_pair[lane] = (i32)r;
      tiles[1u + 3u * r] = (u32)l;
      tiles[2u + 3u * r] = r;
      tiles[3u + 3u * r] = r + 1u;
    } else {
      row_of_pair[lane] = -1;
    }
  }
  if (lane == 0u) tiles[0] = nv;
}

// ---- sigmoid routers (DeepSeek-V3/R1: correction bias, groups) by a block of 8 warps -------
// For scoring == sigmoid, n_experts a multiple of 32 up to 1024 (and <= 32 NQ), top_k <= 32,
// and no groups or n_group <= 32 groups of a multiple of 32 experts (the host checks). Warp w
// scores the 32-expert chunks w, w + 8, .. (exact_sigmoid + bias by add_ftz: route_scores'
// keys) and, with groups, takes each chunk's two greatest keys (a multiset: the second is the
// greatest key left after removing the lowest lane holding the first); one barrier; then warp 0
// alone: each group's score from its chunks' pairs (r_group_score: the two greatest keys added
// by add_ftz with a bias, else the greatest), the topk_group best groups by rank (ties to the
// lower group), the k rounds over the chosen groups' experts (warp_select), the weights (the
// selected scores, their sum in slot order, exact_div: route_token's) and, for one token, the
// lists. The same bits as route_token / moe_route_lists_w1g. A group score is computed from
// key_val of the keys: only the sign of a zero can differ from the stored value, and the sum's
// key (key_ord: -0 == +0) does not see it.
struct RouteWShared {
  u32 key[1024];    // key_ord of each expert's selection key
  u32 score[1024];  // exact_sigmoid bits (with a correction bias: the keys' scores)
  u32 ctop[32][2];  // each chunk's two greatest keys (with groups)
};

template <u32 NQ, bool LISTS>
MX_DEVICE void route_block_sigmoid(const RouteParams& rp, const MoeParams& p, u32 t,
                                   const float* logits, const u32* bias, i32* ids,
                                   float* weights, const i32* expert_map, u32* pair_of_row,
                                   i32* row_of_pair, u32* tiles, RouteWShared& s) {
  u32 lid = tid_x(), warp = lid >> 5, lane = lid & 31u;
  u32 e = rp.n_experts, k = rp.top_k, nc = e >> 5;
  bool groups = rp.n_group > 0u, hb = rp.has_bias != 0u;
  u32 ng = groups ? rp.n_group : 1u, cpg = nc / ng;
  const float* lgt = logits + (u64)t * e;
  for (u32 c = warp; c < nc; c += 8u) {
    u32 i = 32u * c + lane;
    float x = lgt[i];
    u32 kb;
    if (hb) {
      u32 sc = exact_sigmoid(f2u(x));
      s.score[i] = sc;
      kb = key_ord(add_ftz(sc, bias[i]));
    } else {
      kb = key_ord(x);
    }
    s.key[i] = kb;
    if (groups) {
      u32 m1 = warp_max_u32(kb);
      u32 i1 = warp_min_u32(kb == m1 ? lane : 32u);
      u32 m2 = warp_max_u32(lane == i1 ? 0u : kb);
      if (lane == 0u) {
        s.ctop[c][0] = m1;
        s.ctop[c][1] = m2;
      }
    }
  }
  sync_threads();
  if (warp != 0u) return;
  u32 chosen = 0xFFFFFFFFu;  // bit g: group g is chosen
  if (groups) {
    u32 gk = 0u;
    if (lane < ng) {
      u32 b1 = 0u, b2 = 0u;
      for (u32 c = lane * cpg; c < (lane + 1u) * cpg; ++c)
        for (u32 h = 0; h < 2u; ++h) {
          u32 x = s.ctop[c][h];
          if (x > b1) {
            b2 = b1;
            b1 = x;
          } else if (x > b2) {
            b2 = x;
          }
        }
      float gs = hb ? add_ftz(f2u(key_val(b1)), f2u(key_val(b2))) : key_val(b1);
      gk = key_ord(gs);
    }
    u32 r = 0u;
    for (u32 g = 0; g < ng; ++g) {
      u32 o = shfl_idx_u32(gk, g);
      r += (o > gk || (o == gk && g < lane)) ? 1u : 0u;
    }
    chosen = warp_or_u32(lane < ng && r < rp.topk_group ? 1u << lane : 0u);
  }
  u32 key[NQ];
#pragma unroll
  for (u32 q = 0; q < NQ; ++q)
    key[q] = q < nc && ((chosen >> (q / cpg)) & 1u) != 0u ? s.key[32u * q + lane] : 0u;
  i32 sel;
  u32 selk, key0;
  warp_select<NQ>(key, lane, k, sel, selk, key0);
  u32 sc = 0u;
  if (lane < k && sel >= 0) sc = hb ? s.score[sel] : exact_sigmoid(f2u(key_val(selk)));
  float total = 0.0f;
  if (rp.renormalize != 0u)
    for (u32 j = 0; j < k; ++j) total = total + u2f(shfl_idx_u32(sc, j));
  if (lane < k) {
    u32 w = sc;
    if (rp.renormalize != 0u) w = exact_div(w, f2u(total));
    ids[(u64)t * k + lane] = sel;
    weights[(u64)t * k + lane] = u2f(w) * u2f(rp.scaling);
  }
  if (LISTS) lists_one_token_warp(p, lane, k, sel, expert_map, pair_of_row, row_of_pair, tiles);
}

// ---- the kernels --------------------------------------------------------------------------
// moe_route_lists_w2_<NQ>: decode's routing + lists for ONE token and a (top-k) softmax router
// without bias or groups, one warp (n_experts <= 32 NQ). mx_route_w_<NQ>: any number of tokens,
// four warps per 128-thread block, one token per warp. moe_route_lists_w2g_<NQ>: one token,
// sigmoid routers, 256 threads; mx_route_wg_<NQ>: one such block per token.
#define ROUTE_WARP_KERNELS(NQ)                                                                  \
  MX_KERNEL(32) void moe_route_lists_w2_##NQ(RouteParams rp, MoeParams p, const float* logits, \
                                             const u32* bias, i32* ids, float* weights,         \
                                             const i32* expert_map, u32* pair_of_row,            \
                                             i32* row_of_pair, u32* tiles) {                     \
    u32 lane = tid_x();                                                                         \
    i32 sel = route_warp_simple<NQ>(rp, 0u, lane, logits, ids, weights);                       \
    lists_one_token_warp(p, lane, rp.top_k, sel, expert_map, pair_of_row, row_of_pair, tiles); \
  }                                                                                             \
  MX_KERNEL(128) void mx_route_w_##NQ(RouteParams rp, const float* logits, const u32* bias,     \
                                      i32* ids, float* weights) {                               \
    u32 t = bid_x() * 4u + (tid_x() >> 5);                                                      \
    if (t >= rp.m) return;                                                                      \
    route_warp_simple<NQ>(rp, t, tid_x() & 31u, logits, ids, weights);                          \
  }
#define ROUTE_WARP_G_KERNELS(NQ)                                                                 \
  MX_KERNEL(256) void moe_route_lists_w2g_##NQ(RouteParams rp, MoeParams p, const float* logits, \
                                               const u32* bias, i32* ids, float* weights,         \
                                               const i32* expert_map, u32* pair_of_row,            \
                                               i32* row_of_pair, u32* tiles) {                     \
    MX_SHARED RouteWShared s;                                                                     \
    route_block_sigmoid<NQ, true>(rp, p, 0u, logits, bias, ids, weights, expert_map,              \
                                  pair_of_row, row_of_pair, tiles, s);                            \
  }                                                                                               \
  MX_KERNEL(256) void mx_route_wg_##NQ(RouteParams rp, const float* logits, const u32* bias,      \
                                       i32* ids, float* weights) {                                \
    MX_SHARED RouteWShared s;                                                                     \
    MoeParams p{};                                                                                \
    if (bid_x() >= rp.m) return;                                                                  \
    route_block_sigmoid<NQ, false>(rp, p, bid_x(), logits, bias, ids, weights, nullptr, nullptr,  \
                                   nullptr, nullptr, s);                                          \
  }
ROUTE_WARP_KERNELS(4)
ROUTE_WARP_KERNELS(8)
ROUTE_WARP_KERNELS(32)
ROUTE_WARP_G_KERNELS(8)
ROUTE_WARP_G_KERNELS(32)
