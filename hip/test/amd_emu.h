// amd_emu.h: the host twins under which the HIP kernel source (hip/mxmoe.cu) compiles and runs on
// the CPU as the AMD targets see it: MX_AMD, 64-lane wavefronts, __gfx950__ (the scaled-MFMA
// kernels). The target-independent part (thread ids, barriers, shuffles, the fibers that run a
// block's GPU threads, the OCP decoders) is hip/test/emu_core.h; the NVIDIA counterpart is
// hip/test/nv_emu.h. Included, before hip/mxmoe.cu, by hip/test/amd_gemm_emu.cpp (the GEMMs
// against a double-precision product) and hip/test/hip_emu.cpp (a stand-in for libamdhip64.so
// that runs the whole backend). The two matrix instructions:
//
//   - v_mfma_f32_16x16x16_bf16 (`__builtin_amdgcn_mfma_f32_16x16x16bf16_1k`, the fragment
//     interface of hip/mx_fragment.h on gfx942 / gfx950): the 64 lanes of a wavefront meet at a
//     barrier; lane l's A operand is A[l % 16][4 (l / 16) + 0..3], its B operand
//     B[4 (l / 16) + 0..3][l % 16], and it gets D[4 (l / 16) + 0..3][l % 16] (AMD's CDNA3 ISA
//     guide, section 7, and AMD's matrix instruction calculator for this instruction);
//   - v_mfma_scale_f32_16x16x128_f8f6f4 (`__builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4`,
//     gfx950's GEMM on MX operands): lane l holds row l % 16 of A (column l % 16 of B) at the
//     32-block l / 16 of the 128-wide K chunk, its codes packed from bit 0 of its 8-dword operand
//     (FP4 16 bytes, FP6 24, FP8 32), one E8M0 scale byte per lane, selected from its 32-bit
//     scale operand by opsel; the operand formats cbsz (A) / blgp (B): 0 FP8 E4M3, 1 BF8 E5M2,
//     2 FP6 E2M3, 3 BF6 E3M2, 4 FP4 E2M1 (AMD's CDNA4 ISA guide, LLVM's AMDGPUUsage and its
//     llvm.amdgcn.mfma.scale.* tests); codes are decoded by emu_core.h's own OCP tables.
#pragma once
#define MX_AMD 1
#define WARP 64
#ifndef __gfx950__
#define __gfx950__ 1
#endif
#include "emu_core.h"

// ---- the matrix instructions -----------------------------------------------------------------
typedef short v4i16 __attribute__((ext_vector_type(4)));
typedef float v4f32 __attribute__((ext_vector_type(4)));
typedef int v8i32e __attribute__((ext_vector_type(8)));
struct WaveOps {
  v4i16 a[64], b[64];
  v8i32e xa[64], xb[64];
  int sa[64], sb[64];
};
static WaveOps g_ops[16];
static std::atomic<u64> g_mfma{0}, g_mfma_scale{0};

static v4f32 __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(v4i16 a, v4i16 b, v4f32 c, int cbsz, int abid, int blgp) {
  if (cbsz || abid || blgp) {
    fprintf(stderr, "mfma 16x16x16: broadcast controls are not emulated\n");
    std::_Exit(3);
  }
  u32 w = g_tid / 64u, l = g_tid % 64u;
  g_ops[w].a[l] = a;
  g_ops[w].b[l] = b;
  wave_sync();
  v4f32 d;
  u32 col = l % 16u;
  for (u32 i = 0; i < 4u; ++i) {
    u32 row = 4u * (l / 16u) + i;
    double s = 0.0;  // bf16 x bf16 products and their sum are exact here
    for (u32 k = 0; k < 16u; ++k)
      s += bf16_value((u16)g_ops[w].a[row + 16u * (k / 4u)][k % 4u]) *
           bf16_value((u16)g_ops[w].b[col + 16u * (k / 4u)][k % 4u]);
    d[i] = (float)((double)c[i] + s);
  }
  wave_sync();
  if (l == 0u) g_mfma.fetch_add(1);
  return d;
}

static u32 mfma_fmt_to_ours(int f) {
  switch (f) {
    case 0: return 3u;  // FP8 E4M3
    case 1: return 4u;  // BF8 E5M2
    case 2: return 1u;  // FP6 E2M3
    case 3: return 2u;  // BF6 E3M2
    case 4: return 0u;  // FP4 E2M1
  }
  fprintf(stderr, "mfma scale: unknown operand format %d\n", f);
  std::_Exit(3);
}

static v4f32 __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(v8i32e a, v8i32e b, v4f32 c, int cbsz, int blgp,
                                                              int opsel_a, int scale_a, int opsel_b, int scale_b) {
  u32 w = g_tid / 64u, l = g_tid % 64u;
  u32 fa = mfma_fmt_to_ours(cbsz), fb = mfma_fmt_to_ours(blgp);
  g_ops[w].xa[l] = a;
  g_ops[w].xb[l] = b;
  g_ops[w].sa[l] = ((u32)scale_a >> (8 * opsel_a)) & 0xFFu;
  g_ops[w].sb[l] = ((u32)scale_b >> (8 * opsel_b)) & 0xFFu;
  wave_sync();
  v4f32 d;
  u32 col = l % 16u, ba = bits_of(fa), bb = bits_of(fb);
  for (u32 i = 0; i < 4u; ++i) {
    u32 row = 4u * (l / 16u) + i;
    double s = 0.0;
    for (u32 g = 0; g < 4u; ++g) {
      u32 la = row + 16u * g, lb = col + 16u * g;
      u32 wa[8], wb[8];
      for (u32 q = 0; q < 8u; ++q) {
        wa[q] = (u32)g_ops[w].xa[la][q];
        wb[q] = (u32)g_ops[w].xb[lb][q];
      }
      double part = 0.0;
      for (u32 t = 0; t < 32u; ++t) part += code_value(fa, code_at(wa, t, ba)) * code_value(fb, code_at(wb, t, bb));
      s += part * scale_value(g_ops[w].sa[la]) * scale_value(g_ops[w].sb[lb]);
    }
    d[i] = (float)((double)c[i] + s);
  }
  wave_sync();
  if (l == 0u) g_mfma_scale.fetch_add(1);
  return d;
}

