// moe_common.h: what the MoE passes share (shaders/moe_common.wgsl): MoeParams, bf16_point,
// activate, intermediate_qdq. Included by hip/mxmoe.cu after route.h and before gemv_epilogue.h,
// which uses them; relies on mx_common.h (encode / decode, bf16_round) and mx_compat.h
// (fast_exp).
#pragma once

// ------------------------------------------------------------------------------------------
// The MoE passes (shaders/moe_common.wgsl has the overview): lists -> input QDQ (mx_qdq) ->
// gemm1 | gemv1 (bias, activation, intermediate QDQ fused) -> gemm2 | gemv2 (bias, router
// weight) -> combine.

struct MoeParams {
  u32 m, top_k, hidden, inter, n_experts, e_local, has_map, has_bias13, has_bias2, on_input;
  u32 weight_fmt, act_fmt, act_mode, activation, round_bf16, tile_m;
  u32 wrows;  // the MXFP4 codes' row order on the matrix-core path (hip/nv4.h Nv4Rows)
  u32 xc2;    // gemm2's bf16 activations in the c16 order (gemv_epilogue.h c16_pos)
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
