// amd_emu.h: the host twins under which the HIP kernel source (hip/mxmoe.cu) compiles and runs on
// the CPU as the AMD targets see it: MX_AMD, 64-lane wavefronts, __gfx950__ (the scaled-MFMA
// kernels), every GPU thread of a block a fiber on the calling OS thread. Included, before hip/mxmoe.cu, by
// hip/test/amd_gemm_emu.cpp (the GEMMs against a double-precision product) and
// hip/test/hip_emu.cpp (a stand-in for libamdhip64.so that runs the whole backend).
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
//     llvm.amdgcn.mfma.scale.* tests); codes are decoded by this file's own OCP tables;
//   - thread / block ids, the block barrier, wavefront-wide shuffles by exchange (AMD's
//     shfl_xor / shfl_idx of hip/mx_compat.h stay within a group of 32 lanes), and a launcher
//     that runs a block's threads as fibers (see "the launcher" below).
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef unsigned char u8;

#define MX_HOST_EMU 1
#define MX_AMD 1
#define WARP 64
#define MX_DEVICE static inline
#define MX_SHARED static
#define MX_KERNEL(n) static
#define MX_KERNEL_OCC(n, b) static
#ifndef __gfx950__
#define __gfx950__ 1
#endif

// ---- the GPU's thread ids, barriers and shuffles (blocks of up to 1024 threads, 16 wavefronts) --
static u32 g_tid;  // the GPU thread running now (the scheduler below sets it)
static u32 g_bx, g_by, g_bdim;
static void emu_wait(int kind);
MX_DEVICE u32 tid_x() { return g_tid; }
MX_DEVICE u32 bid_x() { return g_bx; }
MX_DEVICE u32 bid_y() { return g_by; }
MX_DEVICE void sync_threads() { emu_wait(1); }
static void wave_sync() { emu_wait(2); }
MX_DEVICE u32 f2u(float f) { u32 u; memcpy(&u, &f, 4); return u; }
MX_DEVICE float u2f(u32 u) { float f; memcpy(&f, &u, 4); return f; }
// The shuffles of hip/mx_compat.h (AMD: ds_bpermute within the executing group of 32 lanes):
// the 32 lanes of a half wavefront meet (a half's lanes may shuffle while the other half does
// something else, as in a divergent branch).
static void half_sync() { emu_wait(4); }
static u32 g_x[16][64];
static u32 xchg(u32 v, u32 src) {
  u32 w = g_tid / 64u, l = g_tid % 64u;
  g_x[w][l] = v;
  half_sync();
  u32 r = g_x[w][(l & 32u) | (src & 31u)];
  half_sync();
  return r;
}
// AMD's shfl_xor / shfl_idx (hip/mx_compat.h): within the executing group of 32 lanes.
MX_DEVICE float shfl_xor(float v, u32 mask) { return u2f(xchg(f2u(v), (g_tid % 64u) ^ mask)); }
MX_DEVICE float shfl_idx(float v, u32 src) { return u2f(xchg(f2u(v), src)); }
MX_DEVICE float fast_exp2(float x) { return exp2f(x); }
MX_DEVICE void fence_device() { std::atomic_thread_fence(std::memory_order_seq_cst); }
MX_DEVICE float load_coherent(const float* p) {
  return u2f(__atomic_load_n((const u32*)p, __ATOMIC_RELAXED));
}
typedef unsigned int mx_u32x4 __attribute__((ext_vector_type(4)));
MX_DEVICE u32 load_stream_u32(const void* p) { return *(const u32*)p; }
MX_DEVICE mx_u32x4 load_stream16(const void* p) { return *(const mx_u32x4*)p; }
MX_DEVICE u32 load_stream_u8(const void* p) { return *(const unsigned char*)p; }
MX_DEVICE u32 atomic_add_u32(u32* p, u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
MX_DEVICE void atomic_max_u32(u32* p, u32 v) { __atomic_fetch_max(p, v, __ATOMIC_RELAXED); }
MX_DEVICE float sum32(float v) {
  for (u32 m = 16u; m > 0u; m >>= 1) v += shfl_xor(v, m);
  return v;
}
MX_DEVICE float f16_to_f32(u32 bits) { return (float)__builtin_bit_cast(_Float16, (u16)bits); }
MX_DEVICE u32 clz32(u32 x) { return x == 0u ? 32u : (u32)__builtin_clz(x); }
MX_DEVICE u32 umin(u32 a, u32 b) { return a < b ? a : b; }
MX_DEVICE u32 umax(u32 a, u32 b) { return a > b ? a : b; }
MX_DEVICE i32 imin(i32 a, i32 b) { return a < b ? a : b; }
MX_DEVICE i32 imax(i32 a, i32 b) { return a > b ? a : b; }
MX_DEVICE float fast_exp(float x) { return fast_exp2(x * 1.4426950408889634f); }

// ---- this file's own decoders (OCP MX spec v1.0, section 5: element formats) ----------------
static double bf16_value(u16 b) { return (double)u2f((u32)b << 16); }
// Value of a code of format f (hip/mx_formats.h ids) without the block scale.
static double code_value(u32 f, u32 c) {
  auto fp = [](u32 c, u32 eb, u32 mb, int bias) {
    u32 sign = (c >> (eb + mb)) & 1u, e = (c >> mb) & ((1u << eb) - 1u), m = c & ((1u << mb) - 1u);
    double v = e == 0u ? std::ldexp((double)m, 1 - bias - (int)mb)
                       : std::ldexp((double)((1u << mb) | m), (int)e - bias - (int)mb);
    return sign ? -v : v;
  };
  switch (f) {
    case 0u: return fp(c, 2u, 1u, 1);   // FP4 E2M1
    case 1u: return fp(c, 2u, 3u, 1);   // FP6 E2M3
    case 2u: return fp(c, 3u, 2u, 3);   // FP6 E3M2
    case 3u: return fp(c, 4u, 3u, 7);   // FP8 E4M3 (S.1111.111 is NaN: never generated)
    case 4u: return fp(c, 5u, 2u, 15);  // FP8 E5M2 (exponent 11111 is Inf / NaN: never generated)
    default: return std::ldexp((double)(int8_t)(u8)c, -6);  // INT8: two's complement x 2^-6
  }
}
static u32 bits_of(u32 f) { return f == 0u ? 4u : (f == 1u || f == 2u) ? 6u : 8u; }
static double scale_value(u32 byte) { return std::ldexp(1.0, (int)byte - 127); }
// Code j of a block packed from bit 0 of words w (little-endian bit stream, docs/NUMERICS.md 9).
static u32 code_at(const u32* w, u32 j, u32 cb) {
  u64 bits = 0;
  u32 bit = j * cb, i = bit / 32u, off = bit % 32u;
  bits = w[i];
  if (off + cb > 32u) bits |= (u64)w[i + 1] << 32;
  return (u32)(bits >> off) & ((1u << cb) - 1u);
}

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

// ---- the launcher ------------------------------------------------------------------------------
// The GPU threads of a block are fibers (user-level contexts with their own stacks) on the
// calling OS thread. The scheduler runs every runnable fiber in thread order until it waits at a
// barrier or leaves the kernel; then it releases each wavefront whose live lanes all wait at the
// wavefront barrier (an MFMA) and each half wavefront whose live lanes all wait at a shuffle,
// else the block when every live thread waits at the
// block barrier; a thread that has left the kernel no longer counts (as on the GPU). Anything
// else is a deadlock (lanes of a wavefront at different barriers), reported as an error.
// Blocks run one after another, so the kernels' `static` locals (MX_SHARED) are their shared
// memory. x86-64 switches contexts with the few instructions below (callee-saved registers and
// the stack pointer, System V ABI); elsewhere with ucontext.
#if defined(__x86_64__)
extern "C" void mxemu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .hidden mxemu_switch
  .type mxemu_switch,@function
mxemu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mxemu_switch, .-mxemu_switch
)");
#else
#include <ucontext.h>
#endif

