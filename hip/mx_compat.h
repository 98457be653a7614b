// mx_compat.h: the few GPU primitives the kernels need, for clang's CUDA mode (NVIDIA, PTX) and
// HIP mode (AMD, gfx942 / gfx950), without any vendor SDK header (`-nocudainc -nocudalib`,
// `-nogpuinc -nogpulib`). Everything target-specific outside the matrix-core fragments
// (hip/mx_fragment.h) is in this file: thread and block ids, barriers, shared-memory atomics,
// exp2 and the launch attributes.
//
// Sources of the spellings: clang's own headers __clang_cuda_builtin_vars.h (the NVPTX special
// registers behind threadIdx / blockIdx) and __clang_hip_runtime_wrapper.h / HIP's
// amd_device_functions.h (__syncthreads = fence + s_barrier + fence); the builtins are listed in
// clang's BuiltinsNVPTX.def and BuiltinsAMDGPU.def.
#pragma once
// hip/test/route_emu.cpp (the CPU emulation of the routing kernels) defines its own host twins
// of these primitives before including the kernel headers.
#if !defined(MX_HOST_EMU)

typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef unsigned short u16;

#define MX_DEVICE static __attribute__((device, always_inline)) inline
#define MX_SHARED __attribute__((shared))
// A kernel of at most n threads per block (the attributes go before the return type). clang's
// HIP mode ignores launch_bounds without HIP's headers, so AMD gets its own attribute (without
// it the register budget assumes 1024-thread blocks: 128 VGPRs).
// MX_KERNEL_OCC(n, b): and at least b blocks per multiprocessor (the register budget follows).
#if defined(__AMDGCN__)
#define MX_KERNEL(n) extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, n)))
#define MX_KERNEL_OCC(n, b) MX_KERNEL(n) __attribute__((amdgpu_waves_per_eu(((n) / 64 * (b) + 3) / 4)))
#else
#define MX_KERNEL(n) extern "C" __attribute__((global)) __attribute__((launch_bounds(n)))
#define MX_KERNEL_OCC(n, b) extern "C" __attribute__((global)) __attribute__((launch_bounds(n, b)))
#endif

#if defined(__AMDGCN__)
#define MX_AMD 1
MX_DEVICE u32 tid_x() { return __builtin_amdgcn_workitem_id_x(); }
MX_DEVICE u32 bid_x() { return __builtin_amdgcn_workgroup_id_x(); }
MX_DEVICE u32 bid_y() { return __builtin_amdgcn_workgroup_id_y(); }
MX_DEVICE void sync_threads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
// v from the lane `lane ^ mask` of the wavefront (mask < 32 stays within a 32-lane half).
MX_DEVICE float shfl_xor(float v, u32 mask) {
  u32 lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((int)((lane ^ mask) << 2), __builtin_bit_cast(int, v)));
}
// Lane src's v (within the executing group of 32 lanes here: src < 32 read from the same half).
MX_DEVICE float shfl_idx(float v, u32 src) {
  u32 lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((int)(((lane & 32u) | src) << 2), __builtin_bit_cast(int, v)));
}
MX_DEVICE float fast_exp2(float x) { return __builtin_amdgcn_exp2f(x); }
#define WARP 64
#elif defined(__NVPTX__)
#define MX_NV 1
MX_DEVICE u32 tid_x() { return __nvvm_read_ptx_sreg_tid_x(); }
MX_DEVICE u32 bid_x() { return __nvvm_read_ptx_sreg_ctaid_x(); }
MX_DEVICE u32 bid_y() { return __nvvm_read_ptx_sreg_ctaid_y(); }
MX_DEVICE void sync_threads() { __syncthreads(); }
MX_DEVICE float shfl_xor(float v, u32 mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}
MX_DEVICE float shfl_idx(float v, u32 src) {
  float r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(src));
  return r;
}
MX_DEVICE float fast_exp2(float x) { return __nvvm_ex2_approx_f(x); }
#define WARP 32
#else
#error "mx_compat.h: compile with clang -x cuda (NVPTX) or -x hip (AMDGCN), device side only"
#endif

