// cuda_emu.cpp: a stand-in for NVIDIA's CUDA driver (libcuda.so.1) that runs the HIP backend's
// kernels on the CPU as an sm_90 GPU would, so that the backend's NVIDIA paths (the matrix-core
// GEMV and GEMM, the nv4 weight layout, warp routing, the v2 GEMM) run in CI without a GPU:
//
//   clang++-19 -std=c++20 -O1 -shared -fPIC -Wno-ignored-attributes -Wno-psabi -I hip \
//     hip/test/cuda_emu.cpp -o /tmp/libcuda_emu.so
//   MXMOE_HIP_LIBRARY=/tmp/libcuda_emu.so MXMOE_REQUIRE_HIP=1 mxmoe check --backend hip
//
// (a library name containing "cuda" is driven through the CUDA driver API, src/backend/hip/
// driver.rs). It implements the calls driver.rs binds: device memory is host memory, copies are
// memcpy, kernels run at once and in order, and cuModuleGetFunction finds a kernel by name in the
// table of hip/test/nv_kernels.inc, compiled from hip/mxmoe.cu for the host under
// hip/test/nv_emu.h (32-lane warps; mma.sync, ldmatrix, cp.async and the other PTX instructions
// emulated from the PTX ISA). The PTX the backend passes is only checked to be PTX for sm_90 (its
// kernels are these host builds of the same source). MXMOE_HIP_EMU_STATS=1 lists the kernels that
// ran at exit. What this checks is our code against NVIDIA's documents; the H200 runs
// (docs/MEASURED.md) check the hardware.
#include "nv_emu.h"

#include "mxmoe.cu"
#include "emu_runtime.h"

namespace {

using emu_rt::Kernel;
// Never destroyed: the launch counts are printed from a static destructor (Stats) at exit.
const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel>& table = *new std::vector<Kernel>{
#define K(name) {#name, emu_rt::wrap(name), 0},
#include "nv_kernels.inc"
#undef K
  };
  return table;
}

// CUresult values (CUDA's cuda.h).
enum : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kNotFound = 500,
};

struct Stats {
  ~Stats() { emu_rt::print_stats(kernels(), "sm_90"); }
} g_stats;

int g_ctx;  // the primary context's handle points here

}  // namespace

extern "C" {

int cuInit(unsigned) { return kSuccess; }
int cuDeviceGetCount(int* n) {
  *n = 1;
  return kSuccess;
}
int cuDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return kInvalidDevice;
  *dev = 0;
  return kSuccess;
}
int cuDeviceGetName(char* name, int len, int) {
  snprintf(name, (size_t)len, "%s", "NVIDIA H200 (mxmoe CPU emulation)");
  return kSuccess;
}
int cuDeviceTotalMem_v2(size_t* bytes, int) {
  *bytes = (size_t)4 << 30;
  return kSuccess;
}
int cuDriverGetVersion(int* v) {
  *v = 12090;
  return kSuccess;
}
// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR (75 / 76), _MULTIPROCESSOR_COUNT (16).
int cuDeviceGetAttribute(int* v, int attr, int) {
  *v = attr == 75 ? 9 : attr == 76 ? 0 : attr == 16 ? 132 : 0;
  return kSuccess;
}
int cuDevicePrimaryCtxRetain(void** ctx, int) {
  *ctx = &g_ctx;
  return kSuccess;
}
int cuCtxSetCurrent(void*) { return kSuccess; }
int cuCtxSynchronize() { return kSuccess; }
int cuModuleLoadData(void** module, const void* image) {
  const char* t = (const char*)image;
  if (!t || !strstr(t, ".target sm_90")) return kInvalidImage;
  *module = (void*)&kernels();
  return kSuccess;
}
int cuModuleGetFunction(void** f, void*, const char* name) {
  const Kernel* k = emu_rt::find(kernels(), name);
  if (!k) return kNotFound;
  *f = (void*)k;
  return kSuccess;
}
int cuFuncSetAttribute(void*, int, int) { return kSuccess; }
int cuLaunchKernel(void* f, u32 gx, u32 gy, u32 gz, u32 bx, u32 by, u32 bz, u32 shared, void*, void** params,
                   void** extra) {
  if (extra || shared > sizeof(emu_dsmem)) return kInvalidValue;
  emu_dsmem_bytes = shared;
  return emu_rt::launch((const Kernel*)f, gx, gy, gz, bx, by, bz, params) ? kSuccess : kInvalidValue;
}
int cuMemAlloc_v2(u64* ptr, size_t bytes) { return emu_rt::dev_alloc(ptr, bytes); }
int cuMemFree_v2(u64 ptr) { return emu_rt::dev_free(ptr); }
int cuMemHostAlloc(void** p, size_t bytes, unsigned) { return emu_rt::host_alloc(p, bytes); }
int cuMemFreeHost(void* p) { return emu_rt::host_free(p); }
int cuMemcpyHtoD_v2(u64 dst, const void* src, size_t bytes) { return emu_rt::htod(dst, src, bytes); }
int cuMemcpyHtoDAsync_v2(u64 dst, const void* src, size_t bytes, void*) { return emu_rt::htod(dst, src, bytes); }
int cuMemcpyDtoH_v2(void* dst, u64 src, size_t bytes) { return emu_rt::dtoh(dst, src, bytes); }
int cuMemcpyDtoD_v2(u64 dst, u64 src, size_t bytes) { return emu_rt::dtod(dst, src, bytes); }
int cuMemsetD32_v2(u64 dst, u32 value, size_t count) { return emu_rt::memset32(dst, value, count); }
int cuEventCreate(void** e, unsigned) { return emu_rt::event_create(e); }
int cuEventRecord(void* e, void*) { return emu_rt::event_record(e); }
int cuEventSynchronize(void*) { return kSuccess; }
int cuEventElapsedTime(float* ms, void* a, void* b) { return emu_rt::event_elapsed(ms, a, b); }
int cuEventDestroy_v2(void* e) { return emu_rt::event_destroy(e); }
int cuGetErrorString(int e, const char** s) {
  switch (e) {
    case kSuccess: *s = "CUDA_SUCCESS"; break;
    case kInvalidValue: *s = "CUDA_ERROR_INVALID_VALUE (mxmoe CPU emulation: a launch it cannot run)"; break;
    case kOutOfMemory: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case kInvalidDevice: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
    case kInvalidImage: *s = "CUDA_ERROR_INVALID_IMAGE (not sm_90 PTX)"; break;
    case kNotFound: *s = "CUDA_ERROR_NOT_FOUND (no such kernel in the emulation's table)"; break;
    default: *s = "unknown error";
  }
  return kSuccess;
}

}  // extern "C"
