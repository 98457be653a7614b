// mxmoe.cu: every HIP kernel of the mxmoe HIP backend, one source for NVIDIA (clang -x cuda ->
// PTX, run through the CUDA driver) and AMD (clang -x hip -> gfx942 / gfx950 code objects). A
// port of the WGSL kernels (shaders/*.wgsl), which are bit-exact against the CPU oracle; the
// host side is src/backend/hip/. Format, mode, scoring and activation ids come from the
// generated hip/mx_formats.h, target primitives from hip/mx_compat.h, matrix-core fragments from
// hip/mx_fragment.h.
//
//   mx_quantize / mx_dequantize / mx_qdq   shaders/quant.wgsl (one thread per block / element)
//   mx_route                               shaders/route.wgsl + exact_math.wgsl
//   moe_lists                              shaders/moe_lists.wgsl
//   moe_gemm1 / moe_gemm2                  shaders/moe_gemm.wgsl, on matrix cores (bf16 operands:
//                                          every MX weight and QDQ'd activation is exact in bf16;
//                                          unquantized activations are split hi + lo)
//   moe_gemv1_cb{4,6,8} / moe_gemv2_cb*    shaders/moe_gemv.wgsl (decode; specialized per code
//                                          width)
//   moe_combine                            shaders/moe_combine.wgsl
//   moe_gemm{1,2}_mx_<w>_<a> (gfx950)      v_mfma_scale_f32_16x16x128_f8f6f4 on the packed codes
//
// Over 600 lines: one translation unit on purpose, so that each target is one clang invocation
// and one code object (build.rs) and every kernel shares the inlined helpers; the sections
// above follow the WGSL files one to one.
#include "mx_common.h"
#include "exact_math.h"
#include "mx_fragment.h"

typedef unsigned char u8;
typedef u32 uint4v __attribute__((ext_vector_type(4)));
typedef float float4v __attribute__((ext_vector_type(4)));

// ------------------------------------------------------------------------------------------
// quantize / dequantize / QDQ (NUMERICS.md 5; shaders/quant.wgsl)

MX_DEVICE u32 block_amax(const u32* x) {
  u32 a = 0u;
  for (u32 j = 0; j < 32u; ++j) a = umax(a, x[j] & 0x7FFFFFFFu);
  return a;
}

