// nv_emu.h: the host twins under which the HIP kernel source (hip/mxmoe.cu) compiles and runs on
// the CPU as NVIDIA's sm_90 target sees it (MX_NV, 32-lane warps, __CUDA_ARCH__ 900), for
// hip/test/cuda_emu.cpp (a stand-in for the CUDA driver, libcuda.so.1). The target-independent
// part (ids, barriers, shuffles, fibers) is hip/test/emu_core.h; here are the PTX instructions
// the kernels use in inline assembly, each from the PTX ISA's definition:
//
//   - mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 ("Matrix Fragments for mma.m16n8k16
//     with floating point type": with g = lane / 4, t = lane % 4, A a0..a7 at rows g (a0, a1,
//     a4, a5) and g + 8 (a2, a3, a6, a7), columns 2t, 2t + 1 (a0..a3) and 2t + 8, 2t + 9
//     (a4..a7), two per register in that order; B b0..b3 at k 2t, 2t + 1, 2t + 8, 2t + 9 of
//     column g; C c0..c3 at rows g (c0, c1) and g + 8, columns 2t, 2t + 1): the 32 lanes meet,
//     each computes its C elements from every lane's registers (products exact, the sum in
//     double, rounded to f32 once per instruction);
//   - ldmatrix.sync.aligned.m8n8.{x2,x4}.shared.b16: lanes 8j .. 8j + 7 give the row addresses of
//     matrix j; lane l receives, of each matrix, the 32 bits at row l / 4, bytes 4 (l % 4);
//   - cp.async (16, 8 and 4 bytes, zero fill when the source size is 0): done at once (the data
//     arrive earlier than on the GPU, which every wait allows), or with MXMOE_HIP_EMU_CPASYNC=late
//     only at the wait that covers its commit group (the latest the PTX ISA allows);
//   - fma.rn.bf16x2, cvt.rn.bf16x2.f32, max / min.bf16x2 (round to nearest even, subnormals
//     kept), vote.sync.any, bar.red.or (a block barrier with an OR), ld.shared.v4, the
//     %dynamic_smem_size register (the launch's dynamic shared memory, emu_dsmem here), and the
//     FP4 pair extraction of hip/gemm_mma.h's fp4_bf16_pair_raw in plain shifts and masks;
//   - wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 with A in registers and B through a
//     matrix descriptor (hip/gemm_wgmma.h; PTX ISA "Asynchronous Warpgroup Level Matrix
//     Multiply-Accumulate"): per warp of the warpgroup the m16n8k16 A fragment (rows 16 (warp %
//     4) .. + 15) and D as N / 8 m16n8 C fragments (d[4j + c]); B K-major without swizzle: core
//     matrices of 8 rows (n) x 16 bytes (8 k), k core c of n group j at the descriptor's address
//     + j x SBO + c x LBO (bits 0-13, 32-45, 16-29, each >> 4). A warp's rows depend on its own A
//     only, so each warp computes its 16 rows when it issues (done at once; fence, commit, wait
//     and fence.proxy.async do nothing); the descriptor's addresses are offsets in emu_dsmem;
//   - redux.sync (hip/route_warp.h) is not needed: under MX_HOST_EMU the kernels take its
//     shuffle butterfly, which gives the same values.
#pragma once
#define MX_NV 1
#define WARP 32
#define GM_HOST_EMU 1  // hip/gemv_mma.h: its bf16 primitives come from here
#include "emu_core.h"
#include <string>
#include <vector>
#define __CUDA_ARCH__ 900
#define __CUDA_ARCH_FEAT_SM90_ALL 1  // the sm_90a kernels too (hip/gemm_wgmma.h)

typedef u32 uint4v __attribute__((ext_vector_type(4)));  // as hip/mxmoe.cu

// ---- dynamic shared memory (sm_90's per-block limit) -----------------------------------------
alignas(16) static unsigned char emu_dsmem[232448];
static u32 emu_dsmem_bytes;
MX_DEVICE u32 dynamic_smem_bytes() { return emu_dsmem_bytes; }

