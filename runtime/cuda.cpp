// The per-device octet stream, the device guard, and the caching device allocator.
#include "runtime/cuda.h"

#include <atomic>
#include <cstring>
#include <deque>
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

namespace {
std::atomic<int64_t> g_device_to_host{0}, g_stream_waits{0}, g_blocking_uploads{0};
}  // namespace

HostSyncCounts host_sync_counts() {
  return {g_device_to_host.load(), g_stream_waits.load(), g_blocking_uploads.load()};
}

namespace detail {
void count_device_to_host() { ++g_device_to_host; }
void count_stream_wait() { ++g_stream_waits; }
void count_blocking_upload() { ++g_blocking_uploads; }
}  // namespace detail

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
  detail::count_stream_wait();
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
      auto& free = capturing_ != 0 ? pool_free_[capturing_] : free_;
      auto it = free.find(size);
      if (it != free.end() && !it->second.empty()) {
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
    if (capturing_ != 0) pool_of_[ptr] = capturing_;
    return ptr;
  }

  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    OCTET_ASSERT(it != live_.end(), "cuda:", index_, " free of a pointer this cache did not give");
    const size_t size = it->second;
    live_.erase(it);
    // A graph pool's block, or any block freed while a graph captures (the graph's replays may
    // still use it), stays in that pool.
    auto pool = pool_of_.find(ptr);
    const int id = pool != pool_of_.end() ? pool->second : capturing_;
    if (id != 0) {
      pool_of_[ptr] = id;
      pool_free_[id][size].push_back(ptr);
    } else {
      free_[size].push_back(ptr);
    }
    stats_.cached_bytes += size;
  }

  // Until end_pool(), allocations come from a new pool and every free goes to it.
  int begin_pool() {
    std::lock_guard lock(mutex_);
    OCTET_CHECK(capturing_ == 0, "cuda:", index_, ": a CUDA graph is already being captured");
    capturing_ = next_pool_++;
    return capturing_;
  }
  void end_pool() {
    std::lock_guard lock(mutex_);
    capturing_ = 0;
  }
  // The pool's free blocks go back to the cache; its live blocks become ordinary ones.
  void release_pool(int id) {
    std::lock_guard lock(mutex_);
    for (auto& [size, blocks] : pool_free_[id]) {
      auto& to = free_[size];
      to.insert(to.end(), blocks.begin(), blocks.end());
    }
    pool_free_.erase(id);
    std::erase_if(pool_of_, [id](const auto& entry) { return entry.second == id; });
  }

  CacheStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void release_cached() {
    std::lock_guard lock(mutex_);
    DeviceGuard guard(Device::cuda(index_));
    // Blocks may still be read by queued kernels of their last owner: wait for the stream.
    detail::count_stream_wait();
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
  // CUDA graph pools (Graph): the pool a capture allocates from (0: none), each pooled block's
  // pool, and each pool's free blocks, never handed to allocations outside their graph.
  int capturing_ = 0;
  int next_pool_ = 1;
  std::map<void*, int> pool_of_;
  std::map<int, std::map<size_t, std::vector<void*>>> pool_free_;
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

namespace {

// The page-locked ring behind upload_async, one per device. Each upload takes the next free
// stretch and records an event after its copy; a stretch is reused once the event of every
// upload that used it has passed (the stream runs them in order, so waiting for the newest
// overlapping one is enough, and with 16 MiB that wait is rare).
class StagingRing {
 public:
  static constexpr size_t kBytes = size_t{16} << 20;
  static constexpr size_t kAlign = 256;

  explicit StagingRing(int index) : index_(index) {}

  void upload(void* dst, const void* src, size_t bytes) {
    const Device device = Device::cuda(index_);
    DeviceGuard guard(device);
    const auto s = static_cast<cudaStream_t>(stream(device));
    if (bytes > kBytes / 4) {
      detail::count_blocking_upload();
      OCTET_CUDART_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
      return;
    }
    std::lock_guard lock(mutex_);
    if (base_ == nullptr) {
      void* p = nullptr;
      OCTET_CUDART_CHECK(cudaHostAlloc(&p, kBytes, cudaHostAllocDefault));
      base_ = static_cast<uint8_t*>(p);
    }
    const size_t size = (bytes + kAlign - 1) / kAlign * kAlign;
    size_t begin = head_ + size <= kBytes ? head_ : 0;
    // Uploads that have run give their stretch back without a wait.
    while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
      retire_front();
    }
    (void)cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not an error
    size_t newest = pending_.size();
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].begin < begin + size && begin < pending_[i].end) newest = i;
    }
    if (newest < pending_.size()) {
      detail::count_stream_wait();
      OCTET_CUDART_CHECK(cudaEventSynchronize(pending_[newest].done));
      for (size_t i = 0; i <= newest; ++i) retire_front();
    }
    std::memcpy(base_ + begin, src, bytes);
    OCTET_CUDART_CHECK(cudaMemcpyAsync(dst, base_ + begin, bytes, cudaMemcpyHostToDevice, s));
    cudaEvent_t done = nullptr;
    if (!free_events_.empty()) {
      done = free_events_.back();
      free_events_.pop_back();
    } else {
      OCTET_CUDART_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    }
    OCTET_CUDART_CHECK(cudaEventRecord(done, s));
    pending_.push_back({begin, begin + size, done});
    head_ = begin + size;
  }

 private:
  struct Pending {
    size_t begin, end;
    cudaEvent_t done;
  };

  void retire_front() {
    free_events_.push_back(pending_.front().done);
    pending_.pop_front();
  }

  int index_;
  std::mutex mutex_;
  uint8_t* base_ = nullptr;  // never freed: the driver may be gone at exit
  size_t head_ = 0;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
};

