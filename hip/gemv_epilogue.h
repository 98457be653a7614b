// gemv_epilogue.h: gemv1's epilogue, included by mxmoe.cu (after moe_common.h: MoeParams,
// activate, bf16_point and intermediate_qdq) for the GEMV of gemv.h and the matrix-core one
// (gemv_mma.h), and by test/gemv_mma_emu.cpp, which runs the latter on the CPU.
#pragma once
// Where element i of a row-major array of k values (k a multiple of 8) goes in the bf16 layout
// the matrix-core kernels take (mx_to_bf16_p8, gemm_mma.h): each group of 8 stored 0, 4, 1, 5,
// 2, 6, 3, 7, so that u32 word q of a group holds elements q and q + 4. Shared by the
// conversion kernel and the epilogues that write that layout (gm_store_xb, gemm_p8_store).
MX_DEVICE u64 p8_pos(u64 i) {
  u32 q = (u32)(i & 7u);
  return (i & ~7ull) | (q < 4u ? 2u * q : 2u * (q - 4u) + 1u);
}

// Where element k of a row of K values (K a multiple of 32) goes in the c16 layout that
// MXMOE_HIP_MMA_VARIANT=wg256c's wgmma GEMM copies into shared memory without touching it
// (hip/gemm_wgmma.h): per 128-k step (the GEMM's K step, four 32-blocks t), k = 128 s + 32 t +
// 8 w + m + 4 h (w, m < 4, h < 2) is half h of u32 word t of the step's 16-byte chunk 4 w + m,
// which is one core-matrix row of the GEMM's B operand (the four words of a chunk come from the
// four blocks: the k permutation of gemm_mma.h's lanes, which own one block each). A last step
// of kb < 4 blocks (K not a multiple of 128) keeps the order with chunks of kb words.
// c16_words: the u32 words of each chunk of step st (4, or kb in a last step of kb < 4
// blocks); c16_chunk: where chunk kc of step st starts (bf16 values from the row's start).
// c16_pos, the wgmma GEMM's copies and mx_p8_to_c16 (hip/gemm_wgmma.h) place chunks by them.
MX_DEVICE u32 c16_words(u32 st, u32 K) {
  u32 kb = K / 32u - 4u * st;
  return kb < 4u ? kb : 4u;
}
MX_DEVICE u32 c16_chunk(u32 st, u32 kc, u32 K) { return 128u * st + 2u * c16_words(st, K) * kc; }
MX_DEVICE u32 c16_pos(u32 k, u32 K) {
  u32 s = k / 128u, r = k % 128u, t = r / 32u, w = (r / 8u) % 4u, j = r % 8u;
  return c16_chunk(s, 4u * w + j % 4u, K) + 2u * t + j / 4u;
}

// gemv1's epilogue for one (pair t, intermediate column j) of a block, shared by gemv.h's
// GEMV and the matrix-core one (gemv_mma.h): the gate and up sums gv / uv, the bias, the
// router weight on the input, the activation, and the intermediate QDQ over the block's 32
// columns (their maximum through tmax[t], zeroed by the caller); tv: pair t is in the tile.
// Every thread of the block calls it (barrier).
// gemv1_value returns the value (f32 bits; the caller stores it where tv), gemv1_finish stores it
// in out's row-major f32 layout.
MX_DEVICE u32 gemv1_value(const MoeParams& p, u32 e, u32 start, u32 t, u32 j, bool tv, float gv,
                          float uv, const u32* pair_of_row, const float* bias, const float* topw,
                          u32* tmax) {
  u32 inter = p.inter;
  bool silu = p.activation == ACT_SILU;
  u32 grow = silu ? j : 2u * j, urow = silu ? inter + j : 2u * j + 1u;
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
  if (tv && p.act_fmt != FMT_NONE) val = intermediate_qdq(p, val, mx_scale_byte(p.act_fmt, p.act_mode, tmax[t]));
  return val;
}
MX_DEVICE void gemv1_finish(const MoeParams& p, u32 e, u32 start, u32 t, u32 j, bool tv, float gv,
                            float uv, const u32* pair_of_row, const float* bias, const float* topw,
                            u32* tmax, u32* out) {
  u32 val = gemv1_value(p, e, start, t, j, tv, gv, uv, pair_of_row, bias, topw, tmax);
  if (tv) out[(u64)(start + t) * p.inter + j] = val;
}
