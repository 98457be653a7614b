// gemm_mx.h: gfx950 only: the grouped GEMM on MX operands by the scaled MFMA
// (v_mfma_scale_f32_16x16x128_f8f6f4): gemm_mx_body, moe_gemm{1,2}_mx_<weight>_<activation>.
// Included by hip/mxmoe.cu after the other GEMMs; relies on gemm_v1.h (gemm_epilogue),
// moe_tile.h (load_tile, weight_row) and moe_common.h (MoeParams).
#pragma once

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