// One thread per 32-block: scale byte, codes packed as a little-endian bit stream (code_bits
// words per block), scale bytes.
MX_KERNEL(256) void mx_quantize(const u32* x, u32* codes, u8* scales, u32 n_blocks,
                                          u32 fmt, u32 mode) {
  u32 b = bid_x() * 256u + tid_x();
  if (b >= n_blocks) return;
  const u32* xb = x + (u64)b * 32u;
  u32 byte = mx_scale_byte(fmt, mode, block_amax(xb));
  u32 cb = mx_spec(fmt).code_bits;
  u32 words[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (u32 j = 0; j < 32u; ++j) {
    u32 code = byte == 255u ? 0u : mx_encode(fmt, xb[j], (i32)byte - 127);
    u32 bit = j * cb, w = bit >> 5, off = bit & 31u;
    words[w] |= code << off;
    if (off + cb > 32u) words[w + 1] |= code >> (32u - off);
  }
  for (u32 w = 0; w < cb; ++w) codes[(u64)b * cb + w] = words[w];
  scales[b] = (u8)byte;
}

// One thread per element.
MX_KERNEL(256) void mx_dequantize(const u32* codes, const u8* scales, u32* out,
                                            u32 n_blocks, u32 fmt) {
  u64 idx = (u64)bid_x() * 256u + tid_x();
  if (idx >= (u64)n_blocks * 32u) return;
  u64 b = idx / 32u;
  u32 lane = (u32)(idx % 32u);
  u32 cb = mx_spec(fmt).code_bits;
  u32 bp = lane * cb;
  u64 w = b * cb + bp / 32u;
  u32 off = bp & 31u;
  u32 w1 = off + cb > 32u ? codes[w + 1] : 0u;
  out[idx] = mx_dequant_bits(fmt, mx_code_at(codes[w], w1, off, cb), scales[b]);
}

// One thread per 32-block: dequant(quant(x)).
MX_KERNEL(256) void mx_qdq(const u32* x, u32* out, u32 n_blocks, u32 fmt, u32 mode) {
  u32 b = bid_x() * 256u + tid_x();
  if (b >= n_blocks) return;
  const u32* xb = x + (u64)b * 32u;
  u32 byte = mx_scale_byte(fmt, mode, block_amax(xb));
  for (u32 j = 0; j < 32u; ++j) {
    u32 code = byte == 255u ? 0u : mx_encode(fmt, xb[j], (i32)byte - 127);
    out[(u64)b * 32u + j] = mx_dequant_bits(fmt, code, byte);
  }
}

// QDQ with one lane per element and 32 lanes per block (the MoE's input QDQ: a few tokens give
// too few blocks for a thread each): the block's largest magnitude by a butterfly over the
// lanes (the same bits as block_amax), then each lane's own element. Bit-exact as mx_qdq.
// Element i's QDQ'd bits, by the 32 lanes of its block together (every lane of the warp calls).
MX_DEVICE u32 qdq_lane(const u32* x, u64 i, u32 fmt, u32 mode) {
  u32 v = x[i];
  u32 a = v & 0x7FFFFFFFu;
  for (u32 m = 16u; m > 0u; m >>= 1) a = umax(a, f2u(shfl_xor(u2f(a), m)));
  u32 byte = mx_scale_byte(fmt, mode, a);
  u32 code = byte == 255u ? 0u : mx_encode(fmt, v, (i32)byte - 127);
  return mx_dequant_bits(fmt, code, byte);
}
MX_KERNEL(256) void mx_qdq_lanes(const u32* x, u32* out, u32 n_blocks, u32 fmt, u32 mode) {
  u64 i = (u64)bid_x() * 256u + tid_x();
  if (i / 32u >= n_blocks) return;  // whole 32-lane groups (n_blocks * 32 elements)
  out[i] = qdq_lane(x, i, fmt, mode);
}

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

// ------------------------------------------------------------------------------------------
// The MoE passes (shaders/moe_common.wgsl has the overview): lists -> input QDQ (mx_qdq) ->
// gemm1 | gemv1 (bias, activation, intermediate QDQ fused) -> gemm2 | gemv2 (bias, router
// weight) -> combine.

struct MoeParams {
  u32 m, top_k, hidden, inter, n_experts, e_local, has_map, has_bias13, has_bias2, on_input;
  u32 weight_fmt, act_fmt, act_mode, activation, round_bf16, tile_m;
};

MX_DEVICE float bf16_point(const MoeParams& p, float x) { return p.round_bf16 ? bf16_round(x) : x; }

MX_DEVICE float activate(const MoeParams& p, float g, float u) {
  if (p.activation == ACT_SILU) return g / (1.0f + fast_exp(-g)) * u;
  float gc = g < 7.0f ? g : 7.0f;
  float lc = u < -7.0f ? -7.0f : (u > 7.0f ? 7.0f : u);
  return gc / (1.0f + fast_exp(-1.702f * gc)) * (lc + 1.0f);
}

// The intermediate QDQ of one value (bits) whose 32-block has scale byte `byte`.
MX_DEVICE u32 intermediate_qdq(const MoeParams& p, u32 val, u32 byte) {
  u32 code = byte == 255u ? 0u : mx_encode(p.act_fmt, val, (i32)byte - 127);
  return mx_dequant_bits(p.act_fmt, code, byte);
}

#include "gemv_epilogue.h"  // gemv1_finish, shared with gemv_mma.h and its CPU emulation

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

#include "route_warp.h"  // MXMOE_HIP_ROUTE=v6: routing by warps (one warp per token, redux)

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

// The tile of this block: (expert, first row, end row); false when the slot is empty. The
// entry is read together with the count (not after it: one memory latency instead of two); the
// host sizes the list for every slot of the grid, so the read stays inside it.
MX_DEVICE bool load_tile(const u32* tiles, u32 slot, u32* e, u32* start, u32* cnt) {
  u32 n = tiles[0], te = tiles[1u + 3u * slot], ts = tiles[2u + 3u * slot],
      tn = tiles[3u + 3u * slot];
  if (slot >= n) return false;
  *e = te;
  *start = ts;
  *cnt = tn - ts;
  return true;
}

// Weight row (within the expert) of tile row wr: stage 1 maps 2 ic rows to the gate and up rows
// of ic intermediate columns starting at jb (SiLU: gate rows [0, I), up [I, 2I); SwiGLU-OAI:
// interleaved); stage 2 takes rows jb + wr.
MX_DEVICE u32 weight_row(const MoeParams& p, bool is1, u32 wr, u32 jb, u32 ic = 32u) {
  if (!is1) return jb + wr;
  if (p.activation == ACT_SILU) return wr < ic ? jb + wr : p.inter + jb + wr - ic;
  return 2u * jb + wr;
}
// Whether tile row wr of stage 1 lies inside the matrix (its intermediate column < I).
MX_DEVICE bool weight_row_ok(const MoeParams& p, u32 wr, u32 jb, u32 ic = 32u) {
  return jb + (p.activation == ACT_SILU ? wr % ic : wr / 2u) < p.inter;
}

// Code j of a block of `cb`-bit codes held in words w[0..cb).
MX_DEVICE u32 code_of(const u32* w, u32 j, u32 cb) {
  u32 bit = j * cb, i = bit >> 5, off = bit & 31u;
  u32 c = w[i] >> off;
  if (off + cb > 32u) c |= w[i + 1] << (32u - off);
  return c & ((1u << cb) - 1u);
}

#define GEMM_ARGS                                                                            \
  MoeParams p, const u32 *pair_of_row, const u32 *tiles, const float *x, const u32 *wcodes, \
      const u8 *wscales, u32 *out, const float *bias, const float *topw
#define GEMM_PASS pair_of_row, tiles, x, wcodes, wscales, out, bias, topw


// ---- grouped GEMV (decode) -----------------------------------------------------------------
// A block = 256 threads = 8 groups of 32 lanes; a tile = <= 4 rows of one expert x 64 weight
// rows; group g owns weight rows g + 8i (i < 8), its lanes walk K one whole 32-block at a time
// (CB words + a scale byte per row: consecutive lanes read consecutive blocks, coalesced), x
// read as float4 from global memory (small, cached). FP4 codes are decoded in registers (below),
// the other formats through a table in shared memory. Lane partials are summed over the 32
// lanes by a fixed butterfly (deterministic). R rows per pass over K keep the registers within
// a budget that lets two blocks share a multiprocessor.

#define GV_THREADS 256u
#define GV_OUT_ROWS 64u  // gemv2 output rows per block

// FP4 (E2M1) codes k and k + 4 of a word, decoded in registers: the 3 magnitude bits go to f16
// bits 9..11 (exponent e and mantissa m) and the sign to bit 15, an f16 equal to the E2M1 value
// times 2^-14 exactly (e >= 1: 2^(e-15) (1 + m/2); code 1 lands on the f16 subnormal 2^-15).
// The caller multiplies the sums by 2^14 (exact). As shaders/moe_gemv_fp4_registers.wgsl.
// Here the pair's codes sit at bits 12..15 and 28..31 of v (the word shifted left), so the sign
// bits are already f16 sign bits and one shift moves both magnitudes (the layout trick of
// Marlin's FP4 dequantization): 3 integer operations per pair instead of 5, the same bits.
MX_DEVICE u32 fp4_pair_bits(u32 v) { return (v & 0x80008000u) | ((v & 0x70007000u) >> 3); }
MX_DEVICE void fp4_pair(u32 v, float* lo, float* hi) {
  u32 bits = fp4_pair_bits(v);
  *lo = f16_to_f32(bits & 0xFFFFu);
  *hi = f16_to_f32(bits >> 16);
}

// The 8 values (unscaled; FP4: times 2^-14) of octet o of a block held in w[0..CB).
template <u32 CB>
MX_DEVICE void decode_octet(const u32* w, u32 o, const float* code_value, float* v) {
  if (CB == 4u) {
    u32 x = w[o];
#pragma unroll
    for (u32 k = 0; k < 4u; ++k) fp4_pair(x << (12u - 4u * k), &v[k], &v[k + 4u]);
  } else {
#pragma unroll
    for (u32 q = 0; q < 8u; ++q) v[q] = code_value[code_of(w, o * 8u + q, CB)];
  }
}

// Rows r0 .. r0 + R (of the group's 8) against tokens t0 .. t0 + T of the tile.
template <u32 CB, u32 T, u32 R>
MX_DEVICE void gemv_pass(const MoeParams& p, bool is1, u32 e, u32 start, u32 cnt, u32 jb, u32 r0,
                         u32 t0, const u32* pair_of_row, const float* x, const u32* wcodes,
                         const u8* wscales, const float* code_value, float* row_sums) {
  u32 tid = tid_x(), g = tid / 32u, lane = tid % 32u;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u;
  u32 nrows = is1 ? 2u * inter : h;
  u64 sbase[R];
  bool valid[R];
#pragma unroll
  for (u32 i = 0; i < R; ++i) {
    u32 wr = g + 8u * (r0 + i);
    u32 row = weight_row(p, is1, wr, jb);
    bool ok = is1 ? (jb + (p.activation == ACT_SILU ? wr % 32u : wr / 2u)) < inter : row < nrows;
    valid[i] = ok;
    sbase[i] = ((u64)e * nrows + (ok ? row : 0u)) * kblocks;
  }
  const float* xr[T];
#pragma unroll
  for (u32 t = 0; t < T; ++t) {
    u32 tt = t0 + t;
    u64 o = 0;
    if (tt < cnt) o = is1 ? (u64)(pair_of_row[start + tt] / p.top_k) * K : (u64)(start + tt) * K;
    xr[t] = tt < cnt ? x + o : nullptr;
  }
  float acc[R][T];
#pragma unroll
  for (u32 i = 0; i < R; ++i)
#pragma unroll
    for (u32 t = 0; t < T; ++t) acc[i][t] = 0.0f;
  for (u32 b = lane; b < kblocks; b += 32u) {
    u32 w[R][CB];
    float sc[R];
#pragma unroll
    for (u32 i = 0; i < R; ++i) {
      if (valid[i]) {
        const u32* src = wcodes + (sbase[i] + b) * CB;
        if (CB == 4u) {
          uint4v q = *(const uint4v*)src;
          w[i][0] = q.x; w[i][1 % CB] = q.y; w[i][2 % CB] = q.z; w[i][3 % CB] = q.w;
        } else {
#pragma unroll
          for (u32 q = 0; q < CB; ++q) w[i][q] = src[q];
        }
        sc[i] = e8m0_value(wscales[sbase[i] + b]);
      } else {
#pragma unroll
        for (u32 q = 0; q < CB; ++q) w[i][q] = 0u;
        sc[i] = 0.0f;
      }
    }
    const float unit = CB == 4u ? 16384.0f : 1.0f;  // FP4 values are decoded times 2^-14
#pragma unroll
    for (u32 o = 0; o < 4u; ++o) {
#pragma unroll
      for (u32 t = 0; t < T; ++t) {
        float4v x0 = {0, 0, 0, 0}, x1 = {0, 0, 0, 0};
        if (xr[t]) {
          const float4v* xp = (const float4v*)(xr[t] + b * 32u + o * 8u);
          x0 = xp[0];
          x1 = xp[1];
        }
#pragma unroll
        for (u32 i = 0; i < R; ++i) {
          float v[8];
          decode_octet<CB>(w[i], o, code_value, v);
          float d = ((v[0] * x0.x + v[1] * x0.y) + (v[2] * x0.z + v[3] * x0.w)) +
                    ((v[4] * x1.x + v[5] * x1.y) + (v[6] * x1.z + v[7] * x1.w));
          acc[i][t] += (d * unit) * sc[i];
        }
      }
    }
  }
#pragma unroll
  for (u32 i = 0; i < R; ++i)
#pragma unroll
    for (u32 t = 0; t < T; ++t) {
      float s = sum32(acc[i][t]);
      if (lane == 0u) row_sums[(g + 8u * (r0 + i)) * 4u + t0 + t] = s;
    }
}

// gemv2 with the combine fused (decode, `counters` non-null): after its rows of y, each block
// adds one to its column block's counter; the block that completes it (the counter reaches the
// number of tiles) sums y over the top-k slots of every token for those columns, in slot order
// (as moe_combine: the same bits), and resets the counter for the next forward.
template <u32 OUTR>
MX_DEVICE void gemv2_combine(const MoeParams& p, const u32* tiles, const i32* row_of_pair,
                             const u32* y, u32* counters, u32* final_out, u32 jb) {
  MX_SHARED u32 last;
  u32 tid = tid_x(), h = p.hidden;
  fence_device();
  sync_threads();
  if (tid == 0u) last = atomic_add_u32(&counters[bid_y()], 1u) + 1u == tiles[0] ? 1u : 0u;
  sync_threads();
  if (last == 0u) return;
  fence_device();
  for (u32 i = tid; i < p.m * OUTR; i += GV_THREADS) {
    u32 t = i / OUTR, n = jb + i % OUTR;
    if (n >= h) continue;
    float acc = 0.0f;
    for (u32 j = 0; j < p.top_k; ++j) {
      i32 r = row_of_pair[t * p.top_k + j];
      if (r >= 0) acc = acc + load_coherent((const float*)y + (u64)r * h + n);
    }
    final_out[(u64)t * h + n] = f2u(bf16_point(p, acc));
  }
  if (tid == 0u) counters[bid_y()] = 0u;
}

// ---- grouped GEMV v2 (MXMOE_HIP_GEMV=v2; FP4 weights) ---------------------------------------
// v1's block layout (8 groups of 32 lanes, group g owning rows g + 8i, each lane one whole
// 32-block of a row at a time, coalesced 16-byte loads) with less work per code and more blocks:
// all R rows' 16-byte words of a step are loaded before any is decoded; one FMA per code into a
// per-block partial, the block's scale applied once (v1: a product tree, then two multiplies and
// an add per octet); row offsets as 32-bit words (v1: 64-bit); gemv2 blocks of GV2_OUT_ROWS = 32
// output rows (twice v1's blocks: one token's experts then cover the multiprocessors, where v1
// left half of them with one block), four rows per pass and four blocks per multiprocessor
// (launch bounds; v1: 8 rows, 2 blocks). The tile
// list, the row sums in shared memory and the epilogues are v1's. Same contract (fp32
// accumulation, order not bit-identical to v1: NUMERICS.md 10.3).
#define GV2_OUT_ROWS 32u  // = 8 groups x 4 rows (gemv_pass_f4<4>)

// Rows g + 8 (r0 + i) (i < R) of the block against token t of the tile. NC: the weights through
// load_stream16 / load_stream_u8 (NVIDIA: ld.global.nc.L1::no_allocate), else plain loads.
template <u32 R, bool NC>
MX_DEVICE void gemv_pass_f4(const MoeParams& p, bool is1, u32 e, u32 start, u32 jb, u32 r0, u32 t,
                            const u32* pair_of_row, const float* x, const u32* wcodes,
                            const u8* wscales, float* row_sums) {
  u32 tid = tid_x(), g = tid / 32u, lane = tid % 32u;
  u32 K = is1 ? p.hidden : p.inter, kblocks = K / 32u;
  u32 nrows = is1 ? 2u * p.inter : p.hidden;
  u64 ebase = (u64)e * nrows * kblocks;          // the expert's first 32-block
  const uint4v* wc = (const uint4v*)wcodes + ebase;  // one 16-byte word per 32-block (4-bit codes)
  const u8* ws = wscales + ebase;
  u32 roff[R];
  u32 okmask = 0u;
#pragma unroll
  for (u32 i = 0; i < R; ++i) {
    u32 wr = g + 8u * (r0 + i);
    u32 row = weight_row(p, is1, wr, jb);
    bool ok = is1 ? weight_row_ok(p, wr, jb) : row < nrows;
    roff[i] = ok ? row * kblocks : 0u;
    okmask |= ok ? 1u << i : 0u;
  }
  u64 xo = is1 ? (u64)(pair_of_row[start + t] / p.top_k) * K : (u64)(start + t) * K;
  const float* xr = x + xo;
  float acc[R];
#pragma unroll
  for (u32 i = 0; i < R; ++i) acc[i] = 0.0f;
  for (u32 b = lane; b < kblocks; b += 32u) {
    // Unconditional loads (a row outside the matrix reads row 0 and gets scale 0 below): no
    // branches between them, all R in flight together.
    uint4v w[R];
    u32 sb[R];
#pragma unroll
    for (u32 i = 0; i < R; ++i) {
      if (NC) {
        w[i] = load_stream16(wc + roff[i] + b);
        sb[i] = load_stream_u8(ws + roff[i] + b);
      } else {
        w[i] = wc[roff[i] + b];
        sb[i] = ws[roff[i] + b];
      }
    }
    float part[R];
#pragma unroll
    for (u32 i = 0; i < R; ++i) part[i] = 0.0f;
#pragma unroll
    for (u32 o = 0; o < 4u; ++o) {
      const float4v* xp = (const float4v*)(xr + b * 32u + o * 8u);
      float4v x0 = xp[0], x1 = xp[1];
#pragma unroll
      for (u32 i = 0; i < R; ++i) {
        u32 word = o == 0u ? w[i].x : o == 1u ? w[i].y : o == 2u ? w[i].z : w[i].w;
        float v[8];
#pragma unroll
        for (u32 k = 0; k < 4u; ++k) fp4_pair(word << (12u - 4u * k), &v[k], &v[k + 4u]);
        float d = part[i];
        d = __builtin_fmaf(v[0], x0.x, d);
        d = __builtin_fmaf(v[1], x0.y, d);
        d = __builtin_fmaf(v[2], x0.z, d);
        d = __builtin_fmaf(v[3], x0.w, d);
        d = __builtin_fmaf(v[4], x1.x, d);
        d = __builtin_fmaf(v[5], x1.y, d);
        d = __builtin_fmaf(v[6], x1.z, d);
        d = __builtin_fmaf(v[7], x1.w, d);
        part[i] = d;
      }
    }
    // FP4 values were decoded times 2^-14 (fp4_pair); rows outside the matrix have scale 0.
#pragma unroll
    for (u32 i = 0; i < R; ++i) {
      float sc = ((okmask >> i) & 1u) != 0u ? e8m0_value(sb[i]) : 0.0f;
      acc[i] = __builtin_fmaf(part[i] * 16384.0f, sc, acc[i]);
    }
  }
#pragma unroll
  for (u32 i = 0; i < R; ++i) {
    float s = sum32(acc[i]);
    if (lane == 0u) row_sums[(g + 8u * (r0 + i)) * 4u + t] = s;
  }
}

// v3 (MXMOE_HIP_GEMV=v3; not the default): the ncu profile of v2 (docs/h200-2026-12-01-hipdecode2)
// shows the v1/v2 layout bound by the L1, not by DRAM: a lane owns a whole 32-block, so a warp's
// 16-byte x load touches 32 different 128-byte lines. Here four consecutive lanes share a
// 32-block: lane l takes 4-byte word l % 4 (codes 8 (l % 4) .. + 7) of 32-block b0 + l / 4, so a
// warp reads 8 consecutive 32-blocks of a row (128 contiguous bytes per weight load) and its x
// loads cover 8 lines instead of 32. U steps of 8 32-blocks are loaded before any is decoded;
// each lane's 8-code partial gets the block's scale (the 4 lanes of a 32-block read the same
// byte). Positions past K read the last 32-block and count zero.
template <u32 R, u32 U>
MX_DEVICE void gemv_pass_q(const MoeParams& p, bool is1, u32 e, u32 start, u32 jb, u32 r0, u32 t,
                           const u32* pair_of_row, const float* x, const u32* wcodes,
                           const u8* wscales, float* row_sums) {
  u32 tid = tid_x(), g = tid / 32u, lane = tid % 32u, q = lane & 3u, kl = lane >> 2;
  u32 K = is1 ? p.hidden : p.inter, kblocks = K / 32u;
  u32 nrows = is1 ? 2u * p.inter : p.hidden;
  u64 ebase = (u64)e * nrows * kblocks;  // the expert's first 32-block
  const u32* wc = wcodes + ebase * 4u + q;
  const u8* ws = wscales + ebase;
  u32 roff[R];
  u32 okmask = 0u;
#pragma unroll
  for (u32 i = 0; i < R; ++i) {
    u32 wr = g + 8u * (r0 + i);
    u32 row = weight_row(p, is1, wr, jb);
    bool ok = is1 ? weight_row_ok(p, wr, jb) : row < nrows;
    roff[i] = ok ? row * kblocks : 0u;
    okmask |= ok ? 1u << i : 0u;
  }
  u64 xo = is1 ? (u64)(pair_of_row[start + t] / p.top_k) * K : (u64)(start + t) * K;
  const float* xr = x + xo + q * 8u;
  float acc[R];
#pragma unroll
  for (u32 i = 0; i < R; ++i) acc[i] = 0.0f;
  for (u32 b0 = 0; b0 < kblocks; b0 += 8u * U) {
    u32 w[U][R], sb[U][R];
#pragma unroll
    for (u32 u = 0; u < U; ++u) {
      u32 b = umin(b0 + 8u * u + kl, kblocks - 1u);
#pragma unroll
      for (u32 i = 0; i < R; ++i) {
        w[u][i] = load_stream_u32(wc + (u64)(roff[i] + b) * 4u);
        sb[u][i] = load_stream_u8(ws + roff[i] + b);
      }
    }
#pragma unroll
    for (u32 u = 0; u < U; ++u) {
      u32 bu = b0 + 8u * u + kl;
      bool in = bu < kblocks;
      u32 b = umin(bu, kblocks - 1u);
      const float4v* xp = (const float4v*)(xr + b * 32u);
      float4v x0 = xp[0], x1 = xp[1];
#pragma unroll
      for (u32 i = 0; i < R; ++i) {
        float v[8];
#pragma unroll
        for (u32 k = 0; k < 4u; ++k) fp4_pair(w[u][i] << (12u - 4u * k), &v[k], &v[k + 4u]);
        float d = v[0] * x0.x;
        d = __builtin_fmaf(v[1], x0.y, d);
        d = __builtin_fmaf(v[2], x0.z, d);
        d = __builtin_fmaf(v[3], x0.w, d);
        d = __builtin_fmaf(v[4], x1.x, d);
        d = __builtin_fmaf(v[5], x1.y, d);
        d = __builtin_fmaf(v[6], x1.z, d);
        d = __builtin_fmaf(v[7], x1.w, d);
        bool use = in && ((okmask >> i) & 1u) != 0u;
        // FP4 values were decoded times 2^-14 (fp4_pair).
        acc[i] = use ? __builtin_fmaf(d * 16384.0f, e8m0_value(sb[u][i]), acc[i]) : acc[i];
      }
    }
  }
#pragma unroll
  for (u32 i = 0; i < R; ++i) {
    float s = sum32(acc[i]);
    if (lane == 0u) row_sums[(g + 8u * (r0 + i)) * 4u + t] = s;
  }
}

// V2: gemv_pass_f4 (FP4 only; NC: streaming weight loads) and GV2_OUT_ROWS rows per gemv2 block.
// Q (v3): gemv_pass_q instead.
template <u32 CB, bool V2 = false, bool NC = false, bool Q = false>
MX_DEVICE void gemv_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                         const float* x, const u32* wcodes, const u8* wscales, u32* out,
                         const float* bias, const float* topw, const i32* row_of_pair,
                         u32* counters, u32* final_out) {
  MX_SHARED float code_value[256];
  MX_SHARED float row_sums[64 * 4];
  MX_SHARED u32 tmax[4];
  u32 tid = tid_x();
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_x(), &e, &start, &cnt)) return;
  if (CB != 4u) code_value[tid] = u2f(mx_dequant_bits(p.weight_fmt, tid, 127u));
  if (tid < 4u) tmax[tid] = 0u;
  sync_threads();
  u32 h = p.hidden;
  const u32 OUTR = V2 ? GV2_OUT_ROWS : GV_OUT_ROWS;  // gemv2 output rows per block
  u32 jb = is1 ? bid_y() * 32u : bid_y() * OUTR;
  // One token at a time, 4 of the group's 8 rows per pass (the weights of later tokens' passes
  // come from the cache; several tokens' x in registers left too few loads in flight, and 8
  // rows' codes spilled).
  if (V2) {
    static_assert(!V2 || CB == 4u, "the v2 GEMV decodes FP4 only");
    for (u32 t = 0; t < 4u; ++t) {
      if (t < cnt) {
        // 4 rows per pass (64 registers, no spills: four blocks per multiprocessor, 64 KiB of
        // loads in flight per multiprocessor; 8 rows per pass spilled at three blocks).
        if (Q) {
          // gemv1: the block's 64 rows in one pass, 2 steps in flight; gemv2: 32 rows, 4 steps
          // (16 four-byte weight words per lane either way).
          if (is1)
            gemv_pass_q<8, 2>(p, true, e, start, jb, 0u, t, pair_of_row, x, wcodes, wscales, row_sums);
          else
            gemv_pass_q<4, 4>(p, false, e, start, jb, 0u, t, pair_of_row, x, wcodes, wscales, row_sums);
        } else {
          gemv_pass_f4<4, NC>(p, is1, e, start, jb, 0u, t, pair_of_row, x, wcodes, wscales, row_sums);
          if (is1) gemv_pass_f4<4, NC>(p, true, e, start, jb, 4u, t, pair_of_row, x, wcodes, wscales, row_sums);
        }
      } else if (tid < 64u) {
        row_sums[tid * 4u + t] = 0.0f;
      }
    }
  } else if (CB == 4u && cnt == 1u) {
    // Decode (one token): all 8 rows in one pass, the most loads in flight.
    gemv_pass<CB, 1, 8>(p, is1, e, start, cnt, jb, 0u, 0u, pair_of_row, x, wcodes, wscales, code_value, row_sums);
    if (tid < 64u) row_sums[tid * 4u + 1u] = row_sums[tid * 4u + 2u] = row_sums[tid * 4u + 3u] = 0.0f;
  } else for (u32 t = 0; t < 4u; ++t) {
    if (t < cnt) {
      gemv_pass<CB, 1, 4>(p, is1, e, start, cnt, jb, 0u, t, pair_of_row, x, wcodes, wscales, code_value, row_sums);
      gemv_pass<CB, 1, 4>(p, is1, e, start, cnt, jb, 4u, t, pair_of_row, x, wcodes, wscales, code_value, row_sums);
    } else if (tid < 64u) {
      row_sums[tid * 4u + t] = 0.0f;
    }
  }
  sync_threads();
  if (is1) {
    u32 t = umin(tid / 32u, 3u);
    bool tv = tid / 32u < cnt;
    u32 c = tid % 32u, j = jb + c;
    bool silu = p.activation == ACT_SILU;
    u32 gi = silu ? c : 2u * c, ui = silu ? 32u + c : 2u * c + 1u;
    gemv1_finish(p, e, start, t, j, tv, row_sums[gi * 4u + t], row_sums[ui * 4u + t], pair_of_row,
                 bias, topw, tmax, out);
  } else {
    u32 wr = tid % OUTR, t = tid / OUTR, n = jb + wr;
    if (t < cnt && n < h) {
      float v = row_sums[wr * 4u + t];
      if (p.has_bias2) v += bias[(u64)e * h + n];
      if (!p.on_input) v *= topw[pair_of_row[start + t]];
      out[(u64)(start + t) * h + n] = f2u(bf16_point(p, v));
    }
    if (counters) gemv2_combine<OUTR>(p, tiles, row_of_pair, out, counters, final_out, jb);
  }
}

