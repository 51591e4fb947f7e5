// The per-device octet stream, the device guard, and the caching device allocator.
#include "runtime/cuda.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/error.h"
#include "runtime/memory.h"

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>

#define OCTET_CUDART_CHECK(call)                                    \
  do {                                                              \
    const cudaError_t octet_rt_status_ = (call);                    \
    OCTET_CHECK(octet_rt_status_ == cudaSuccess, #call,             \
                " failed: ", cudaGetErrorString(octet_rt_status_)); \
  } while (0)
#endif

namespace octet::cuda {

#if OCTET_WITH_CUDA

namespace {

std::mutex& streams_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void* stream(Device device) {
  OCTET_CHECK(device.is_cuda(), "cuda::stream of ", device, ": not a CUDA device");
  static std::map<int, cudaStream_t> streams;
  std::lock_guard lock(streams_mutex());
  auto it = streams.find(device.index);
  if (it != streams.end()) return it->second;
  require_device(device);
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  // Blocking (not cudaStreamNonBlocking): cudaMemcpy and cudaMemset on the legacy default
  // stream then wait for octet's kernels and the other way round, so host copies need no events.
  OCTET_CUDART_CHECK(cudaStreamCreate(&s));
  streams.emplace(device.index, s);
  return s;
}

void synchronize(Device device) {
  DeviceGuard guard(device);
  OCTET_CUDART_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream(device))));
}

DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  OCTET_CUDART_CHECK(cudaGetDevice(&current));
  if (current != device.index) {
    OCTET_CUDART_CHECK(cudaSetDevice(device.index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

namespace detail {

// Blocks are rounded up (512 bytes below 1 MiB, 2 MiB above) and kept on a free list per
// rounded size when released. Every octet operation on a device runs on its one stream, so a
// block freed by the host can be handed to the next allocation at once: the stream orders the
// old kernels' last use before the new owner's first. MemoryTracker still counts exact requested
// bytes of live storages (Storage does that); this class counts what it holds from the driver.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int index) : index_(index) {}
  ~CachingAllocator() override = default;  // process exit: the driver reclaims device memory

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t size = rounded(bytes);
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* ptr = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= size;
        live_.emplace(ptr, size);
        return ptr;
      }
    }
    DeviceGuard guard(Device::cuda(index_));
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      // Out of memory with blocks cached: give them back and try once more.
      (void)cudaGetLastError();
      release_cached();
      status = cudaMalloc(&ptr, size);
    }
    // A failed cudaMalloc also sets the thread's last error, which the next launch check would
    // report as that kernel's failure once a caller catches this one.
    if (status != cudaSuccess) (void)cudaGetLastError();
    OCTET_CHECK(status == cudaSuccess, "cudaMalloc of ", size, " bytes (", bytes,
                " requested) on cuda:", index_, " failed: ", cudaGetErrorString(status),
                " (the cache holds ", cached_bytes(), " free bytes)");
    std::lock_guard lock(mutex_);
    stats_.reserved_bytes += size;
    ++stats_.cuda_mallocs;
    live_.emplace(ptr, size);
    return ptr;
  }

  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    OCTET_ASSERT(it != live_.end(), "cuda:", index_, " free of a pointer this cache did not give");
    const size_t size = it->second;
    live_.erase(it);
    free_[size].push_back(ptr);
    stats_.cached_bytes += size;
  }

  CacheStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void release_cached() {
    std::lock_guard lock(mutex_);
    DeviceGuard guard(Device::cuda(index_));
    // Blocks may still be read by queued kernels of their last owner: wait for the stream.
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream(Device::cuda(index_))));
    for (auto& [size, blocks] : free_) {
      for (void* ptr : blocks) {
        cudaFree(ptr);
        stats_.reserved_bytes -= size;
        stats_.cached_bytes -= size;
      }
      blocks.clear();
    }
  }

 private:
  static size_t rounded(size_t bytes) {
    constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kLargeFrom = size_t{1} << 20;
    const size_t unit = bytes < kLargeFrom ? kSmall : kLarge;
    return (bytes + unit - 1) / unit * unit;
  }
  size_t cached_bytes() {
    std::lock_guard lock(mutex_);
    return stats_.cached_bytes;
  }

  int index_;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  std::map<void*, size_t> live_;
  CacheStats stats_;
};

CachingAllocator& caching_allocator(int index) {
  static std::mutex mutex;
  // Never destroyed: a static Tensor destroyed at exit after this map would free into a dead
  // allocator. The driver reclaims the device memory.
  static auto* allocators = new std::map<int, std::unique_ptr<CachingAllocator>>();
  std::lock_guard lock(mutex);
  auto& slot = (*allocators)[index];
  if (!slot) slot = std::make_unique<CachingAllocator>(index);
  return *slot;
}

}  // namespace detail

CacheStats cache_stats(Device device) {
  OCTET_CHECK(device.is_cuda(), "cache_stats of ", device, ": not a CUDA device");
  return detail::caching_allocator(device.index).stats();
}

void empty_cache(Device device) {
  OCTET_CHECK(device.is_cuda(), "empty_cache of ", device, ": not a CUDA device");
  detail::caching_allocator(device.index).release_cached();
}

namespace detail {
Allocator& device_allocator(int index) { return caching_allocator(index); }
}  // namespace detail

#else  // !OCTET_WITH_CUDA

namespace {
[[noreturn]] void no_cuda(Device device) {
  OCTET_FAIL("device ", device, " requested but octet was built without CUDA");
}
}  // namespace

void* stream(Device device) { no_cuda(device); }
void synchronize(Device device) { no_cuda(device); }
DeviceGuard::DeviceGuard(Device device) {
  if (device.is_cuda()) no_cuda(device);
}
DeviceGuard::~DeviceGuard() = default;
CacheStats cache_stats(Device device) { no_cuda(device); }
void empty_cache(Device device) { no_cuda(device); }

#endif

}  // namespace octet::cuda