// ---- bf16 arithmetic (hip/test/bf16_twins.h) ----------------------------------------------------
#include "bf16_twins.h"
MX_DEVICE u32 fma_bf16x2(u32 a, u32 b, u32 c) { return bf16x2_fma(a, b, c); }
MX_DEVICE uint4v lds128(const void* p) { return *(const uint4v*)p; }
// hip/gemm_mma.h fp4_bf16_pair_raw<J>, the PTX's shifts and masks in C.
template <u32 J>
MX_DEVICE u32 fp4_bf16_pair_raw(u32 v) {
  if (J < 3u) return (v << (3u * J)) & 0x81C081C0u;
  return ((v >> 6) & 0x01800180u) | ((v >> 5) & 0x00400040u) | ((v << 5) & 0x80008000u);
}

// ---- warp and block collectives ------------------------------------------------------------------
static u32 g_wx[32][32][6];
static const void* g_wp[32][32];
MX_DEVICE bool warp_any(bool b) {
  u32 w = g_tid / 32u, l = g_tid % 32u;
  g_wx[w][l][0] = b;
  half_sync();
  bool r = false;
  for (u32 i = 0; i < 32u; ++i) r = r || g_wx[w][i][0] != 0u;
  half_sync();
  return r;
}
MX_DEVICE bool mm_warp_any(bool b) { return warp_any(b); }
static u32 g_block_any;
MX_DEVICE bool mm_block_any(bool b) {
  sync_threads();
  if (g_tid == 0u) g_block_any = 0u;
  sync_threads();
  if (b) g_block_any = 1u;
  sync_threads();
  bool r = g_block_any != 0u;
  sync_threads();
  return r;
}

// ---- mma.sync m16n8k16 and ldmatrix --------------------------------------------------------------
// The 16 x 16 bf16 A fragment the 32 lanes of warp w put in g_wx[w][lane][0..3] (PTX ISA: lane
// (g, t) holds rows g, g + 8 x k 2t, 2t + 1 (registers 0, 1) and k 2t + 8, 2t + 9 (2, 3)); the
// same for mma.sync m16n8k16 and each warp's rows of wgmma m64nNk16.
static void emu_a_frag(u32 w, float A[16][16]) {
  for (u32 L = 0; L < 32u; ++L) {
    u32 g = L / 4u, t = L % 4u;
    const u32* r = g_wx[w][L];
    for (u32 e = 0; e < 2u; ++e) {
      A[g][2u * t + e] = bf16f(r[0] >> (16 * e));
      A[g + 8u][2u * t + e] = bf16f(r[1] >> (16 * e));
      A[g][2u * t + 8u + e] = bf16f(r[2] >> (16 * e));
      A[g + 8u][2u * t + 8u + e] = bf16f(r[3] >> (16 * e));
    }
  }
}
static void emu_mma16816(float* c, const u32* a, const u32* b) {
  u32 w = g_tid / 32u, l = g_tid % 32u;
  for (u32 i = 0; i < 4u; ++i) g_wx[w][l][i] = a[i];
  g_wx[w][l][4] = b[0];
  g_wx[w][l][5] = b[1];
  half_sync();
  float A[16][16], B[16][8];
  emu_a_frag(w, A);
  for (u32 L = 0; L < 32u; ++L) {
    u32 g = L / 4u, t = L % 4u;
    const u32* r = g_wx[w][L];
    for (u32 e = 0; e < 2u; ++e) {
      B[2u * t + e][g] = bf16f(r[4] >> (16 * e));
      B[2u * t + 8u + e][g] = bf16f(r[5] >> (16 * e));
    }
  }
  half_sync();
  u32 g = l / 4u, t = l % 4u;
  for (u32 i = 0; i < 4u; ++i) {
    u32 row = g + (i >= 2u ? 8u : 0u), col = 2u * t + (i & 1u);
    double s = 0.0;
    for (u32 k = 0; k < 16u; ++k) s += (double)A[row][k] * (double)B[k][col];
    c[i] = (float)((double)c[i] + s);
  }
}
// hip/mx_fragment.h's NVIDIA fragment functions (templates: the fragment types come later).
template <class C, class A, class B>
MX_DEVICE void mma(C& c, const A& a, const B& b) {
  emu_mma16816(c.v, a.r, b.r);
}
// hip/gemm_mma.h mma_ab.
template <class C>
MX_DEVICE void mma_ab(C& c, const u32* a, u32 b0, u32 b1) {
  u32 b[2] = {b0, b1};
  emu_mma16816(c.v, a, b);
}
static void emu_ldmatrix(u32* out, u32 nmat, const void* p) {
  u32 w = g_tid / 32u, l = g_tid % 32u;
  g_wp[w][l] = p;
  half_sync();
  for (u32 j = 0; j < nmat; ++j) out[j] = *(const u32*)((const unsigned char*)g_wp[w][8u * j + l / 4u] + 4u * (l % 4u));
  half_sync();
}
template <class A>
MX_DEVICE void load_a(A& a, const u16* sA, u32 lda, u32 lane) {
  emu_ldmatrix(a.r, 4u, sA + (lane & 15u) * lda + (lane >> 4) * 8u);
}
template <class B>
MX_DEVICE void load_b(B& b, const u16* sB, u32 ldb, u32 lane) {
  emu_ldmatrix(b.r, 2u, sB + (lane & 7u) * ldb + ((lane >> 3) & 1u) * 8u);
}
template <class B>
MX_DEVICE void load_b2(B& b0, B& b1, const u16* sB, u32 ldb, u32 lane) {
  u32 r[4];
  emu_ldmatrix(r, 4u, sB + ((lane & 7u) + ((lane >> 4) << 3)) * ldb + ((lane >> 3) & 1u) * 8u);
  b0.r[0] = r[0];
  b0.r[1] = r[1];
  b1.r[0] = r[2];
  b1.r[1] = r[3];
}