// The GEMM's arguments, then (gemv2, combine fused) the slot rows, the counters, the output.
#define GEMV_ARGS GEMM_ARGS, const i32 *row_of_pair, u32 *counters, u32 *final_out
#define GEMV_PASS GEMM_PASS, row_of_pair, counters, final_out
#define GEMV_KERNELS(CB)                                                                      \
  MX_KERNEL_OCC(GV_THREADS, 2) void moe_gemv1_cb##CB(GEMV_ARGS) { gemv_body<CB>(p, true, GEMV_PASS); } \
  MX_KERNEL_OCC(GV_THREADS, 2) void moe_gemv2_cb##CB(GEMV_ARGS) { gemv_body<CB>(p, false, GEMV_PASS); }
GEMV_KERNELS(4)
GEMV_KERNELS(6)
GEMV_KERNELS(8)
// Blocks per multiprocessor of the v2 / v3 GEMVs: NVIDIA 4 (v2: 64 registers, no spill in the
// loop) and 3 (v3: 80 registers, none); AMD keeps v1's 2 (at 4, gfx942 spilled a VGPR; the AMD
// code is built, not run).
#if defined(MX_AMD)
#define GV2_OCC 2
#define GV3_OCC 2
#else
#define GV2_OCC 4
#define GV3_OCC 3
#endif
// v2: streaming weight loads (MXMOE_HIP_GEMV=v2); v2c: the same with plain (L1-cached) loads.
MX_KERNEL_OCC(GV_THREADS, GV2_OCC) void moe_gemv1_v2_cb4(GEMV_ARGS) { gemv_body<4, true, true>(p, true, GEMV_PASS); }
MX_KERNEL_OCC(GV_THREADS, GV2_OCC) void moe_gemv2_v2_cb4(GEMV_ARGS) { gemv_body<4, true, true>(p, false, GEMV_PASS); }
MX_KERNEL_OCC(GV_THREADS, GV2_OCC) void moe_gemv1_v2c_cb4(GEMV_ARGS) { gemv_body<4, true, false>(p, true, GEMV_PASS); }
MX_KERNEL_OCC(GV_THREADS, GV2_OCC) void moe_gemv2_v2c_cb4(GEMV_ARGS) { gemv_body<4, true, false>(p, false, GEMV_PASS); }
// v3: gemv_pass_q (MXMOE_HIP_GEMV=v3).
MX_KERNEL_OCC(GV_THREADS, GV3_OCC) void moe_gemv1_v3_cb4(GEMV_ARGS) { gemv_body<4, true, true, true>(p, true, GEMV_PASS); }
MX_KERNEL_OCC(GV_THREADS, GV3_OCC) void moe_gemv2_v3_cb4(GEMV_ARGS) { gemv_body<4, true, true, true>(p, false, GEMV_PASS); }
#include "gemv_mma.h"  // the matrix-core GEMV (NVIDIA; MXMOE_HIP_GEMV=mma)

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

