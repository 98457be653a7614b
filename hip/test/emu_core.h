// emu_core.h: what the CPU emulations of the HIP kernels share (hip/test/amd_emu.h for the AMD
// targets, hip/test/nv_emu.h for NVIDIA): host twins of the target primitives of
// hip/mx_compat.h (thread and block ids, the block barrier, shuffles within groups of 32 lanes,
// loads, atomics), OCP MX decoders of their own (for the emulated scaled MFMA and the tests'
// references), and the launcher that runs a block's GPU threads as fibers on the calling OS
// thread. The including header defines the target (MX_AMD or MX_NV, WARP) first.
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
#define MX_DEVICE static inline
#define MX_SHARED static
#define MX_KERNEL(n) static
#define MX_KERNEL_OCC(n, b) static

// ---- the GPU's thread ids, barriers and shuffles (blocks of up to 1024 threads, 16 wavefronts) --
static u32 g_tid;  // the GPU thread running now (the scheduler below sets it)
static u32 g_bx, g_by, g_bdim;
static u64 g_block_serial;  // one more for every block launched (per-block state of the twins)
static void emu_wait(int kind);
MX_DEVICE u32 tid_x() { return g_tid; }
MX_DEVICE u32 bid_x() { return g_bx; }
MX_DEVICE u32 bid_y() { return g_by; }
MX_DEVICE void sync_threads() { emu_wait(1); }
static void wave_sync() { emu_wait(2); }
MX_DEVICE u32 f2u(float f) { u32 u; memcpy(&u, &f, 4); return u; }
MX_DEVICE float u2f(u32 u) { float f; memcpy(&f, &u, 4); return f; }
// The shuffles of hip/mx_compat.h within groups of 32 lanes (NVIDIA: a warp; AMD: ds_bpermute
// within the executing half wavefront): the 32 lanes meet (on AMD a half's lanes may shuffle
// while the other half does something else, as in a divergent branch).
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
// shfl_xor / shfl_idx (hip/mx_compat.h): within the group of 32 lanes.
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

// ---- the launcher ------------------------------------------------------------------------------
// The GPU threads of a block are fibers (user-level contexts with their own stacks) on the
// calling OS thread. The scheduler runs every runnable fiber in thread order until it waits at a
// barrier or leaves the kernel; then it releases each wavefront whose live lanes all wait at the
// wavefront barrier (an MFMA) and each group of 32 lanes (an NVIDIA warp, half an AMD wavefront)
// whose live lanes all wait at a shuffle, else the block when every live thread waits at the
// block barrier; a thread that has left the kernel no longer counts (as on the GPU). Anything
// else is a deadlock (lanes of a group at different barriers), reported as an error. Blocks run
// one after another, so the kernels' `static` locals (MX_SHARED) are their shared memory.
// x86-64 switches contexts with the few instructions below (the callee-saved general registers
// and the stack pointer of the System V ABI; the kernels leave MXCSR and the x87 control word
// alone); elsewhere, or with MX_EMU_UCONTEXT defined (to test that path), with ucontext.
#if defined(__x86_64__) && !defined(MX_EMU_UCONTEXT)
#define MX_EMU_ASM_SWITCH 1
#endif
#if defined(MX_EMU_ASM_SWITCH)
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
#if defined(MX_EMU_ASM_SWITCH)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};
static std::vector<Fiber> fibers;
#if defined(MX_EMU_ASM_SWITCH)
static void* sched_sp;
#else
static ucontext_t sched_ctx;
#endif
static const std::function<void()>* job;

static void to_scheduler() {
#if defined(MX_EMU_ASM_SWITCH)
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
#if defined(MX_EMU_ASM_SWITCH)
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
#if defined(MX_EMU_ASM_SWITCH)
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
  ++g_block_serial;
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