// ---- wgmma (hip/gemm_wgmma.h) ------------------------------------------------------------------
MX_DEVICE void wg_fence() {}
MX_DEVICE void wg_commit() {}
template <int N>
MX_DEVICE void wg_wait() {}
MX_DEVICE void wg_fence_proxy() {}
MX_DEVICE void wg_sts128(void* p, u32 a, u32 b, u32 c, u32 d) {
  u32 v[4] = {a, b, c, d};
  memcpy(p, v, 16);
}
MX_DEVICE uint4v wg_ld16(const void* p) { return *(const uint4v*)p; }
MX_DEVICE u32 wg_smem(const void* p) { return (u32)((const unsigned char*)p - emu_dsmem); }
MX_DEVICE void wg_reg(u32&) {}
MX_DEVICE void wg_reg(float&) {}
// wgmma is .sync.aligned over the warpgroup: its four warps must execute the same instruction.
// The kernels pass `site` (a number per static wgmma of the source and template instance); the
// k-th wgmma of every warp of a warpgroup must have the same site and descriptor, else the
// emulation stops (a divergent branch around wgmma is undefined behaviour on the GPU, and the
// GPU gave wrong sums for one, session 12).
static u64 g_wg_serial;
static std::vector<std::pair<u32, unsigned long long>> g_wg_log[8];
static u32 g_wg_count[32];
static void emu_wg_check(u32 site, unsigned long long desc) {
  if (g_tid % 32u != 0u) return;
  if (g_wg_serial != g_block_serial) {
    g_wg_serial = g_block_serial;
    for (auto& v : g_wg_log) v.clear();
    for (u32& c : g_wg_count) c = 0u;
  }
  u32 warp = g_tid / 32u, n = g_wg_count[warp]++;
  auto& log = g_wg_log[warp / 4u];
  if (n == log.size()) {
    log.push_back({site, desc});
  } else if (log[n].first != site || log[n].second != desc) {
    fprintf(stderr, "nv_emu: wgmma #%u of warp %u: site %u desc %llx, another warp of its warpgroup: site %u desc %llx\n",
            n, warp, site, desc, log[n].first, log[n].second);
    std::_Exit(5);
  }
}
template <u32 N>
MX_DEVICE void wgmma_bf16(float* d, const u32* a, unsigned long long desc, u32 site) {
  emu_wg_check(site, desc);
  u32 w = g_tid / 32u, l = g_tid % 32u;
  for (u32 i = 0; i < 4u; ++i) g_wx[w][l][i] = a[i];
  half_sync();
  float A[16][16];
  emu_a_frag(w, A);
  half_sync();
  u32 start = (u32)(desc & 0x3FFFu) << 4, lbo = (u32)((desc >> 16) & 0x3FFFu) << 4,
      sbo = (u32)((desc >> 32) & 0x3FFFu) << 4;
  if ((desc >> 62) != 0u) abort();  // only the unswizzled layout is modelled
  u32 g = l / 4u, t = l % 4u;
  for (u32 j = 0; j < N / 8u; ++j)
    for (u32 c = 0; c < 4u; ++c) {
      u32 row = g + (c >= 2u ? 8u : 0u), n = 8u * j + 2u * t + (c & 1u);
      double s = 0.0;
      for (u32 k = 0; k < 16u; ++k) {
        u32 off = start + (n / 8u) * sbo + (k / 8u) * lbo + (n % 8u) * 16u + (k % 8u) * 2u;
        if (off + 2u > sizeof(emu_dsmem)) abort();
        u16 b;
        memcpy(&b, emu_dsmem + off, 2);
        s += (double)A[row][k] * (double)bf16f(b);
      }
      d[4u * j + c] = (float)((double)d[4u * j + c] + s);
    }
}