// Element i (row-major, pairs x inter) of gemm1's output as mx_to_bf16_p8 stores it: bf16 hi
// at its place in its group of 8 (0, 4, 1, 5, 2, 6, 3, 7) and, for weight-only schemes (hi +
// lo), the bf16 of v - hi (0 where hi is Inf or NaN) pairs x inter elements further.
MX_DEVICE void gemm_p8_store(const MoeParams& p, u16* o, u64 i, float v) {
  u64 pos = p8_pos(i);
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
// stays NaN). As fp4_pair above, with f32 in place of f16.
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
            gemm_p8_store(p, (u16*)out, (u64)(start + r) * inter + j, u2f(o));
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

extern MX_SHARED __attribute__((aligned(16))) u16 v2_dsmem[];

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

#include "gemm_mma.h"  // the swap-AB GEMM (NVIDIA; MXMOE_HIP_GEMM=mma)

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
#endif

// ---- gfx950: the scaled MFMA on MX operands --------------------------------------------------
// CDNA4 (MI350 / MI355, gfx950) multiplies MX operands directly: v_mfma_scale_f32_16x16x128_
// f8f6f4 takes 16 x 128 FP8 / FP6 / FP4 codes of A and B with one E8M0 scale per 32-element block
// and accumulates in f32 (LLVM AMDGPUUsage and the CDNA4 ISA guide: lane l holds row l % 16 and
// the 32-block l / 16 of the 128-wide K chunk, its codes packed in the low dwords of an 8-dword
// operand, its scale byte in a 32-bit operand; D as v_mfma_f32_16x16x16: rows 4 (l / 16) + i,
// column l % 16). Here A = weight rows (their packed codes and scale bytes as stored: our FP4 /
// FP6 / FP8 packing is the same little-endian bit stream), B = the activations' codes: the input
// and the intermediate are quantized by mx_quantize with the activation format and scale mode
// (QDQ is idempotent, so these codes dequantize to exactly the QDQ'd values the bf16 path
// multiplies). A block = 4 wavefronts; wave w owns weight rows 16w..16w+15 of the 64, all 64
// token rows (4 MFMAs per K chunk). The epilogue is the bf16 path's. Only in the gfx950 code
// object; built, not run (no MI350 here).
#if defined(__gfx950__)
typedef int v8i32 __attribute__((ext_vector_type(8)));
typedef float v4f32s __attribute__((ext_vector_type(4)));

// The MFMA's operand format ids (cbsz / blgp): FP8 E4M3 0, BF8 E5M2 1, FP6 E2M3 2, BF6 E3M2 3,
// FP4 E2M1 4.
#define MFMA_FMT(f) ((f) == FMT_MXFP8_E4M3 ? 0 : (f) == FMT_MXFP8_E5M2 ? 1 : (f) == FMT_MXFP6_E2M3 ? 2 : (f) == FMT_MXFP6_E3M2 ? 3 : 4)
#define CODE_BITS(f) ((f) == FMT_MXFP4 ? 4u : ((f) == FMT_MXFP6_E2M3 || (f) == FMT_MXFP6_E3M2) ? 6u : 8u)

// One lane's 32-block operand: cb words of codes (zero past the matrix) and the scale byte.
template <u32 CB>
MX_DEVICE v8i32 mx_operand(const u32* codes, const u8* scales, u64 sidx, int* scale) {
  v8i32 v = {0, 0, 0, 0, 0, 0, 0, 0};
  if (sidx == ~0ull) {
    *scale = 127;
    return v;
  }
  const u32* src = codes + sidx * CB;
#pragma unroll
  for (u32 q = 0; q < CB; ++q) v[q] = (int)src[q];
  *scale = (int)scales[sidx];
  return v;
}

#define MXT_M 64u  // token rows per tile
#define MXT_N 64u  // weight rows per tile (stage 1: 32 intermediate columns)

template <u32 WF, u32 AF>
MX_DEVICE void gemm_mx_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                            const u32* acodes, const u8* ascales, const u32* wcodes,
                            const u8* wscales, u32* out, const float* bias, const float* topw) {
  MX_SHARED float sC[MXT_M * (MXT_N + 1u)];
  MX_SHARED u64 xrow[MXT_M];  // the token row's first block index; ~0 = no row
  MX_SHARED u64 wrow[MXT_N];
  MX_SHARED u32 rowmax[MXT_M];
  const u32 CBW = CODE_BITS(WF), CBA = CODE_BITS(AF);
  u32 tid = tid_x(), lane = tid % 64u, wave = tid / 64u;
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_x(), &e, &start, &cnt)) return;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u;
  u32 nrows = is1 ? 2u * inter : h;
  u32 jb = is1 ? bid_y() * 32u : bid_y() * MXT_N;
  for (u32 r = tid; r < MXT_M; r += 256u) {
    u64 o = ~0ull;
    if (r < cnt) o = is1 ? (u64)(pair_of_row[start + r] / p.top_k) * kblocks : (u64)(start + r) * kblocks;
    xrow[r] = o;
    rowmax[r] = 0u;
    u32 row = weight_row(p, is1, r, jb);
    bool ok = is1 ? (jb + (p.activation == ACT_SILU ? r % 32u : r / 2u)) < inter : row < nrows;
    wrow[r] = ok ? ((u64)e * nrows + row) * kblocks : ~0ull;
  }
  sync_threads();
  v4f32s acc[4];