StagingRing& staging_ring(int index) {
  static std::mutex m;
  static auto* rings = new std::map<int, std::unique_ptr<StagingRing>>();
  std::lock_guard lock(m);
  auto& ring = (*rings)[index];
  if (ring == nullptr) ring = std::make_unique<StagingRing>(index);
  return *ring;
}

}  // namespace

namespace {

// The graph being captured on each device (at most one), for the uploads it records.
std::mutex& captures_mutex() {
  static std::mutex m;
  return m;
}
std::map<int, Graph*>& captures() {
  static auto* m = new std::map<int, Graph*>();
  return *m;
}
Graph* capturing_graph(Device device) {
  std::lock_guard lock(captures_mutex());
  auto it = captures().find(device.index);
  return it == captures().end() ? nullptr : it->second;
}

}  // namespace

void upload_async(Device device, void* dst, const void* src, size_t bytes) {
  OCTET_CHECK(device.is_cuda(), "upload_async to ", device, ": not a CUDA device");
  if (bytes == 0) return;
  if (Graph* g = capturing_graph(device)) {
    g->record_upload(dst, src, bytes);
    return;
  }
  staging_ring(device.index).upload(dst, src, bytes);
}

Graph::Graph(Device device) : device_(device) {
  OCTET_CHECK(device.is_cuda(), "cuda::Graph on ", device, ": not a CUDA device");
}

Graph::~Graph() {
  DeviceGuard guard(device_);
  if (capturing_) {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(static_cast<cudaStream_t>(stream(device_)), &g);
    if (g != nullptr) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    std::lock_guard lock(captures_mutex());
    captures().erase(device_.index);
    detail::caching_allocator(device_.index).end_pool();
  }
  if (exec_ != nullptr) {
    // Replays queued on the stream still use the pool and the host bytes.
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream(device_)));
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  }
  if (pool_ != 0) detail::caching_allocator(device_.index).release_pool(pool_);
  for (void* p : host_) cudaFreeHost(p);
}

void Graph::begin_capture() {
  OCTET_CHECK(exec_ == nullptr && !capturing_, "cuda::Graph: captured already");
  DeviceGuard guard(device_);
  {
    std::lock_guard lock(captures_mutex());
    OCTET_CHECK(captures().count(device_.index) == 0,
                "cuda::Graph: another graph is being "
                "captured on ",
                device_);
    captures()[device_.index] = this;
  }
  pool_ = detail::caching_allocator(device_.index).begin_pool();
  capturing_ = true;
  // Relaxed: the caching allocator may call cudaMalloc and cudaHostAlloc while capturing.
  OCTET_CUDART_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream(device_)),
                                            cudaStreamCaptureModeRelaxed));
}

