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
//   moe_gemm_mx_scaled (gfx950 only)       v_mfma_scale_f32_16x16x128_f8f6f4 on the packed codes
#include "mx_common.h"
#include "exact_math.h"
#include "mx_fragment.h"

typedef unsigned char u8;

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

struct RouteShared {
  float key[1024];
  u32 taken[1024];
  float gscore[32];
  u32 groups;
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

MX_DEVICE u32 r_exp(const float* lg, const RouteShared& s, u32 i) {
  return exact_exp_neg(ftz_bits(f2u(lg[i] - s.rmax)));
}
MX_DEVICE u32 r_score(const float* lg, const RouteShared& s, const RouteParams& rp, u32 i) {
  if (rp.scoring == SCORING_SIGMOID) return exact_sigmoid(f2u(lg[i]));
  return exact_div(r_exp(lg, s, i), s.rtotal);
}

MX_KERNEL(64) void mx_route(RouteParams rp, const float* logits, const u32* bias,
                                      i32* ids, float* weights) {
  MX_SHARED RouteShared s;
  u32 lid = tid_x();
  u32 t = bid_x();
  if (t >= rp.m) return;
  u32 e = rp.n_experts, k = rp.top_k;
  const float* lg = logits + (u64)t * e;
  bool exact_softmax = rp.has_bias != 0u && rp.scoring == SCORING_SOFTMAX;
  if (exact_softmax) {
    if (lid == 0u) {
      float mx = lg[0];
      for (u32 i = 1; i < e; ++i) mx = lg[i] > mx ? lg[i] : mx;
      s.rmax = mx;
    }
    sync_threads();
    for (u32 i = lid; i < e; i += R_WG) s.key[i] = u2f(r_exp(lg, s, i));
    sync_threads();
    if (lid == 0u) {
      float total = 0.0f;
      for (u32 i = 0; i < e; ++i) total = add_ftz(f2u(total), f2u(s.key[i]));
      s.rtotal = f2u(total);
    }
    sync_threads();
  }
  for (u32 i = lid; i < e; i += R_WG) {
    s.key[i] = rp.has_bias != 0u ? add_ftz(r_score(lg, s, rp, i), bias[i]) : lg[i];
    s.taken[i] = 0u;
  }
  sync_threads();
  u32 per = e;
  if (rp.n_group > 0u) {
    per = e / rp.n_group;
    if (lid < rp.n_group) s.gscore[lid] = r_group_score(s, rp, lid, per);
    sync_threads();
    if (lid == 0u) {
      u32 chosen = 0u;
      for (u32 r = 0; r < rp.topk_group; ++r) {
        i32 best = -1;
        float bv = 0.0f;
        for (u32 g = 0; g < rp.n_group; ++g) {
          if ((chosen & (1u << g)) == 0u && (best < 0 || key_gt(s.gscore[g], bv))) {
            best = (i32)g;
            bv = s.gscore[g];
          }
        }
        chosen |= 1u << (u32)best;
      }
      s.groups = chosen;
    }
  } else if (lid == 0u) {
    s.groups = 0xFFFFFFFFu;
  }
  sync_threads();
  u32 groups = s.groups;
  for (u32 j = 0; j < k; ++j) {
    i32 bi = -1;
    float bv = 0.0f;
    for (u32 i = lid; i < e; i += R_WG) {
      if (s.taken[i] == 0u && (groups & (1u << umin(i / per, 31u))) != 0u) {
        if (bi < 0 || key_gt(s.key[i], bv)) {
          bi = (i32)i;
          bv = s.key[i];
        }
      }
    }
    s.bv[lid] = bv;
    s.bi[lid] = bi;
    sync_threads();
    for (u32 st = R_WG / 2u; st > 0u; st /= 2u) {
      if (lid < st && r_better(s.bv[lid + st], s.bi[lid + st], s.bv[lid], s.bi[lid])) {
        s.bv[lid] = s.bv[lid + st];
        s.bi[lid] = s.bi[lid + st];
      }
      sync_threads();
    }
    if (lid == 0u) {
      u32 b = (u32)s.bi[0];
      s.sel[j] = b;
      s.taken[b] = 1u;
    }
    sync_threads();
  }
  float mx = lg[s.sel[0]];
  float part = 0.0f;
  if (rp.scoring == SCORING_SOFTMAX && !exact_softmax)
    for (u32 i = lid; i < e; i += R_WG) part += fast_exp(lg[i] - mx);
  s.sum[lid] = part;
  sync_threads();
  for (u32 st = R_WG / 2u; st > 0u; st /= 2u) {
    if (lid < st) s.sum[lid] = s.sum[lid] + s.sum[lid + st];
    sync_threads();
  }
  float scaling = u2f(rp.scaling);
  if (rp.scoring == SCORING_SIGMOID || exact_softmax) {
    if (lid < k) s.sel_score[lid] = r_score(lg, s, rp, s.sel[lid]);
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
    return;
  }
  if (lid != 0u) return;
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

// lists: one 256-thread block (shaders/moe_lists.wgsl): per-expert row lists and the tile list.
MX_KERNEL(256) void moe_lists(MoeParams p, const i32* topk_ids, const i32* expert_map,
                                        u32* pair_of_row, i32* row_of_pair, u32* tiles) {
  MX_SHARED u32 count[1024];
  MX_SHARED u32 offset[1024];
  MX_SHARED u32 scan_rows[256];
  MX_SHARED u32 scan_tiles[256];
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
  u32 acc = scan_rows[lid] - rows_here, nt = scan_tiles[lid] - tiles_here;
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
  if (lid == 255u) tiles[0] = scan_tiles[255];
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

// The tile of this block: (expert, first row, end row); false when the slot is empty.
MX_DEVICE bool load_tile(const u32* tiles, u32 slot, u32* e, u32* start, u32* cnt) {
  if (slot >= tiles[0]) return false;
  *e = tiles[1u + 3u * slot];
  *start = tiles[2u + 3u * slot];
  *cnt = tiles[3u + 3u * slot] - *start;
  return true;
}

// Weight row (within the expert) of tile row wr: stage 1 maps 64 rows to the gate and up rows
// of 32 intermediate columns starting at jb (SiLU: gate rows [0, I), up [I, 2I); SwiGLU-OAI:
// interleaved); stage 2 takes rows jb + wr.
MX_DEVICE u32 weight_row(const MoeParams& p, bool is1, u32 wr, u32 jb) {
  if (!is1) return jb + wr;
  if (p.activation == ACT_SILU) return wr < 32u ? jb + wr : p.inter + jb + wr - 32u;
  return 2u * jb + wr;
}

// Code j of a block of `cb`-bit codes held in words w[0..cb).
MX_DEVICE u32 code_of(const u32* w, u32 j, u32 cb) {
  u32 bit = j * cb, i = bit >> 5, off = bit & 31u;
  u32 c = w[i] >> off;
  if (off + cb > 32u) c |= w[i + 1] << (32u - off);
  return c & ((1u << cb) - 1u);
}

// ---- grouped GEMM (prefill) on matrix cores -------------------------------------------------
// A block = 4 warps / wavefronts; tile = 64 rows (token-expert pairs of one expert) x 64 weight
// rows, K in steps of one 32-block. Each warp owns 16 rows x 64 columns. x is staged as bf16
// (hi, and lo = x - hi for weight-only schemes, whose activations are not on the MX grid);
// weights are dequantized (code value x E8M0 scale, exact in bf16) into shared memory.

#define GT_M 64u
#define GT_N 64u
#define GT_K 32u
#define LDS (GT_K + 8u)
#define GEMM_THREADS (4u * WARP)

MX_DEVICE u16 bf16_bits_rne(float x) { return (u16)(f2u(bf16_round(x)) >> 16); }

template <bool SPLIT>
MX_DEVICE void gemm_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                         const float* x, const u32* wcodes, const u8* wscales, u32* out,
                         const float* bias, const float* topw) {
  MX_SHARED u16 sXh[GT_M * LDS];
  MX_SHARED u16 sXl[GT_M * LDS];
  MX_SHARED u16 sW[GT_N * LDS];
  MX_SHARED float sC[GT_M * (GT_N + 1u)];
  MX_SHARED float code_value[256];
  MX_SHARED u64 xoff[GT_M];
  MX_SHARED u64 wrow[GT_N];  // the row's first scale index; ~0 = no row
  MX_SHARED u32 rowmax[GT_M];
  u32 tid = tid_x(), lane = tid % WARP, warp = tid / WARP;
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_x(), &e, &start, &cnt)) return;
  u32 h = p.hidden, inter = p.inter;
  u32 K = is1 ? h : inter, kblocks = K / 32u;
  u32 nrows = is1 ? 2u * inter : h;
  u32 jb = is1 ? bid_y() * 32u : bid_y() * GT_N;
  u32 cb = mx_spec(p.weight_fmt).code_bits;
  for (u32 i = tid; i < 256u; i += GEMM_THREADS) code_value[i] = u2f(mx_dequant_bits(p.weight_fmt, i, 127u));
  for (u32 r = tid; r < GT_M; r += GEMM_THREADS) {
    u64 o = ~0ull;
    if (r < cnt) o = is1 ? (u64)(pair_of_row[start + r] / p.top_k) * K : (u64)(start + r) * K;
    xoff[r] = o;
    rowmax[r] = 0u;
  }
  for (u32 r = tid; r < GT_N; r += GEMM_THREADS) {
    u32 row = weight_row(p, is1, r, jb);
    bool ok = is1 ? (jb + (p.activation == ACT_SILU ? r % 32u : r / 2u)) < inter : row < nrows;
    wrow[r] = ok ? ((u64)e * nrows + row) * kblocks : ~0ull;
  }
  FragC acc[GT_N / FRAG_N];
  #pragma unroll
  for (u32 j = 0; j < GT_N / FRAG_N; ++j)
    #pragma unroll
    for (u32 i = 0; i < FRAG_C; ++i) acc[j].v[i] = 0.0f;
  sync_threads();
  for (u32 kb = 0; kb < kblocks; ++kb) {
    // x: 64 rows x 32 values as float4 loads.
    for (u32 q = tid; q < GT_M * 8u; q += GEMM_THREADS) {
      u32 r = q / 8u, c4 = (q % 8u) * 4u;
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (xoff[r] != ~0ull) {
        const float* src = x + xoff[r] + kb * 32u + c4;
        #pragma unroll
        for (u32 i = 0; i < 4u; ++i) v[i] = src[i];
      }
      #pragma unroll
      for (u32 i = 0; i < 4u; ++i) {
        u16 hi = bf16_bits_rne(v[i]);
        sXh[r * LDS + c4 + i] = hi;
        if (SPLIT) {
          float hf = u2f((u32)hi << 16);
          float lo = (f2u(hf) & 0x7F800000u) == 0x7F800000u ? 0.0f : v[i] - hf;
          sXl[r * LDS + c4 + i] = bf16_bits_rne(lo);
        }
      }
    }
    // Weights: 64 rows x 4 octets; code value x scale, exact in bf16.
    for (u32 q = tid; q < GT_N * 4u; q += GEMM_THREADS) {
      u32 r = q / 4u, o = q % 4u;
      u64 sidx = wrow[r];
      float vals[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (sidx != ~0ull) {
        sidx += kb;
        float sc = e8m0_value(wscales[sidx]);
        const u32* wb = wcodes + sidx * cb;
        if (cb == 4u) {
          u32 w = wb[o];
          #pragma unroll
          for (u32 i = 0; i < 8u; ++i) vals[i] = code_value[(w >> (4u * i)) & 15u] * sc;
        } else {
          // 8 codes of 6 or 8 bits span at most three words (no private array: no scratch).
          u32 bit0 = o * 8u * cb, wi = bit0 / 32u, b0 = bit0 % 32u, end = b0 + 8u * cb;
          u32 w0 = wb[wi], w1 = end > 32u ? wb[wi + 1u] : 0u, w2 = end > 64u ? wb[wi + 2u] : 0u;
          #pragma unroll
          for (u32 i = 0; i < 8u; ++i) {
            u32 bit = b0 + i * cb;
            u32 c = bit < 32u ? mx_code_at(w0, w1, bit, cb)
                              : (bit < 64u ? mx_code_at(w1, w2, bit - 32u, cb) : mx_code_at(w2, 0u, bit - 64u, cb));
            vals[i] = code_value[c] * sc;
          }
        }
      }
      #pragma unroll
      for (u32 i = 0; i < 8u; ++i) sW[r * LDS + o * 8u + i] = bf16_bits_rne(vals[i]);
    }
    sync_threads();
    #pragma unroll
    for (u32 k16 = 0; k16 < GT_K; k16 += FRAG_K) {
      FragA ah, al;
      load_a(ah, sXh + (warp * 16u) * LDS + k16, LDS, lane);
      if (SPLIT) load_a(al, sXl + (warp * 16u) * LDS + k16, LDS, lane);
      #pragma unroll
      for (u32 j = 0; j < GT_N / FRAG_N; ++j) {
        FragB b;
        load_b(b, sW + (j * FRAG_N) * LDS + k16, LDS, lane);
        mma(acc[j], ah, b);
        if (SPLIT) mma(acc[j], al, b);
      }
    }
    sync_threads();
  }
  #pragma unroll
  for (u32 j = 0; j < GT_N / FRAG_N; ++j)
    #pragma unroll
    for (u32 i = 0; i < FRAG_C; ++i)
      sC[(warp * 16u + c_row(lane, i)) * (GT_N + 1u) + j * FRAG_N + c_col(lane, i)] = acc[j].v[i];
  sync_threads();
  const u32 per_row = GEMM_THREADS / GT_M;  // threads per tile row
  u32 r = tid / per_row, part = tid % per_row;
  if (is1) {
    // Columns c of the 32 intermediate columns: gate in tile column c (SiLU) or 2c
    // (SwiGLU-OAI), up in 32 + c or 2c + 1.
    const u32 cols = 32u / per_row;
    u32 vals[32 / 2];
    u32 mx = 0u;
    float rw = 1.0f;
    if (p.on_input && r < cnt) rw = topw[pair_of_row[start + r]];
    #pragma unroll
    for (u32 i = 0; i < cols; ++i) {
      u32 c = part * cols + i;
      bool silu = p.activation == ACT_SILU;
      u32 gi = silu ? c : 2u * c, ui = silu ? 32u + c : 2u * c + 1u;
      u32 grow = silu ? jb + c : 2u * (jb + c), urow = silu ? inter + jb + c : 2u * (jb + c) + 1u;
      float g = sC[r * (GT_N + 1u) + gi], u = sC[r * (GT_N + 1u) + ui];
      if (p.has_bias13) {
        g += bias[(u64)e * 2u * inter + grow];
        u += bias[(u64)e * 2u * inter + urow];
      }
      if (p.on_input && r < cnt) {
        g *= rw;
        u *= rw;
      }
      u32 v = f2u(bf16_point(p, activate(p, bf16_point(p, g), bf16_point(p, u))));
      vals[i] = v;
      mx = umax(mx, v & 0x7FFFFFFFu);
    }
    if (p.act_fmt != FMT_NONE) atomic_max_u32(&rowmax[r], mx);
    sync_threads();
    if (r < cnt) {
      u32 byte = p.act_fmt != FMT_NONE ? mx_scale_byte(p.act_fmt, p.act_mode, rowmax[r]) : 0u;
      #pragma unroll
      for (u32 i = 0; i < cols; ++i) {
        u32 o = vals[i];
        if (p.act_fmt != FMT_NONE) o = intermediate_qdq(p, o, byte);
        out[(u64)(start + r) * inter + jb + part * cols + i] = o;
      }
    }
  } else if (r < cnt) {
    const u32 cols = GT_N / per_row;
    float w = p.on_input ? 1.0f : topw[pair_of_row[start + r]];
    #pragma unroll
    for (u32 i = 0; i < cols; ++i) {
      u32 c = part * cols + i, n = jb + c;
      if (n < h) {
        float v = sC[r * (GT_N + 1u) + c];
        if (p.has_bias2) v += bias[(u64)e * h + n];
        if (!p.on_input) v *= w;
        out[(u64)(start + r) * h + n] = f2u(bf16_point(p, v));
      }
    }
  }
}

#define GEMM_ARGS                                                                            \
  MoeParams p, const u32 *pair_of_row, const u32 *tiles, const float *x, const u32 *wcodes, \
      const u8 *wscales, u32 *out, const float *bias, const float *topw
#define GEMM_PASS pair_of_row, tiles, x, wcodes, wscales, out, bias, topw

MX_KERNEL(GEMM_THREADS) void moe_gemm1(GEMM_ARGS) { gemm_body<false>(p, true, GEMM_PASS); }
MX_KERNEL(GEMM_THREADS) void moe_gemm2(GEMM_ARGS) { gemm_body<false>(p, false, GEMM_PASS); }
MX_KERNEL(GEMM_THREADS) void moe_gemm1_split(GEMM_ARGS) { gemm_body<true>(p, true, GEMM_PASS); }
MX_KERNEL(GEMM_THREADS) void moe_gemm2_split(GEMM_ARGS) { gemm_body<true>(p, false, GEMM_PASS); }

// ---- grouped GEMV (decode) -----------------------------------------------------------------
// A block = 256 threads = 8 groups of 32 lanes; a tile = <= 4 rows of one expert x 64 weight
// rows; group g owns weight rows g + 8i (i < 8), its lanes walk K one whole 32-block at a time
// (CB words + a scale byte per row), x read from global memory (small, cached). Lane partials
// are summed over the 32 lanes in a fixed order (shared memory), deterministic.

#define GV_THREADS 256u

MX_DEVICE float group32_sum(float* red, u32 tid, float v) {
  // red: this group's 32 floats of shared memory (tid % 32 indexes it). Fixed pairwise order.
  u32 lane = tid % 32u;
  red[lane] = v;
  for (u32 s = 16u; s > 0u; s >>= 1) {
    sync_threads();
    if (lane < s) red[lane] = red[lane] + red[lane + s];
  }
  sync_threads();
  return red[0];
}

// R rows of the group's 8 per pass over K (T = 4 tokens: two passes of 4 rows, which keeps the
// registers of 4 tokens' x, 4 rows' codes and 16 accumulators within budget on every target).
template <u32 CB, u32 T, u32 R>
MX_DEVICE void gemv_pass(const MoeParams& p, bool is1, u32 e, u32 start, u32 cnt, u32 jb, u32 r0,
                         const u32* pair_of_row, const float* x, const u32* wcodes,
                         const u8* wscales, const float* code_value, float* red, float* row_sums) {
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
  u64 xo[T];
  #pragma unroll
  for (u32 t = 0; t < T; ++t) {
    xo[t] = ~0ull;
    if (t < cnt) xo[t] = is1 ? (u64)(pair_of_row[start + t] / p.top_k) * K : (u64)(start + t) * K;
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
        #pragma unroll
        for (u32 q = 0; q < CB; ++q) w[i][q] = src[q];
        sc[i] = e8m0_value(wscales[sbase[i] + b]);
      } else {
        #pragma unroll
        for (u32 q = 0; q < CB; ++q) w[i][q] = 0u;
        sc[i] = 0.0f;
      }
    }
    #pragma unroll
    for (u32 o = 0; o < 4u; ++o) {
      float xv[T][8];
      #pragma unroll
      for (u32 t = 0; t < T; ++t)
        #pragma unroll
        for (u32 q = 0; q < 8u; ++q) xv[t][q] = xo[t] != ~0ull ? x[xo[t] + b * 32u + o * 8u + q] : 0.0f;
      #pragma unroll
      for (u32 i = 0; i < R; ++i) {
        float v[8];
        #pragma unroll
        for (u32 q = 0; q < 8u; ++q) v[q] = code_value[code_of(w[i], o * 8u + q, CB)];
        #pragma unroll
        for (u32 t = 0; t < T; ++t) {
          float d = ((v[0] * xv[t][0] + v[1] * xv[t][1]) + (v[2] * xv[t][2] + v[3] * xv[t][3])) +
                    ((v[4] * xv[t][4] + v[5] * xv[t][5]) + (v[6] * xv[t][6] + v[7] * xv[t][7]));
          acc[i][t] += d * sc[i];
        }
      }
    }
  }
  #pragma unroll
  for (u32 i = 0; i < R; ++i)
    #pragma unroll
    for (u32 t = 0; t < T; ++t) {
      float s = group32_sum(red + g * 32u, tid, acc[i][t]);
      if (lane == 0u) row_sums[(g + 8u * (r0 + i)) * 4u + t] = s;
    }
  if (T == 1u && lane == 0u)
    #pragma unroll
    for (u32 i = 0; i < R; ++i)
      #pragma unroll
      for (u32 t = 1; t < 4u; ++t) row_sums[(g + 8u * (r0 + i)) * 4u + t] = 0.0f;
  sync_threads();
}