// A device-wide memory fence, and a global load that sees other blocks' writes of the same
// kernel (an atomic load: no non-coherent cache), for the "last block" pattern (a block's writes,
// fence, counter; the block that completes the counter fences and reads them all).
#if defined(MX_AMD)
MX_DEVICE void fence_device() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
#else
MX_DEVICE void fence_device() { __nvvm_membar_gl(); }
#endif
MX_DEVICE float load_coherent(const float* p) {
  return __builtin_bit_cast(float, __atomic_load_n((const u32*)p, __ATOMIC_RELAXED));
}

// Global loads of read-only data that a kernel streams once (the decode GEMV's weights), 16 bytes
// and 1 byte. NVIDIA: ld.global.nc with L1::no_allocate (PTX ISA 7.4+, so the sm_90 PTX, which
// clang writes as ISA 7.8; the sm_80 PTX is ISA 7.0 and gets plain ld.global.nc): the lines do
// not displace the L1, which keeps the activations every lane re-reads. AMD: plain loads.
typedef unsigned int mx_u32x4 __attribute__((ext_vector_type(4)));
#if defined(MX_NV)
#if __CUDA_ARCH__ >= 900
#define MX_LD_STREAM "ld.global.nc.L1::no_allocate"
#else
#define MX_LD_STREAM "ld.global.nc"
#endif
MX_DEVICE mx_u32x4 load_stream16(const void* p) {
  u32 a, b, c, d;
  asm(MX_LD_STREAM ".v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
      : "l"(p));
  mx_u32x4 v = {a, b, c, d};
  return v;
}
MX_DEVICE u32 load_stream_u8(const void* p) {
  u32 v;
  asm(MX_LD_STREAM ".u8 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
MX_DEVICE u32 load_stream_u32(const void* p) {
  u32 v;
  asm(MX_LD_STREAM ".u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
#else
MX_DEVICE u32 load_stream_u32(const void* p) { return *(const u32*)p; }
MX_DEVICE mx_u32x4 load_stream16(const void* p) { return *(const mx_u32x4*)p; }
MX_DEVICE u32 load_stream_u8(const void* p) { return *(const unsigned char*)p; }
#endif

// Shared- or global-memory atomics on u32 (relaxed; barriers order them).
MX_DEVICE u32 atomic_add_u32(u32* p, u32 v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
MX_DEVICE void atomic_max_u32(u32* p, u32 v) { __atomic_fetch_max(p, v, __ATOMIC_RELAXED); }

// The sum of v over each group of 32 consecutive lanes, in a fixed butterfly order (every lane
// gets the same, deterministic result).
MX_DEVICE float sum32(float v) {
  for (u32 m = 16u; m > 0u; m >>= 1) v += shfl_xor(v, m);
  return v;
}
// f16 bits -> f32 (exact, subnormals included).
MX_DEVICE float f16_to_f32(u32 bits) { return (float)__builtin_bit_cast(_Float16, (u16)bits); }

MX_DEVICE u32 f2u(float f) { return __builtin_bit_cast(u32, f); }
MX_DEVICE float u2f(u32 u) { return __builtin_bit_cast(float, u); }
// Leading zeros of a 32-bit word (32 for 0, as WGSL's countLeadingZeros).
MX_DEVICE u32 clz32(u32 x) { return x == 0u ? 32u : (u32)__builtin_clz(x); }
MX_DEVICE u32 umin(u32 a, u32 b) { return a < b ? a : b; }
MX_DEVICE u32 umax(u32 a, u32 b) { return a > b ? a : b; }
MX_DEVICE i32 imin(i32 a, i32 b) { return a < b ? a : b; }
MX_DEVICE i32 imax(i32 a, i32 b) { return a > b ? a : b; }
// e^x through the hardware exp2 (about 2 ulp; the tolerance paths only: softmax without a
// correction bias, the SiLU / SwiGLU activation, as WGSL's exp).
MX_DEVICE float fast_exp(float x) { return fast_exp2(x * 1.4426950408889634f); }
#endif  // !MX_HOST_EMU
