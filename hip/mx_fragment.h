// mx_fragment.h: the matrix-core fragment interface of the grouped GEMM (hip/gemm_v1.h), the ONLY
// target-specific code of the GEMM. A warp (NVIDIA, 32 lanes) or wavefront (AMD, 64 lanes)
// multiplies a 16 x FRAG_K slice of A (row-major in shared memory, k contiguous) by a
// FRAG_K x FRAG_N slice of B (stored n-major, k contiguous) into FRAG_N-wide f32 accumulators:
//
//   FragA / FragB / FragC      the per-lane registers
//   load_a(a, sA, lda, lane)   A rows 0..15, k 0..FRAG_K-1 from sA (bf16 bits)
//   load_b(b, sB, ldb, lane)   B columns 0..FRAG_N-1, k 0..FRAG_K-1 from sB (bf16 bits, n-major)
//   load_b2(b0, b1, sB, ldb, lane)   two of them, columns 0..FRAG_N-1 and FRAG_N..2 FRAG_N-1
//   mma(c, a, b)               c += a * b (f32 accumulation)
//   c_row(lane, i), c_col(lane, i)   which element of the 16 x FRAG_N tile c.v[i] holds
//   copy16_async(dst, src, valid)    16 bytes global -> shared (zeros when !valid), asynchronous
//   copy_commit(), copy_wait_all()   close a group of copies; wait for all and see their data
//                                    (then a barrier publishes them to the block)
//
// Implementations (the layouts are the vendors' documented ones):
//   NVIDIA (sm_80+): mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 through inline PTX
//     (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": A a0..a7 at rows
//     g / g+8, columns 2t..2t+1 and 2t+8..2t+9; B b0..b3 at k 2t..2t+1 and 2t+8..2t+9, column g;
//     C c0..c3 at rows g / g+8, columns 2t..2t+1, with g = lane / 4, t = lane % 4).
//   AMD gfx942 / gfx950 (CDNA3 / CDNA4): v_mfma_f32_16x16x16_bf16 (__builtin_amdgcn_mfma_f32_
//     16x16x16bf16_1k; CDNA3 ISA guide section 7 and AMD's "matrix instruction calculator": lane
//     l holds A[l % 16][4 (l / 16) + 0..3], B[4 (l / 16) + 0..3][l % 16] and
//     D[4 (l / 16) + 0..3][l % 16]).
// gfx950's scaled MFMA on MX operands is in gemm_mx.h's gemm_mx_body (its operands are the
// packed codes and E8M0 bytes, not bf16 fragments).
#pragma once
#include "mx_compat.h"

#define FRAG_M 16
#define FRAG_K 16

#if defined(MX_NV)
#define FRAG_N 8
#define FRAG_C 4
struct FragA { u32 r[4]; };
struct FragB { u32 r[2]; };
struct FragC { float v[4]; };