namespace emu {
const u32 kStack = 256u * 1024u;
enum State : int { kRunnable = 0, kBlock = 1, kWave = 2, kDone = 3, kHalf = 4 };
// The kernel running now, for the deadlock report (hip_emu.cpp sets it).
static const char* kernel_name = "?";
struct Fiber {
  int state = kDone;
  std::vector<unsigned char> stack;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};
static std::vector<Fiber> fibers;
#if defined(__x86_64__)
static void* sched_sp;
#else
static ucontext_t sched_ctx;
#endif
static const std::function<void()>* job;

static void to_scheduler() {
#if defined(__x86_64__)
  mxemu_switch(&fibers[g_tid].sp, sched_sp);
#else
  swapcontext(&fibers[g_tid].ctx, &sched_ctx);
#endif
}
static void entry() {
  (*job)();
  fibers[g_tid].state = kDone;
  to_scheduler();
  std::_Exit(5);  // never resumed
}
static void start(u32 t) {
  Fiber& f = fibers[t];
  f.state = kRunnable;
  if (f.stack.empty()) f.stack.resize(kStack);
#if defined(__x86_64__)
  uintptr_t top = ((uintptr_t)f.stack.data() + f.stack.size()) & ~(uintptr_t)15;
  void** sp = (void**)(top - 8 * sizeof(void*));
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;  // r15 .. rbp
  sp[6] = (void*)&entry;                        // mxemu_switch's ret lands here, rsp = 8 mod 16
  sp[7] = nullptr;
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, entry, 0);
#endif
}
static void resume(u32 t) {
  g_tid = t;
#if defined(__x86_64__)
  mxemu_switch(&sched_sp, fibers[t].sp);
#else
  swapcontext(&sched_ctx, &fibers[t].ctx);
#endif
}
}  // namespace emu