#pragma unroll
  for (u32 n = 0; n < 4u; ++n) acc[n] = (v4f32s){0.0f, 0.0f, 0.0f, 0.0f};
  u32 wr = 16u * wave + (lane % 16u);
  for (u32 kc = 0; kc < (kblocks + 3u) / 4u; ++kc) {
    u32 blk = kc * 4u + lane / 16u;
    int sa;
    u64 ws = (wrow[wr] == ~0ull || blk >= kblocks) ? ~0ull : wrow[wr] + blk;
    v8i32 a = mx_operand<CBW>(wcodes, wscales, ws, &sa);
#pragma unroll
    for (u32 n = 0; n < 4u; ++n) {
      u32 tr = 16u * n + (lane % 16u);
      int sb;
      u64 xs = (xrow[tr] == ~0ull || blk >= kblocks) ? ~0ull : xrow[tr] + blk;
      v8i32 b = mx_operand<CBA>(acodes, ascales, xs, &sb);
      acc[n] = __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a, b, acc[n], MFMA_FMT(WF), MFMA_FMT(AF), 0, sa, 0, sb);
    }
  }
  // D[weight row 4 (l / 16) + i][token l % 16] of each token frag n -> sC[token][weight column].
#pragma unroll
  for (u32 n = 0; n < 4u; ++n)