// The CPU emulation (hip/test/nv_emu.h) gives its own twins of the PTX functions below.
#if !defined(MX_HOST_EMU)
// The 32-bit shared-state-space address of a generic pointer into shared memory (ldmatrix).
// An address-space cast (not inline cvta) so that LLVM folds it into the shared array's address
// plus an offset, computed once outside the loops.
MX_DEVICE u32 smem_addr(const void* p) {
  return (u32)(unsigned long long)(const __attribute__((address_space(3))) void*)p;
}
// ldmatrix.x4: lanes 0-15 give rows 0-15 at k 0, lanes 16-31 rows 0-15 at k 8; the four 8x8
// matrices land in a0..a3 in the order mma expects (PTX ISA, ldmatrix).
MX_DEVICE void load_a(FragA& a, const u16* sA, u32 lda, u32 lane) {
  const u16* p = sA + (lane & 15u) * lda + (lane >> 4) * 8u;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a.r[0]), "=r"(a.r[1]), "=r"(a.r[2]), "=r"(a.r[3])
               : "r"(smem_addr(p))
               : "memory");
}
// ldmatrix.x2 on the n-major B tile: lanes 0-7 give columns n 0-7 at k 0, lanes 8-15 at k 8.
MX_DEVICE void load_b(FragB& b, const u16* sB, u32 ldb, u32 lane) {
  const u16* p = sB + (lane & 7u) * ldb + ((lane >> 3) & 1u) * 8u;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(b.r[0]), "=r"(b.r[1])
               : "r"(smem_addr(p))
               : "memory");
}
// ldmatrix.x4 on the n-major B tile: two fragments, columns 0-7 (b0) and 8-15 (b1): lanes 0-7
// give columns 0-7 at k 0, 8-15 the same at k 8, 16-23 columns 8-15 at k 0, 24-31 at k 8.
MX_DEVICE void load_b2(FragB& b0, FragB& b1, const u16* sB, u32 ldb, u32 lane) {
  const u16* p = sB + ((lane & 7u) + ((lane >> 4) << 3)) * ldb + ((lane >> 3) & 1u) * 8u;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(b0.r[0]), "=r"(b0.r[1]), "=r"(b1.r[0]), "=r"(b1.r[1])
               : "r"(smem_addr(p))
               : "memory");
}
MX_DEVICE void mma(FragC& c, const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}
#endif  // !MX_HOST_EMU
MX_DEVICE u32 c_row(u32 lane, u32 i) { return (lane >> 2) + (i >= 2u ? 8u : 0u); }
MX_DEVICE u32 c_col(u32 lane, u32 i) { return 2u * (lane & 3u) + (i & 1u); }
#if !defined(MX_HOST_EMU)
// cp.async (sm_80+; PTX ISA, "cp.async"): .cg (L2 only), 16 bytes; a source size of 0 writes
// 16 zero bytes and reads nothing.
MX_DEVICE void copy16_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :
               : "r"(smem_addr(dst)), "l"(src), "r"(valid ? 16u : 0u)
               : "memory");
}
MX_DEVICE void copy_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
MX_DEVICE void copy_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// The v2 GEMM's extras (NVIDIA only): 8-byte cp.async (.ca: the PTX ISA allows .cg for 16 bytes
// only), waiting until at most N committed groups are pending (cp.async.wait_group: the
// completed copies' writes are visible to the executing thread), and the dynamic shared memory
// the launch gave this block (PTX special register %dynamic_smem_size, PTX ISA 4.1+).
MX_DEVICE void copy8_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
               :
               : "r"(smem_addr(dst)), "l"(src), "r"(valid ? 8u : 0u)
               : "memory");
}
// 4 bytes (.ca; the wgmma GEMM's last K step of the c16 layout, hip/gemm_wgmma.h).
MX_DEVICE void copy4_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
               :
               : "r"(smem_addr(dst)), "l"(src), "r"(valid ? 4u : 0u)
               : "memory");
}
template <int N>
MX_DEVICE void copy_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
MX_DEVICE u32 dynamic_smem_bytes() {
  u32 r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

#endif  // !MX_HOST_EMU
#elif defined(MX_AMD)
#define FRAG_N 16
#define FRAG_C 4
typedef short v4i16 __attribute__((ext_vector_type(4)));
typedef float v4f32 __attribute__((ext_vector_type(4)));
struct FragA { v4i16 r; };
struct FragB { v4i16 r; };
struct FragC { float v[4]; };

MX_DEVICE void load_a(FragA& a, const u16* sA, u32 lda, u32 lane) {
  a.r = *(const v4i16*)(sA + (lane & 15u) * lda + 4u * (lane >> 4));
}
MX_DEVICE void load_b(FragB& b, const u16* sB, u32 ldb, u32 lane) {
  b.r = *(const v4i16*)(sB + (lane & 15u) * ldb + 4u * (lane >> 4));
}
MX_DEVICE void load_b2(FragB& b0, FragB& b1, const u16* sB, u32 ldb, u32 lane) {
  load_b(b0, sB, ldb, lane);
  load_b(b1, sB + FRAG_N * ldb, ldb, lane);
}
MX_DEVICE void mma(FragC& c, const FragA& a, const FragB& b) {
  v4f32 acc = {c.v[0], c.v[1], c.v[2], c.v[3]};
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.r, b.r, acc, 0, 0, 0);
  c.v[0] = acc[0];
  c.v[1] = acc[1];
  c.v[2] = acc[2];
  c.v[3] = acc[3];
}
MX_DEVICE u32 c_row(u32 lane, u32 i) { return 4u * (lane >> 4) + i; }
MX_DEVICE u32 c_col(u32 lane, u32 i) { return lane & 15u; }
// Plain loads and stores (synchronous; the barrier after the step publishes them).
typedef unsigned int v4u32 __attribute__((ext_vector_type(4)));
MX_DEVICE void copy16_async(void* dst, const void* src, bool valid) {
  v4u32 z = {0u, 0u, 0u, 0u};
  *(v4u32*)dst = valid ? *(const v4u32*)src : z;
}
MX_DEVICE void copy_commit() {}
MX_DEVICE void copy_wait_all() {}
#endif
