// gemv.h: the grouped GEMV for decode (shaders/moe_gemv.wgsl): v1 moe_gemv{1,2}_cb{4,6,8}, v2 /
// v2c (gemv_pass_f4, FP4) and v3 (gemv_pass_q), gemv2's fused combine (gemv2_combine), the FP4
// register decode (fp4_pair) and GEMV_ARGS. Included by hip/mxmoe.cu after moe_tile.h (load_tile,
// weight_row, code_of, GEMM_ARGS) and gemv_epilogue.h (gemv1_finish); gemv_mma.h follows it.
#pragma once

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
