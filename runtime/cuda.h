// The CUDA device context octet runs on: one stream per device (every octet kernel, copy and
// library call on a device is ordered on it) and a guard that makes a device current. Only
// meaningful in a CUDA build; the declarations exist in every build so callers need no #if.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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

// Copies `bytes` of host memory to `dst` on `device` in order on its octet stream, without making
// the host wait: the bytes are first copied into a page-locked staging ring, which the device
// reads when the stream gets there, so `src` may be reused on return. An upload larger than a
// quarter of the ring goes through a blocking cudaMemcpy instead (counted below).
void upload_async(Device device, void* dst, const void* src, size_t bytes);

// One piece of work on `device`'s stream captured once and replayed (a CUDA graph). Between
// begin_capture() and end_capture() what is queued on the stream is recorded, not run: kernels,
// copies, library calls. Memory allocated meanwhile, and memory freed meanwhile, belongs to a
// pool of the caching allocator kept for the graph's replays until the graph is destroyed (never
// handed to other tensors); bytes uploaded meanwhile are kept in page-locked host memory and
// uploaded again by each replay. The captured work must not wait for the device (a copy to the
// host, a synchronisation) nor use the legacy stream: end_capture() then throws.
class Graph {
 public:
  explicit Graph(Device device);
  ~Graph();  // waits for queued replays
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void begin_capture();
  void end_capture();                       // instantiates the graph
  void replay() const;                      // queues one run of the graph on the stream
  int64_t nodes() const { return nodes_; }  // operations captured
  // upload_async while this graph captures (runtime/cuda.cpp).
  void record_upload(void* dst, const void* src, size_t bytes);

 private:
  Device device_;
  void* exec_ = nullptr;  // cudaGraphExec_t
  int pool_ = 0;
  bool capturing_ = false;
  int64_t nodes_ = 0;
  std::vector<void*> host_;  // page-locked copies of the captured uploads
};

// The device side of runtime's byte copies (runtime/tensor.cpp, storage.cpp); at least one end
// is a CUDA device, and a build without CUDA says so.
// Tensor copies: an upload is upload_async; otherwise the legacy default stream of the GPU end's
// device orders the copy with that device's octet stream, a GPU-to-GPU copy first waits for the
// source device's stream, and a download raises a bad id a kernel found before it.
void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes);
// A storage moved between devices (Storage::move_to): a blocking copy that also waits for a
// device-to-device copy to end, since the source block goes back to its device's cache.
void move_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes);
// Zeroes `bytes` at `ptr` on `device`, on its octet stream, no wait.
void zero_async(Device device, void* ptr, size_t bytes);
// Fills [base, base + total) on `device` with copies of its first `element` bytes, doubling in
// place by device-to-device copies on the stream (no host buffer, no wait).
void replicate_async(Device device, void* base, size_t element, size_t total);

// Host synchronisation done by octet's CUDA code (counted in every CUDA build, the emulation's
// too): a training step should make none but its loss read. device_to_host: copies to host
// memory (each waits for the stream); stream_waits: waits for a stream, an event or a device;
// blocking_uploads: host-to-device copies that held the host until the stream reached them.
struct HostSyncCounts {
  int64_t device_to_host = 0;
  int64_t stream_waits = 0;
  int64_t blocking_uploads = 0;
  int64_t total() const { return device_to_host + stream_waits + blocking_uploads; }
};
HostSyncCounts host_sync_counts();  // since the process started, all devices

// Checks that kernels make on values the host does not see (token ids, targets): a kernel that
// finds a bad value records the first one (the first failing launch in stream order, its lowest
// position) in a small record on the device and goes on without reading out of range; the host
// raises it as an octet::Error at its next copy from the device (Tensor::to the CPU, item(), a
// loss read at a log interval) or at check_device_errors. So a training step validates its ids
// with no copy back of its own.
struct DeviceCheckRecord {
  uint32_t failed = 0;              // 1 once a check failed (sticky until raised)
  int32_t check = 0;                // what register_device_check returned
  uint64_t pending = ~uint64_t{0};  // lowest bad position of the running launch (atomicMin)
  int64_t position = 0, value = 0;  // the first bad value and where it was
  int64_t limit = 0, extra = 0;     // the check's arguments (a table's rows, ignore_index)
};
// A check's message from its record; the code goes into DeviceCheckRecord::check.
using DeviceCheckMessage = std::function<std::string(const DeviceCheckRecord&)>;
int32_t register_device_check(DeviceCheckMessage message);
// `device`'s record (a device pointer, zeroed on first use), for a launch that checks; marks the
// device as having checks to read back.
DeviceCheckRecord* device_check_record(Device device);
// Raises the first failed check on `device` (one copy back, only when a checking launch ran
// since the last look), naming the bad value, where it was found and what was expected.
void check_device_errors(Device device);

namespace detail {
// The caching allocator of CUDA device `index` (runtime/memory.cpp's allocator_for uses it).
Allocator& device_allocator(int index);
// Called where the synchronisation happens (runtime/, kernels/cuda/).
void count_device_to_host();
void count_stream_wait();
void count_blocking_upload();
}  // namespace detail

}  // namespace octet::cuda