static void emu_wait(int kind) {
  emu::fibers[g_tid].state = kind;
  emu::to_scheduler();
}

// Block (bx, by) of n threads, each running f.
static void emu_launch(u32 n, u32 bx, u32 by, const std::function<void()>& f) {
  using namespace emu;
  if (n == 0u || n > 1024u) {
    fprintf(stderr, "amd_emu: block size %u\n", n);
    std::_Exit(3);
  }
  if (fibers.size() < n) fibers.resize(n);
  g_bx = bx;
  g_by = by;
  g_bdim = n;
  job = &f;
  for (u32 t = 0; t < n; ++t) start(t);
  for (;;) {
    for (u32 t = 0; t < n; ++t)
      if (fibers[t].state == kRunnable) resume(t);
    bool released = false, all_done = true, all_block = true;
    // Wavefronts (64 lanes: the MFMAs) and half wavefronts (32 lanes: the shuffles) whose live
    // lanes all wait at their barrier go on.
    for (u32 size : {64u, 32u}) {
      int kind = size == 64u ? kWave : kHalf;
      for (u32 g = 0; g * size < n; ++g) {
        bool any = false, all = true;
        for (u32 t = size * g; t < std::min(n, size * g + size); ++t) {
          int st = fibers[t].state;
          if (st == kDone) continue;
          any = true;
          all = all && st == kind;
        }
        if (any && all) {
          for (u32 t = size * g; t < std::min(n, size * g + size); ++t)
            if (fibers[t].state == kind) fibers[t].state = kRunnable;
          released = true;
        }
      }
    }
    for (u32 t = 0; t < n; ++t) {
      int st = fibers[t].state;
      all_done = all_done && st == kDone;
      all_block = all_block && (st == kDone || st == kBlock);
    }
    if (all_done) break;
    if (released) continue;
    if (all_block) {
      for (u32 t = 0; t < n; ++t)
        if (fibers[t].state == kBlock) fibers[t].state = kRunnable;
      continue;
    }
    fprintf(stderr, "amd_emu: deadlock in %s, block (%u, %u) of %u threads: lanes of a wavefront wait at different barriers:",
            kernel_name, bx, by, n);
    for (u32 t = 0; t < n; ++t) fprintf(stderr, "%s%d", t % 64u ? "" : " ", fibers[t].state);
    fprintf(stderr, "\n");
    std::_Exit(4);
  }
}