// ---- cp.async --------------------------------------------------------------------------------------
// Two timings, both allowed by the PTX ISA (a copy lands somewhere between its issue and the
// wait that covers its group): at once (the default), or, with MXMOE_HIP_EMU_CPASYNC=late, only
// when the issuing thread waits for its group (cp.async.wait_group N: every committed group but
// the N newest; wait_all: all, the open group included). Late landing makes a kernel that reads
// shared memory its copies have not been waited for see the slot's old bytes (wrong sums); at
// once makes one that overwrites a slot another thread still reads show the new ones. The
// source bytes are taken at issue (no kernel writes what it copies).
struct EmuCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  u32 n;
};
static std::vector<std::vector<EmuCopy>> g_cp_groups[1024];  // per thread: committed groups, then the open one
static u64 g_cp_serial = ~0ull;
static int g_cp_late = -1;
static bool emu_cp_late() {
  if (g_cp_late < 0) {
    const char* v = getenv("MXMOE_HIP_EMU_CPASYNC");
    g_cp_late = v && std::string(v) == "late";
  }
  return g_cp_late != 0;
}
static std::vector<std::vector<EmuCopy>>& emu_cp_mine() {
  if (g_cp_serial != g_block_serial) {  // a new block: nothing pending
    g_cp_serial = g_block_serial;
    for (auto& q : g_cp_groups) q.clear();
  }
  auto& q = g_cp_groups[g_tid];
  if (q.empty()) q.emplace_back();  // the open group
  return q;
}
static void emu_copy(void* dst, const void* src, bool valid, u32 n) {
  if (!emu_cp_late()) {
    if (valid) memcpy(dst, src, n);
    else memset(dst, 0, n);
    return;
  }
  EmuCopy c{(unsigned char*)dst, {}, n};
  if (valid) memcpy(c.bytes, src, n);
  emu_cp_mine().back().push_back(c);
}
// Land the oldest committed groups of this thread until at most `keep` remain (all: the open one too).
static void emu_cp_land(size_t keep, bool all) {
  if (!emu_cp_late()) return;
  auto& q = emu_cp_mine();
  size_t committed = q.size() - 1u;
  size_t n = all ? q.size() : (committed > keep ? committed - keep : 0u);
  for (size_t i = 0; i < n; ++i)
    for (const EmuCopy& c : q[i]) memcpy(c.dst, c.bytes, c.n);
  q.erase(q.begin(), q.begin() + (ptrdiff_t)n);
  if (q.empty()) q.emplace_back();
}
MX_DEVICE void copy16_async(void* dst, const void* src, bool valid) { emu_copy(dst, src, valid, 16u); }
MX_DEVICE void copy8_async(void* dst, const void* src, bool valid) { emu_copy(dst, src, valid, 8u); }
MX_DEVICE void copy4_async(void* dst, const void* src, bool valid) { emu_copy(dst, src, valid, 4u); }
MX_DEVICE void copy_commit() {
  if (emu_cp_late()) emu_cp_mine().emplace_back();
}
MX_DEVICE void copy_wait_all() { emu_cp_land(0u, true); }
template <int N>
MX_DEVICE void copy_wait_group() {
  emu_cp_land((size_t)N, false);
}
