// route.h: the router (shaders/route.wgsl): RouteParams, RouteShared, key_ord, the block arg-max
// and the selection by rank, route_token and the mx_route{,_v2,_v3,_v4} kernels. Included by
// hip/mxmoe.cu after quant.h; relies on exact_math.h (the exact scores) and mx_compat.h
// (shuffles, barriers, fast_exp).
#pragma once

// ------------------------------------------------------------------------------------------
// Routing (shaders/route.wgsl; the CPU twin is src/moe/route.rs). One 64-thread block per token.
// Keys are compared on their bits (IEEE order, -0 == +0), ties to the lower index.

struct RouteParams {
  u32 m, n_experts, top_k, scoring, renormalize, n_group, topk_group, scaling, has_bias, p0, p1, p2;
};

#define R_WG 64u

MX_DEVICE u32 key_ord(float v) {
  u32 b = f2u(v);
  if (b == 0x80000000u) b = 0u;
  if ((b & 0x80000000u) != 0u) return ~b;
  return b | 0x80000000u;
}
MX_DEVICE bool key_gt(float a, float b) { return key_ord(a) > key_ord(b); }
MX_DEVICE bool r_better(float va, i32 ia, float vb, i32 ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return key_gt(va, vb) || (key_ord(va) == key_ord(vb) && ia < ib);
}

// Up to 1024 experts and as many groups (a group holds at least one expert).
struct RouteShared {
  u64 kord[1024];      // route_select_ranked: (key order << 32) | ~index, 0 = not a candidate
  float lg[1024];      // the token's logits, staged once (later reads are from shared memory)
  float key[1024];
  u32 taken[1024];
  float gscore[1024];
  u32 gchosen[1024];
  float bv[64];
  i32 bi[64];
  u32 sel[32];
  u32 sel_score[32];
  u32 sel_total;
  float sum[64];
  float rmax;
  u32 rtotal;
};

MX_DEVICE float r_group_score(const RouteShared& s, const RouteParams& rp, u32 g, u32 per) {
  u32 b = g * per;
  if (rp.has_bias == 0u) {
    float best = s.key[b];
    for (u32 i = 1; i < per; ++i)
      if (key_gt(s.key[b + i], best)) best = s.key[b + i];
    return best;
  }
  if (per == 1u) return s.key[b];
  float best = s.key[b], second = s.key[b + 1];
  if (key_gt(second, best)) {
    best = s.key[b + 1];
    second = s.key[b];
  }
  for (u32 i = 2; i < per; ++i) {
    float v = s.key[b + i];
    if (key_gt(v, best)) {
      second = best;
      best = v;
    } else if (key_gt(v, second)) {
      second = v;
    }
  }
  return add_ftz(f2u(best), f2u(second));
}

MX_DEVICE u32 r_exp(const RouteShared& s, u32 i) {
  return exact_exp_neg(ftz_bits(f2u(s.lg[i] - s.rmax)));
}
MX_DEVICE u32 r_score(const RouteShared& s, const RouteParams& rp, u32 i) {
  if (rp.scoring == SCORING_SIGMOID) return exact_sigmoid(f2u(s.lg[i]));
  return exact_div(r_exp(s, i), s.rtotal);
}

// The block's best (value, index) of its threads' candidates (bv, bi; index -1 = none): the
// greater key, ties to the lower index, by a fixed tree. Every thread gets the winner's index
// (-1 when no thread had a candidate).
MX_DEVICE i32 r_argmax(RouteShared& s, u32 lid, float bv, i32 bi) {
  if (lid < R_WG) {
    s.bv[lid] = bv;
    s.bi[lid] = bi;
  }
  sync_threads();
  for (u32 st = R_WG / 2u; st > 0u; st /= 2u) {
    if (lid < st && r_better(s.bv[lid + st], s.bi[lid + st], s.bv[lid], s.bi[lid])) {
      s.bv[lid] = s.bv[lid + st];
      s.bi[lid] = s.bi[lid + st];
    }
    sync_threads();
  }
  i32 w = s.bi[0];
  sync_threads();
  return w;
}

