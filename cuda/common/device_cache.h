// Per-device answers the kernel launchers need on every call (compute capability, SM count,
// opt-in shared memory, how far a kernel's dynamic shared memory limit was raised), asked of the
// CUDA runtime once per device and kept here: the explicit cache of the launch path. Every
// launcher includes this one copy (inline functions: one cache per process). Host-only; no torch
// headers. Thread-safe: the device values never change, so racing first queries store the same
// value; the raised limits are kept under a lock.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

namespace deconv_patch {

constexpr int kMaxCachedDevices = 64;  // devices with an index beyond are asked every time

// The current device, or -1 when the runtime cannot tell.
inline int current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return device;
}

// A non-negative per-device value named by Tag (one cache per Tag), from ask() the first time
// for each device; -1 when ask() cannot tell (then not cached and asked again next time).
template <typename Tag, typename Ask>
int cached_per_device(int device, Ask&& ask) {
  // value + 1 per device; 0 = not asked yet (zero-initialised: static storage)
  static std::atomic<int> cache[kMaxCachedDevices];
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable) {
    const int v = cache[device].load(std::memory_order_relaxed);
    if (v > 0) return v - 1;
  }
  const int v = device < 0 ? -1 : ask();
  if (v < 0) return -1;
  if (cacheable) cache[device].store(v + 1, std::memory_order_relaxed);
  return v;
}

// Attribute kAttr of `device`, asked once (-1 when the runtime cannot tell; not cached then).
template <cudaDeviceAttr kAttr>
int cached_device_attribute(int device) {
  return cached_per_device<std::integral_constant<cudaDeviceAttr, kAttr>>(device, [device] {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, kAttr, device) != cudaSuccess || v < 0) {
      (void)cudaGetLastError();
      return -1;
    }
    return v;
  });
}

// Multiprocessors of `device` (-1 when unknown).
inline int device_sm_count(int device) {
  return cached_device_attribute<cudaDevAttrMultiProcessorCount>(device);
}
// Shared memory a block may opt in to on `device` (-1 when unknown).
inline int device_optin_smem(int device) {
  return cached_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device);
}
// What bounds how many blocks an SM holds at once (-1 when unknown): shared memory per SM and
// per block reserved by the system, 32-bit registers per SM, and resident blocks / threads.
inline int device_smem_per_sm(int device) {
  return cached_device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>(device);
}
inline int device_reserved_smem_per_block(int device) {
  return cached_device_attribute<cudaDevAttrReservedSharedMemoryPerBlock>(device);
}
inline int device_regs_per_sm(int device) {
  return cached_device_attribute<cudaDevAttrMaxRegistersPerMultiprocessor>(device);
}
inline int device_blocks_per_sm(int device) {
  return cached_device_attribute<cudaDevAttrMaxBlocksPerMultiprocessor>(device);
}
inline int device_threads_per_sm(int device) {
  return cached_device_attribute<cudaDevAttrMaxThreadsPerMultiProcessor>(device);
}
// Compute capability 9.0 (H100/H200), where the sm_90a cubins run.
inline bool device_is_sm90(int device) {
  return cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(device) == 9 &&
         cached_device_attribute<cudaDevAttrComputeCapabilityMinor>(device) == 0;
}
inline bool current_device_is_sm90() { return device_is_sm90(current_device()); }

// Lets `kernel` launch with `bytes` of dynamic shared memory on `device` (the opt-in above
// 48 KiB): checks the device's opt-in limit (cudaErrorInvalidConfiguration when it is smaller)
// and raises cudaFuncAttributeMaxDynamicSharedMemorySize when `bytes` is above what was set for
// (kernel, device) before. The limit only grows: a kernel whose plans ask for different amounts
// (the grouped kernel's do) keeps the largest, because lowering it would make the launches of
// larger plans fail, this thread's next one or another thread's at the same time.
inline cudaError_t ensure_dynamic_smem(const void* kernel, int bytes, int device) {
  if (device < 0) return cudaErrorInvalidDevice;
  if (device_optin_smem(device) < bytes) return cudaErrorInvalidConfiguration;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> raised_to;  // (kernel, device) -> bytes
  const std::lock_guard<std::mutex> lock(mutex);  // held while setting: no raise undoes another
  int& limit = raised_to[{kernel, device}];
  if (bytes <= limit) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  limit = bytes;
  return cudaSuccess;
}
template <typename... Args>
cudaError_t ensure_dynamic_smem(void (*kernel)(Args...), int bytes, int device) {
  return ensure_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes, device);
}

}  // namespace deconv_patch
