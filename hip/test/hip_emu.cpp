// hip_emu.cpp: a stand-in for AMD's HIP runtime (libamdhip64.so) that runs the HIP backend's
// kernels on the CPU as an MI350 (gfx950) or MI300 (gfx942) would, so that the whole backend
// (src/backend/hip/: device open, code-object choice, kernel names, launch geometry, buffers)
// and every AMD code path of hip/mxmoe.cu run without AMD hardware:
//
//   clang++-19 -std=c++20 -O1 -pthread -shared -fPIC -Wno-ignored-attributes -Wno-psabi -I hip \
//     hip/test/hip_emu.cpp -o /tmp/libamdhip64_emu.so
//   MXMOE_HIP_LIBRARY=/tmp/libamdhip64_emu.so MXMOE_REQUIRE_HIP=1 \
//     mxmoe check --backend hip --suite quick --filter moe/
//
// It implements the calls src/backend/hip/driver.rs binds (HIP's module API): device memory is
// host memory (a device pointer is the host address), copies are memcpy, kernels run at once and
// in order (so events time wall clock), and hipModuleGetFunction finds a kernel by name in the
// table below: every kernel of the AMD code objects (hip/test/amd_kernels.inc, which a test
// compares with kernels.rs's name tables), compiled from hip/mxmoe.cu for the host under
// hip/test/amd_emu.h (64-lane wavefronts, both MFMA instructions emulated from AMD's documented
// layouts, every GPU thread a fiber). The code object the backend passes is only checked to
// be an ELF file (its kernels are these host builds of the same source).
//
// MXMOE_HIP_EMU_STATS=1 lists the kernels that ran at exit. MXMOE_HIP_EMU_ARCH=gfx942 makes it an MI300 (the backend then picks the gfx942 code object and
// its kernels; the scaled-MFMA GEMMs are not used); the default is gfx950. It is slow (one CPU
// thread runs every GPU thread, switching at each barrier): meant for the catalog's small cases.
#include "amd_emu.h"

#include <string>

#include "mxmoe.cu"
#include "emu_runtime.h"

namespace {

using emu_rt::Kernel;
// Never destroyed: the launch counts are printed from a static destructor (Stats) at exit.
const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel>& table = *new std::vector<Kernel>{
#define K(name) {#name, emu_rt::wrap(name), 0},
#include "amd_kernels.inc"
#undef K
  };
  return table;
}

std::string arch() {
  const char* a = getenv("MXMOE_HIP_EMU_ARCH");
  return a && *a ? a : "gfx950";
}

// hipError_t values (HIP's hip_runtime_api.h).
enum : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kNotFound = 500,
};

// MXMOE_HIP_EMU_STATS=1: at exit, every kernel launched and how often (stderr).
struct Stats {
  ~Stats() { emu_rt::print_stats(kernels(), arch().c_str()); }
} g_stats;

}  // namespace

extern "C" {

int hipInit(unsigned) { return kSuccess; }
int hipGetDeviceCount(int* n) {
  *n = 1;
  return kSuccess;
}
int hipDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return kInvalidDevice;
  *dev = 0;
  return kSuccess;
}
int hipSetDevice(int ordinal) { return ordinal == 0 ? kSuccess : kInvalidDevice; }
int hipDeviceGetName(char* name, int len, int) {
  std::string s = arch() == "gfx942" ? "AMD Instinct MI300X (mxmoe CPU emulation)"
                                     : "AMD Instinct MI350X (mxmoe CPU emulation)";
  snprintf(name, (size_t)len, "%s", s.c_str());
  return kSuccess;
}
int hipDeviceTotalMem(size_t* bytes, int) {
  *bytes = (size_t)4 << 30;
  return kSuccess;
}
int hipDriverGetVersion(int* v) {
  *v = 60000000;
  return kSuccess;
}
// hipDeviceProp_t: the backend only looks for gcnArchName ("gfx..." somewhere in the struct);
// the name goes first, as in the real layout.
int hipGetDevicePropertiesR0600(void* props, int) {
  char* p = (char*)props;
  memset(p, 0, 1472);
  hipDeviceGetName(p, 256, 0);
  std::string a = arch() + ":sramecc+:xnack-";
  memcpy(p + 1160, a.c_str(), a.size() + 1);
  return kSuccess;
}
int hipModuleLoadData(void** module, const void* image) {
  const unsigned char* b = (const unsigned char*)image;
  if (!b || b[0] != 0x7F || b[1] != 'E' || b[2] != 'L' || b[3] != 'F') return kInvalidImage;
  *module = (void*)&kernels();
  return kSuccess;
}
int hipModuleGetFunction(void** f, void*, const char* name) {
  const Kernel* k = emu_rt::find(kernels(), name);
  if (!k) return kNotFound;
  *f = (void*)k;
  return kSuccess;
}
int hipFuncSetAttribute(const void*, int, int) { return kSuccess; }
int hipModuleLaunchKernel(void* f, u32 gx, u32 gy, u32 gz, u32 bx, u32 by, u32 bz, u32, void*, void** params,
                          void** extra) {
  if (extra) return kInvalidValue;
  return emu_rt::launch((const Kernel*)f, gx, gy, gz, bx, by, bz, params) ? kSuccess : kInvalidValue;
}
int hipMalloc(u64* ptr, size_t bytes) { return emu_rt::dev_alloc(ptr, bytes); }
int hipFree(u64 ptr) { return emu_rt::dev_free(ptr); }
int hipHostMalloc(void** p, size_t bytes, unsigned) { return emu_rt::host_alloc(p, bytes); }
int hipHostFree(void* p) { return emu_rt::host_free(p); }
int hipMemcpyHtoD(u64 dst, const void* src, size_t bytes) { return emu_rt::htod(dst, src, bytes); }
int hipMemcpyHtoDAsync(u64 dst, const void* src, size_t bytes, void*) { return emu_rt::htod(dst, src, bytes); }
int hipMemcpyDtoH(void* dst, u64 src, size_t bytes) { return emu_rt::dtoh(dst, src, bytes); }
int hipMemcpyDtoD(u64 dst, u64 src, size_t bytes) { return emu_rt::dtod(dst, src, bytes); }
int hipMemsetD32(u64 dst, u32 value, size_t count) { return emu_rt::memset32(dst, value, count); }
int hipDeviceSynchronize() { return kSuccess; }
int hipEventCreateWithFlags(void** e, unsigned) { return emu_rt::event_create(e); }
int hipEventRecord(void* e, void*) { return emu_rt::event_record(e); }
int hipEventSynchronize(void*) { return kSuccess; }
int hipEventElapsedTime(float* ms, void* a, void* b) { return emu_rt::event_elapsed(ms, a, b); }
int hipEventDestroy(void* e) { return emu_rt::event_destroy(e); }
const char* hipGetErrorString(int e) {
  switch (e) {
    case kSuccess: return "hipSuccess";
    case kInvalidValue: return "hipErrorInvalidValue (mxmoe CPU emulation: a launch it cannot run)";
    case kOutOfMemory: return "hipErrorOutOfMemory";
    case kInvalidDevice: return "hipErrorInvalidDevice";
    case kInvalidImage: return "hipErrorInvalidImage (not an ELF code object)";
    case kNotFound: return "hipErrorNotFound (no such kernel in the emulation's table)";
  }
  return "unknown error";
}

}  // extern "C"
