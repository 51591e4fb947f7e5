// The CUDA device context octet runs on: one stream per device (every octet kernel, copy and
// library call on a device is ordered on it) and a guard that makes a device current. Only
// meaningful in a CUDA build; the declarations exist in every build so callers need no #if.
#pragma once

#include <cstddef>

#include "runtime/device.h"

namespace octet {
class Allocator;
}

namespace octet::cuda {

// The stream of `device` as cudaStream_t (void* keeps cuda_runtime_api.h out of this header).
// Created on first use as a blocking stream, so the legacy default stream (cudaMemcpy,
// cudaMemset) stays ordered with it.
void* stream(Device device);
// Waits until every operation queued on `device`'s stream has finished; rethrows a kernel's
// asynchronous error with the call that found it.
void synchronize(Device device);

// Makes `device` current for the scope, then restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The caching device allocator's own view (MemoryTracker counts live storages; this counts what
// the cache holds from the driver, live or free).
struct CacheStats {
  size_t reserved_bytes = 0;  // from cudaMalloc, not yet returned
  size_t cached_bytes = 0;    // free blocks kept for reuse
  size_t cuda_mallocs = 0;    // cudaMalloc calls so far
};
CacheStats cache_stats(Device device);
// Returns every free cached block to the driver (cudaFree).
void empty_cache(Device device);

namespace detail {
// The caching allocator of CUDA device `index` (runtime/memory.cpp's allocator_for uses it).
Allocator& device_allocator(int index);
}  // namespace detail

}  // namespace octet::cuda
