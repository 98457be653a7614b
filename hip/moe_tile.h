// moe_tile.h: what the expert kernels (GEMVs and GEMMs) take from the tile list and the weights:
// load_tile, the weight-row maps (weight_row, weight_row_ok), code_of, and the GEMM_ARGS /
// GEMM_PASS argument lists. Included by hip/mxmoe.cu after the routing and lists headers, before
// gemv.h; relies on moe_common.h (MoeParams) and mx_formats.h (ACT_SILU).
#pragma once

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