void Graph::end_capture() {
  OCTET_CHECK(capturing_, "cuda::Graph::end_capture without begin_capture");
  DeviceGuard guard(device_);
  capturing_ = false;
  {
    std::lock_guard lock(captures_mutex());
    captures().erase(device_.index);
  }
  detail::caching_allocator(device_.index).end_pool();
  cudaGraph_t g = nullptr;
  const cudaError_t status = cudaStreamEndCapture(static_cast<cudaStream_t>(stream(device_)), &g);
  if (status != cudaSuccess) (void)cudaGetLastError();
  OCTET_CHECK(status == cudaSuccess && g != nullptr, "capturing a CUDA graph on ", device_,
              " failed: ", cudaGetErrorString(status),
              " (the captured work synchronised with the host, or used the legacy stream)");
  size_t count = 0;
  if (cudaGraphGetNodes(g, nullptr, &count) == cudaSuccess) nodes_ = static_cast<int64_t>(count);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  OCTET_CUDART_CHECK(made);
  exec_ = exec;
}

void Graph::replay() const {
  OCTET_CHECK(exec_ != nullptr, "cuda::Graph::replay before end_capture");
  DeviceGuard guard(device_);
  OCTET_CUDART_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                     static_cast<cudaStream_t>(stream(device_))));
}

void Graph::record_upload(void* dst, const void* src, size_t bytes) {
  void* p = nullptr;
  OCTET_CUDART_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  host_.push_back(p);
  std::memcpy(p, src, bytes);
  OCTET_CUDART_CHECK(cudaMemcpyAsync(dst, p, bytes, cudaMemcpyHostToDevice,
                                     static_cast<cudaStream_t>(stream(device_))));
}

namespace {

struct DeviceChecks {
  std::mutex mutex;
  std::vector<DeviceCheckMessage> messages;
  std::map<int, DeviceCheckRecord*> records;  // never freed: the driver may be gone at exit
  std::map<int, bool> armed;                  // a checking launch ran since the last look
};

DeviceChecks& device_checks() {
  static auto* checks = new DeviceChecks();
  return *checks;
}

}  // namespace

int32_t register_device_check(DeviceCheckMessage message) {
  DeviceChecks& c = device_checks();
  std::lock_guard lock(c.mutex);
  c.messages.push_back(std::move(message));
  return static_cast<int32_t>(c.messages.size() - 1);
}

DeviceCheckRecord* device_check_record(Device device) {
  OCTET_CHECK(device.is_cuda(), "device_check_record of ", device, ": not a CUDA device");
  DeviceChecks& c = device_checks();
  std::lock_guard lock(c.mutex);
  DeviceCheckRecord*& record = c.records[device.index];
  if (record == nullptr) {
    DeviceGuard guard(device);
    void* p = nullptr;
    OCTET_CUDART_CHECK(cudaMalloc(&p, sizeof(DeviceCheckRecord)));
    const DeviceCheckRecord fresh;
    upload_async(device, p, &fresh, sizeof(fresh));
    record = static_cast<DeviceCheckRecord*>(p);
  }
  c.armed[device.index] = true;
  return record;
}

void check_device_errors(Device device) {
  if (!device.is_cuda()) return;
  DeviceChecks& c = device_checks();
  DeviceCheckRecord* record = nullptr;
  {
    std::lock_guard lock(c.mutex);
    auto it = c.armed.find(device.index);
    if (it == c.armed.end() || !it->second) return;
    it->second = false;
    record = c.records[device.index];
  }
  DeviceCheckRecord got;
  {
    DeviceGuard guard(device);
    detail::count_device_to_host();
    OCTET_CUDART_CHECK(cudaMemcpy(&got, record, sizeof(got), cudaMemcpyDeviceToHost));
  }
  if (got.failed == 0) return;
  const DeviceCheckRecord fresh;
  upload_async(device, record, &fresh, sizeof(fresh));  // raised once
  DeviceCheckMessage message;
  {
    std::lock_guard lock(c.mutex);
    OCTET_ASSERT(got.check >= 0 && static_cast<size_t>(got.check) < c.messages.size(),
                 "device check record with unknown check ", got.check);
    message = c.messages[static_cast<size_t>(got.check)];
  }
  OCTET_FAIL(message(got), " (found on ", device, " by a kernel; raised at the next read)");
}