// The best (value, index) over 32 lanes (r_better's total order: any reduction order finds the
// same winner); every lane gets it.
MX_DEVICE void warp_best(float& bv, i32& bi) {
#pragma unroll
  for (u32 m = 16u; m > 0u; m >>= 1) {
    float ov = shfl_xor(bv, m);
    i32 oi = (i32)f2u(shfl_xor(u2f((u32)bi), m));
    if (r_better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}
// The same winner (the order is total: greater key, then lower index, so the best candidate is
// unique and any reduction order finds it) with two barriers instead of seven: a butterfly over
// each 32-lane group by shuffles (NVIDIA warps; AMD's 64-lane wavefront as two halves), then the
// two groups' winners through shared memory (MXMOE_HIP_ROUTE=v2).
MX_DEVICE i32 r_argmax_fast(RouteShared& s, u32 lid, float bv, i32 bi) {
  warp_best(bv, bi);
  if (lid < R_WG && (lid & 31u) == 0u) {
    s.bv[lid >> 5] = bv;
    s.bi[lid >> 5] = bi;
  }
  sync_threads();
  i32 w = r_better(s.bv[1], s.bi[1], s.bv[0], s.bi[0]) ? s.bi[1] : s.bi[0];
  sync_threads();
  return w;
}
template <bool FAST>
MX_DEVICE i32 r_best(RouteShared& s, u32 lid, float bv, i32 bi) {
  return FAST ? r_argmax_fast(s, lid, bv, bi) : r_argmax(s, lid, bv, bi);
}

// The k experts of one token by rank instead of k arg-max rounds (the 256-thread kernels:
// moe_route_lists_v4 / mx_route_v4 per token, moe_route_lists_w1g): every candidate counts the
// candidates that beat it under r_better's total order (greater key, ties to the lower index),
// packed as one u64 per expert, (key_ord << 32) | ~index, so that "beats" is ">"; the experts
// of rank < k are the winners of the k rounds, rank r the winner of round r. Groups the same
// way: each group's score (r_group_score), its rank among the groups, chosen when below
// topk_group; experts outside the chosen groups are no candidates (key 0, below every
// candidate's). Slots without a candidate keep index -1, as the rounds leave them. Writes
// s.sel[0..k); three or four barriers instead of two per round (ncu, DeepSeek-R1 at one
// token: the rounds kept 7 of 8 warps at a barrier for ~73 % of moe_route_lists_w1g's 38 k
// cycles). Every thread of the block calls it.
// route_select_ranked's key of candidate i with value v: greater = better under r_better's
// order (the key's order, then the lower index); never 0 (~i > 0 for i < 2^32 - 1).
MX_DEVICE u64 rank_key(float v, u32 i) { return ((u64)key_ord(v) << 32) | (u64)(~i); }
MX_DEVICE void route_select_ranked(const RouteParams& rp, u32 lid, u32 nthreads, RouteShared& s) {
  u32 e = rp.n_experts, k = rp.top_k;
  bool groups = rp.n_group > 0u;
  u32 ng = groups ? rp.n_group : 1u, per = groups ? e / rp.n_group : e;
  if (groups) {
    for (u32 g = lid; g < ng; g += nthreads) s.gscore[g] = r_group_score(s, rp, g, per);
    sync_threads();
    for (u32 g = lid; g < ng; g += nthreads) {
      u64 mine = rank_key(s.gscore[g], g);
      u32 r = 0u;
      for (u32 q = 0; q < ng; ++q) r += rank_key(s.gscore[q], q) > mine;
      s.gchosen[g] = r < rp.topk_group ? 1u : 0u;
    }
    sync_threads();
  }
  for (u32 i = lid; i < e; i += nthreads) {
    bool cand = !groups || s.gchosen[i / per] != 0u;
    s.kord[i] = cand ? rank_key(s.key[i], i) : 0ull;
  }
  for (u32 j = lid; j < k; j += nthreads) s.sel[j] = 0xFFFFFFFFu;
  sync_threads();
  for (u32 i = lid; i < e; i += nthreads) {
    u64 mine = s.kord[i];
    if (mine == 0ull) continue;
    u32 r = 0u;
    for (u32 q = 0; q < e; ++q) r += s.kord[q] > mine;
    if (r < k) s.sel[r] = i;
  }
  sync_threads();
}

// The weights of the selected experts without exact scores (softmax without a bias,
// topk_softmax): one thread, in slot order.
MX_DEVICE void route_weights_serial(const RouteParams& rp, u32 t, const RouteShared& s, float mx,
                                    float scaling, i32* ids, float* weights) {
  u32 k = rp.top_k;
  const float* lg = s.lg;
  float total = 0.0f;
  if (rp.scoring == SCORING_TOPK_SOFTMAX) {
    for (u32 j = 0; j < k; ++j) total += fast_exp(lg[s.sel[j]] - mx);
  } else if (rp.renormalize != 0u) {
    for (u32 j = 0; j < k; ++j) total += fast_exp(lg[s.sel[j]] - mx) / s.sum[0];
  }
  for (u32 j = 0; j < k; ++j) {
    float v = lg[s.sel[j]];
    float w;
    if (rp.scoring == SCORING_TOPK_SOFTMAX) {
      w = fast_exp(v - mx) / total;
    } else {
      w = fast_exp(v - mx) / s.sum[0];
      if (rp.renormalize != 0u) w = w / total;
    }
    ids[(u64)t * k + j] = (i32)s.sel[j];
    weights[(u64)t * k + j] = w * scaling;
  }
}

// The first part of route_token: the logits staged in s.lg, the exact softmax's s.rmax and
// s.rtotal where it applies, the keys s.key (and s.taken cleared), by the first NK threads;
// every thread of the block calls it (barriers; the last one publishes the keys).
template <bool SIMPLE, u32 NK>
MX_DEVICE void route_scores(const RouteParams& rp, u32 t, u32 lid, const float* logits,
                            const u32* bias, RouteShared& s) {
  const bool LK = lid < NK;
  u32 e = rp.n_experts;
  const float* lgt = logits + (u64)t * e;
  for (u32 i = lid; i < e && LK; i += NK) s.lg[i] = lgt[i];
  sync_threads();
  const float* lg = s.lg;
  bool exact_softmax = (!SIMPLE && rp.has_bias != 0u) && rp.scoring == SCORING_SOFTMAX;
  if (exact_softmax) {
    if (lid == 0u) {
      float mx = lg[0];
      for (u32 i = 1; i < e; ++i) mx = lg[i] > mx ? lg[i] : mx;
      s.rmax = mx;
    }
    sync_threads();
    for (u32 i = lid; i < e && LK; i += NK) s.key[i] = u2f(r_exp(s, i));
    sync_threads();
    if (lid == 0u) {
      float total = 0.0f;
      for (u32 i = 0; i < e; ++i) total = add_ftz(f2u(total), f2u(s.key[i]));
      s.rtotal = f2u(total);
    }
    sync_threads();
  }
  for (u32 i = lid; i < e && LK; i += NK) {
    s.key[i] = (!SIMPLE && rp.has_bias != 0u) ? add_ftz(r_score(s, rp, i), bias[i]) : lg[i];
    s.taken[i] = 0u;
  }
  sync_threads();
}

// Route token t. The work is done by threads lid < R_WG (the same sums in the same order
// whatever the block size); every thread of the block must call it (barriers). FAST (v2): the
// arg-max by shuffles (r_argmax_fast) and no softmax-sum tree where no softmax sum is used; the
// same bits. SIMPLE (v3): the router is a softmax or top-k softmax without a correction bias or
// groups (the host checks), so that the exact scoring, the groups and the sigmoid weights are
// compiled out: a single block runs this once per token, and the general kernel's 71 KB of code
// are a suspect for its ~15 k cycles (docs/h200-2026-12-01-hipdecode2). The same bits.
// NK (v4): the threads that share the per-expert work whose results do not depend on the
// thread count (staging the logits, the exact softmax terms, the scores with the correction
// bias: DeepSeek's exact sigmoids); the block must have at least NK threads. The arg-max
// candidates and the sums stay with the first R_WG threads.
template <bool FAST, bool SIMPLE = false, u32 NK = R_WG>
MX_DEVICE void route_token(const RouteParams& rp, u32 t, u32 lid, const float* logits,
                           const u32* bias, i32* ids, float* weights, RouteShared& s) {
  const u32 LW = lid < R_WG ? R_WG : 0u;  // threads past R_WG take no work (loops end at once)
  u32 e = rp.n_experts, k = rp.top_k;
  route_scores<SIMPLE, NK>(rp, t, lid, logits, bias, s);
  const float* lg = s.lg;
  bool exact_softmax = (!SIMPLE && rp.has_bias != 0u) && rp.scoring == SCORING_SOFTMAX;
  if constexpr (NK == 256u && !SIMPLE) {
    // v4's 256-thread blocks: by rank (the same experts in the same slots as the rounds below).
    route_select_ranked(rp, lid, 256u, s);
  } else {
    // Groups: each group's score, then the best topk_group groups (ties to the lower group).
    u32 per = e;
    u32 ng = (!SIMPLE && rp.n_group > 0u) ? rp.n_group : 1u;
    if (!SIMPLE && rp.n_group > 0u) per = e / rp.n_group;
    for (u32 g = lid; g < ng && LW; g += R_WG) {
      s.gscore[g] = (!SIMPLE && rp.n_group > 0u) ? r_group_score(s, rp, g, per) : 0.0f;
      s.gchosen[g] = (!SIMPLE && rp.n_group > 0u) ? 0u : 1u;
    }
    sync_threads();
    if (!SIMPLE && rp.n_group > 0u) {
      for (u32 r = 0; r < rp.topk_group; ++r) {
        i32 bi = -1;
        float bv = 0.0f;
        for (u32 g = lid; g < ng && LW; g += R_WG) {
          if (s.gchosen[g] == 0u && (bi < 0 || key_gt(s.gscore[g], bv))) {
            bi = (i32)g;
            bv = s.gscore[g];
          }
        }
        i32 w = r_best<FAST>(s, lid, bv, bi);
        if (lid == 0u && w >= 0) s.gchosen[w] = 1u;
        sync_threads();
      }
    }
    for (u32 j = 0; j < k; ++j) {
      i32 bi = -1;
      float bv = 0.0f;
      for (u32 i = lid; i < e && LW; i += R_WG) {
        if (s.taken[i] == 0u && (SIMPLE || s.gchosen[i / per] != 0u)) {
          if (bi < 0 || key_gt(s.key[i], bv)) {
            bi = (i32)i;
            bv = s.key[i];
          }
        }
      }
      i32 w = r_best<FAST>(s, lid, bv, bi);
      if (lid == 0u) {
        u32 b = (u32)w;
        s.sel[j] = b;
        s.taken[b] = 1u;
      }
      sync_threads();
    }
  }
  float mx = lg[s.sel[0]];
  float part = 0.0f;
  if (rp.scoring == SCORING_SOFTMAX && !exact_softmax)
    for (u32 i = lid; i < e && LW; i += R_WG) part += fast_exp(lg[i] - mx);
  // The softmax sum (only the plain softmax without a bias reads it: route_weights_serial).
  if (!FAST || (rp.scoring == SCORING_SOFTMAX && !exact_softmax)) {
    if (LW) s.sum[lid] = part;
    sync_threads();
    for (u32 st = R_WG / 2u; st > 0u; st /= 2u) {
      if (lid < st) s.sum[lid] = s.sum[lid] + s.sum[lid + st];
      sync_threads();
    }
  }
  float scaling = u2f(rp.scaling);
  if ((!SIMPLE && rp.scoring == SCORING_SIGMOID) || exact_softmax) {
    if (lid < k) s.sel_score[lid] = r_score(s, rp, s.sel[lid]);
    sync_threads();
    if (lid == 0u) {
      float total = 0.0f;
      if (rp.renormalize != 0u)
        for (u32 j = 0; j < k; ++j) total = total + u2f(s.sel_score[j]);
      s.sel_total = f2u(total);
    }
    sync_threads();
    if (lid < k) {
      u32 w = s.sel_score[lid];
      if (rp.renormalize != 0u) w = exact_div(w, s.sel_total);
      ids[(u64)t * k + lid] = (i32)s.sel[lid];
      weights[(u64)t * k + lid] = u2f(w) * scaling;
    }
  } else if (lid == 0u) {
    route_weights_serial(rp, t, s, mx, scaling, ids, weights);
  }
  sync_threads();
}

MX_KERNEL(64) void mx_route(RouteParams rp, const float* logits, const u32* bias,
                                      i32* ids, float* weights) {
  MX_SHARED RouteShared s;
  if (bid_x() >= rp.m) return;
  route_token<false>(rp, bid_x(), tid_x(), logits, bias, ids, weights, s);
}
MX_KERNEL(64) void mx_route_v2(RouteParams rp, const float* logits, const u32* bias,
                                         i32* ids, float* weights) {
  MX_SHARED RouteShared s;
  if (bid_x() >= rp.m) return;
  route_token<true>(rp, bid_x(), tid_x(), logits, bias, ids, weights, s);
}
// v4 for routers with exact scores (a correction bias, sigmoid, groups): 256 threads per token,
// all of them computing the scores (the same bits as v2).
MX_KERNEL(256) void mx_route_v4(RouteParams rp, const float* logits, const u32* bias, i32* ids,
                                float* weights) {
  MX_SHARED RouteShared s;
  if (bid_x() >= rp.m) return;
  route_token<true, false, 256u>(rp, bid_x(), tid_x(), logits, bias, ids, weights, s);
}
MX_KERNEL(64) void mx_route_v3(RouteParams rp, const float* logits, const u32* bias,
                                         i32* ids, float* weights) {
  MX_SHARED RouteShared s;
  if (bid_x() >= rp.m) return;
  route_token<true, true>(rp, bid_x(), tid_x(), logits, bias, ids, weights, s);
}