#pragma unroll
    for (u32 i = 0; i < 4u; ++i)
      sC[(16u * n + lane % 16u) * (MXT_N + 1u) + 16u * wave + 4u * (lane / 16u) + i] = acc[n][i];
  sync_threads();
  gemm_epilogue<MXT_M, MXT_N, 256u>(p, is1, e, start, cnt, jb, sC, rowmax, pair_of_row, out, bias, topw);
}

#define GEMM_MX_ARGS                                                                         \
  MoeParams p, const u32 *pair_of_row, const u32 *tiles, const u32 *acodes, const u8 *ascales, \
      const u32 *wcodes, const u8 *wscales, u32 *out, const float *bias, const float *topw
#define GEMM_MX_PASS pair_of_row, tiles, acodes, ascales, wcodes, wscales, out, bias, topw
// moe_gemm{1,2}_mx_<weight>_<activation>: the OCP MX schemes with MX activations.
#define GEMM_MX_KERNELS(NAME, WF, AF)                                                                         \
  MX_KERNEL(256) void moe_gemm1_mx_##NAME(GEMM_MX_ARGS) { gemm_mx_body<WF, AF>(p, true, GEMM_MX_PASS); }  \
  MX_KERNEL(256) void moe_gemm2_mx_##NAME(GEMM_MX_ARGS) { gemm_mx_body<WF, AF>(p, false, GEMM_MX_PASS); }