void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t n) {
  if (src_device.is_cpu()) {  // an upload: staged, in order on the stream, the host goes on
    upload_async(dst_device, dst, src, n);
    return;
  }
  DeviceGuard guard(dst_device.is_cuda() ? dst_device : src_device);
  if (capturing_graph(src_device) != nullptr) {
    // Inside a captured graph: on the stream, and never to the host (the host cannot wait).
    OCTET_CHECK(dst_device == src_device, "a copy of ", n, " bytes from ", src_device, " to ",
                dst_device,
                " inside a captured CUDA graph: only copies within the device can be "
                "captured");
    OCTET_CUDART_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice,
                                       static_cast<cudaStream_t>(stream(src_device))));
    return;
  }
  if (dst_device.is_cuda() && dst_device != src_device) synchronize(src_device);
  if (dst_device.is_cpu()) detail::count_device_to_host();
  const cudaError_t status = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
  OCTET_CHECK(status == cudaSuccess, "cudaMemcpy of ", n, " bytes from ", src_device, " to ",
              dst_device, " failed: ", cudaGetErrorString(status));
  // The stream is drained now: a bad id a kernel found before this copy is raised here.
  if (dst_device.is_cpu()) check_device_errors(src_device);
}

void move_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t n) {
  // cudaMemcpy runs on the legacy default stream of the current device, which waits for that
  // device's octet stream (a blocking stream) and is waited for by it. The GPU end is made
  // current (the destination of a GPU-to-GPU move), so the copy comes after the kernels that
  // wrote the source (or last used the cached destination block) and before later ones.
  const bool gpu_to_gpu = dst_device.is_cuda() && src_device.is_cuda();
  cudaError_t status = cudaSuccess;
  {
    DeviceGuard guard(dst_device.is_cuda() ? dst_device : src_device);
    // Another device's legacy stream does not wait for the source device's octet stream.
    if (gpu_to_gpu) status = cudaStreamSynchronize(static_cast<cudaStream_t>(stream(src_device)));
    if (gpu_to_gpu) detail::count_stream_wait();
    if (dst_device.is_cpu()) detail::count_device_to_host();
    if (src_device.is_cpu()) detail::count_blocking_upload();  // a move, not in a step
    if (status == cudaSuccess) status = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
    // A device-to-device cudaMemcpy may return before the copy ends; the source block goes back
    // to its device's cache, whose next owner's kernels would not wait for the copy.
    if (status == cudaSuccess && gpu_to_gpu) status = cudaDeviceSynchronize();
  }
  OCTET_CHECK(status == cudaSuccess, "moving ", n, " bytes from ", src_device, " to ", dst_device,
              " failed: ", cudaGetErrorString(status));
}

void zero_async(Device device, void* ptr, size_t n) {
  DeviceGuard guard(device);
  const cudaError_t status = cudaMemsetAsync(ptr, 0, n, static_cast<cudaStream_t>(stream(device)));
  OCTET_CHECK(status == cudaSuccess, "cudaMemsetAsync of ", n, " bytes on ", device,
              " failed: ", cudaGetErrorString(status));
}

void replicate_async(Device device, void* base, size_t element, size_t total) {
  DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream(device));
  auto* bytes = static_cast<uint8_t*>(base);
  for (size_t have = element; have < total; have *= 2) {
    const size_t n = have < total - have ? have : total - have;
    const cudaError_t status = cudaMemcpyAsync(bytes + have, bytes, n, cudaMemcpyDeviceToDevice, s);
    OCTET_CHECK(status == cudaSuccess, "full: cudaMemcpyAsync on ", device,
                " failed: ", cudaGetErrorString(status));
  }
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
void upload_async(Device device, void*, const void*, size_t) { no_cuda(device); }
Graph::Graph(Device device) : device_(device) { no_cuda(device); }
Graph::~Graph() = default;
void Graph::begin_capture() { no_cuda(device_); }
void Graph::end_capture() { no_cuda(device_); }
void Graph::replay() const { no_cuda(device_); }
void Graph::record_upload(void*, const void*, size_t) { no_cuda(device_); }
void copy_bytes(Device dst_device, void*, Device src_device, const void*, size_t) {
  OCTET_FAIL("copy between ", src_device, " and ", dst_device, " needs a CUDA build");
}
void move_bytes(Device dst_device, void*, Device src_device, const void*, size_t) {
  OCTET_FAIL("moving storage from ", src_device, " to ", dst_device, " needs a CUDA build");
}
void zero_async(Device device, void*, size_t) {
  OCTET_FAIL("zeros on ", device, " needs a CUDA build");
}
void replicate_async(Device device, void*, size_t, size_t) {
  OCTET_FAIL("full on ", device, " needs a CUDA build");
}
int32_t register_device_check(DeviceCheckMessage) { return 0; }
DeviceCheckRecord* device_check_record(Device device) { no_cuda(device); }
void check_device_errors(Device device) {
  if (device.is_cuda()) no_cuda(device);
}

#endif

}  // namespace octet::cuda
