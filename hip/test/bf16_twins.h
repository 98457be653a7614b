// bf16_twins.h: host twins of the PTX bf16 instructions the NVIDIA kernels use (PTX ISA:
// fma.rn.bf16x2, cvt.rn.bf16x2.f32, max / min.bf16x2; round to nearest even, subnormals kept),
// shared by the CPU emulations hip/test/gemv_mma_emu.cpp and hip/test/nv_emu.h. The includer
// defines u32, MX_DEVICE, f2u / u2f and the uint4v vector type first.
#pragma once
#include <cmath>

static float bf16f(u32 bits) { return u2f((bits & 0xFFFFu) << 16); }
static u32 bf16_rne(float x) {
  u32 b = f2u(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return ((b | 0x00400000u) >> 16) & 0xFFFFu;
  return ((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16) & 0xFFFFu;
}
// fma.rn.bf16x2 (hip/gemv_mma.h bf16x2_fma, hip/gemm_mma.h fma_bf16x2).
MX_DEVICE u32 bf16x2_fma(u32 a, u32 b, u32 c) {
  u32 d = 0;
  for (u32 h = 0; h < 2u; ++h) {
    float r = std::fma(bf16f(a >> (16 * h)), bf16f(b >> (16 * h)), bf16f(c >> (16 * h)));
    d |= bf16_rne(r) << (16 * h);  // the kernels' products are exact: the f32 fma is not rounded
  }
  return d;
}
// cvt.rn.bf16x2.f32 d, hi, lo: {lo, hi}.
MX_DEVICE u32 bf16x2_pack(float lo, float hi) { return bf16_rne(lo) | (bf16_rne(hi) << 16); }
// An empty asm in the kernels (keeps LLVM from moving loads): nothing here.
MX_DEVICE uint4v gm_opaque(uint4v v) { return v; }
// max.bf16x2 / min.bf16x2 with the finite bf16 range (a NaN operand yields the other one).
MX_DEVICE u32 bf16x2_clamp(u32 v) {
  u32 d = 0;
  for (u32 h = 0; h < 2u; ++h) {
    float x = bf16f(v >> (16 * h)), lim = bf16f(0x7F7Fu);
    float y = x != x ? -lim : std::fmin(std::fmax(x, -lim), lim);
    d |= bf16_rne(y) << (16 * h);
  }
  return d;
}
