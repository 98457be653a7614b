// emu_runtime.h: what the two CPU stand-ins for a GPU driver share (hip/test/hip_emu.cpp for
// HIP's libamdhip64.so, hip/test/cuda_emu.cpp for the CUDA driver): the kernel table (a kernel
// found by name, launched from the driver's argument array), the launch loop over a grid's
// blocks, host memory as device memory, events as wall-clock stamps, and the launch counts
// (MXMOE_HIP_EMU_STATS=1). Included after hip/mxmoe.cu and emu_core.h.
#pragma once
#include <chrono>
#include <mutex>
#include <type_traits>
#include <utility>

namespace emu_rt {

// A kernel: its launch from the driver's argument array (params[i] points at argument i).
typedef std::function<void(void**)> Invoke;
template <class... A, size_t... N>
void invoke_with(void (*f)(A...), void** params, std::index_sequence<N...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(params[N])...);
}
template <class... A>
Invoke wrap(void (*f)(A...)) {
  return [f](void** params) { invoke_with(f, params, std::index_sequence_for<A...>{}); };
}

struct Kernel {
  const char* name;
  Invoke run;
  mutable u64 launches = 0;
};

// The kernel called `name` in `table`, or null.
inline const Kernel* find(const std::vector<Kernel>& table, const char* name) {
  for (const Kernel& k : table)
    if (strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

inline std::mutex& launch_lock() {
  static std::mutex m;  // one kernel at a time (the kernels' shared memory is static)
  return m;
}

// Run grid (gx, gy) of blocks of n threads; false if the geometry is not one the kernels use.
inline bool launch(const Kernel* k, u32 gx, u32 gy, u32 gz, u32 bx, u32 by, u32 bz, void** params) {
  u32 n = bx * by * bz;
  if (!k || n == 0u || n > 1024u || by != 1u || bz != 1u || gz != 1u) return false;
  std::lock_guard<std::mutex> lock(launch_lock());
  emu::kernel_name = k->name;
  ++k->launches;
  std::function<void()> body = [&] { k->run(params); };
  for (u32 y = 0; y < gy; ++y)
    for (u32 x = 0; x < gx; ++x) emu_launch(n, x, y, body);
  return true;
}

// MXMOE_HIP_EMU_STATS=1: every kernel launched and how often, on stderr.
inline void print_stats(const std::vector<Kernel>& table, const char* device) {
  const char* v = getenv("MXMOE_HIP_EMU_STATS");
  if (!v || strcmp(v, "1") != 0) return;
  fprintf(stderr, "hip_emu: kernel launches (%s):\n", device);
  for (const Kernel& k : table)
    if (k.launches) fprintf(stderr, "  %-36s %llu\n", k.name, (unsigned long long)k.launches);
}

// ---- memory and events, for both APIs (0 = success, 2 = out of memory in HIP and CUDA alike) ----
// Device memory is host memory: a device pointer is the host address.
inline void* alloc(size_t bytes) { return aligned_alloc(256, (bytes + 255) / 256 * 256 + 256); }
inline int dev_alloc(u64* ptr, size_t bytes) {
  void* p = alloc(bytes);
  if (!p) return 2;
  *ptr = (u64)(uintptr_t)p;
  return 0;
}
inline int dev_free(u64 ptr) {
  free((void*)(uintptr_t)ptr);
  return 0;
}
inline int host_alloc(void** p, size_t bytes) {
  *p = alloc(bytes);
  return *p ? 0 : 2;
}
inline int host_free(void* p) {
  free(p);
  return 0;
}
inline int htod(u64 dst, const void* src, size_t bytes) {
  memcpy((void*)(uintptr_t)dst, src, bytes);
  return 0;
}
inline int dtoh(void* dst, u64 src, size_t bytes) {
  memcpy(dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
inline int dtod(u64 dst, u64 src, size_t bytes) {
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
inline int memset32(u64 dst, u32 value, size_t count) {
  u32* p = (u32*)(uintptr_t)dst;
  for (size_t i = 0; i < count; ++i) p[i] = value;
  return 0;
}
// Events: the wall-clock time of the record call (everything before it has run).
inline int event_create(void** e) {
  *e = new double(0.0);
  return 0;
}
inline int event_record(void* e) {
  *(double*)e = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return 0;
}
inline int event_elapsed(float* ms, void* a, void* b) {
  *ms = (float)(*(double*)b - *(double*)a);
  return 0;
}
inline int event_destroy(void* e) {
  delete (double*)e;
  return 0;
}

}  // namespace emu_rt
