// combine.h: moe_combine (shaders/moe_combine.wgsl), the last MoE pass where gemv2 does not do
// it itself. Included last by hip/mxmoe.cu; relies on moe_common.h (MoeParams, bf16_point).
#pragma once

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