GEMM_MX_KERNELS(fp4_fp4, FMT_MXFP4, FMT_MXFP4)
GEMM_MX_KERNELS(fp4_fp6e3m2, FMT_MXFP4, FMT_MXFP6_E3M2)
GEMM_MX_KERNELS(fp4_fp6e2m3, FMT_MXFP4, FMT_MXFP6_E2M3)
GEMM_MX_KERNELS(fp6e3m2_fp6e3m2, FMT_MXFP6_E3M2, FMT_MXFP6_E3M2)
GEMM_MX_KERNELS(fp6e2m3_fp6e2m3, FMT_MXFP6_E2M3, FMT_MXFP6_E2M3)
GEMM_MX_KERNELS(fp8e4m3_fp8e4m3, FMT_MXFP8_E4M3, FMT_MXFP8_E4M3)
GEMM_MX_KERNELS(fp8e5m2_fp8e5m2, FMT_MXFP8_E5M2, FMT_MXFP8_E5M2)
#endif

// ---- combine (shaders/moe_combine.wgsl): per (token, h) the sum over the k slots in slot order.
MX_KERNEL(256) void moe_combine(MoeParams p, const i32* row_of_pair, const float* y,
                                          u32* out) {
  u64 idx = (u64)bid_x() * 256u + tid_x();
  u32 h = p.hidden;
  if (idx >= (u64)p.m * h) return;
  u64 t = idx / h;
  u32 n = (u32)(idx % h);
  float acc = 0.0f;
  for (u32 j = 0; j < p.top_k; ++j) {
    i32 r = row_of_pair[t * p.top_k + j];
    if (r >= 0) acc = acc + y[(u64)r * h + n];
  }
  out[idx] = f2u(bf16_point(p, acc));
}