template <u32 CB>
MX_DEVICE void gemv_body(const MoeParams& p, bool is1, const u32* pair_of_row, const u32* tiles,
                         const float* x, const u32* wcodes, const u8* wscales, u32* out,
                         const float* bias, const float* topw) {
  MX_SHARED float code_value[256];
  MX_SHARED float red[GV_THREADS];
  MX_SHARED float row_sums[64 * 4];
  MX_SHARED u32 tmax[4];
  u32 tid = tid_x();
  u32 e, start, cnt;
  if (!load_tile(tiles, bid_x(), &e, &start, &cnt)) return;
  code_value[tid] = u2f(mx_dequant_bits(p.weight_fmt, tid, 127u));
  if (tid < 4u) tmax[tid] = 0u;
  sync_threads();
  u32 h = p.hidden, inter = p.inter;
  u32 jb = is1 ? bid_y() * 32u : bid_y() * 64u;
  if (cnt == 1u) {
    gemv_pass<CB, 1, 8>(p, is1, e, start, cnt, jb, 0u, pair_of_row, x, wcodes, wscales, code_value, red, row_sums);
  } else {
    gemv_pass<CB, 4, 4>(p, is1, e, start, cnt, jb, 0u, pair_of_row, x, wcodes, wscales, code_value, red, row_sums);
    gemv_pass<CB, 4, 4>(p, is1, e, start, cnt, jb, 4u, pair_of_row, x, wcodes, wscales, code_value, red, row_sums);
  }
  if (is1) {
    u32 t = umin(tid / 32u, 3u);
    bool tv = tid / 32u < cnt;
    u32 c = tid % 32u, j = jb + c;
    bool silu = p.activation == ACT_SILU;
    u32 gi = silu ? c : 2u * c, ui = silu ? 32u + c : 2u * c + 1u;
    u32 grow = silu ? j : 2u * j, urow = silu ? inter + j : 2u * j + 1u;
    float gv = row_sums[gi * 4u + t], uv = row_sums[ui * 4u + t];
    if (p.has_bias13) {
      gv += bias[(u64)e * 2u * inter + grow];
      uv += bias[(u64)e * 2u * inter + urow];
    }
    if (p.on_input && tv) {
      float rw = topw[pair_of_row[start + t]];
      gv *= rw;
      uv *= rw;
    }
    u32 val = f2u(bf16_point(p, activate(p, bf16_point(p, gv), bf16_point(p, uv))));
    if (p.act_fmt != FMT_NONE && tv) atomic_max_u32(&tmax[t], val & 0x7FFFFFFFu);
    sync_threads();
    if (tv) {
      if (p.act_fmt != FMT_NONE) val = intermediate_qdq(p, val, mx_scale_byte(p.act_fmt, p.act_mode, tmax[t]));
      out[(u64)(start + t) * inter + j] = val;
    }
  } else {
    u32 wr = tid % 64u, t = tid / 64u, n = jb + wr;
    if (t < cnt && n < h) {
      float v = row_sums[wr * 4u + t];
      if (p.has_bias2) v += bias[(u64)e * h + n];
      if (!p.on_input) v *= topw[pair_of_row[start + t]];
      out[(u64)(start + t) * h + n] = f2u(bf16_point(p, v));
    }
  }
}

#define GEMV_KERNELS(CB)                                                                      \
  MX_KERNEL(GV_THREADS) MX_REGS_256 void moe_gemv1_cb##CB(GEMM_ARGS) { gemv_body<CB>(p, true, GEMM_PASS); } \
  MX_KERNEL(GV_THREADS) MX_REGS_256 void moe_gemv2_cb##CB(GEMM_ARGS) { gemv_body<CB>(p, false, GEMM_PASS); }
GEMV_KERNELS(4)
GEMV_KERNELS(6)
GEMV_KERNELS(8)

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
