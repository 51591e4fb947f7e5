// Memory accounting and the CPU/CUDA allocators.
#include "runtime/memory.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/cuda.h"
#include "runtime/error.h"

namespace octet {
namespace {

constexpr std::string_view kTagNames[kNumMemTags] = {
    "weights", "grads", "optimizer", "activations", "saved", "workspace", "other"};

void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

size_t index_of(MemTag tag) {
  const auto index = static_cast<size_t>(tag);
  OCTET_CHECK(index < kNumMemTags, "unknown memory tag code ", index);
  return index;
}

thread_local MemTag t_current_tag = MemTag::kOther;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    const int status = posix_memalign(&ptr, kCpuAlignment, bytes);
    OCTET_CHECK(status == 0 && ptr != nullptr, "out of host memory allocating ", bytes, " bytes");
    return ptr;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace

std::string_view mem_tag_name(MemTag tag) { return kTagNames[index_of(tag)]; }

void MemoryTracker::on_allocate(MemTag tag, size_t bytes) {
  const size_t i = index_of(tag);
  const auto n = static_cast<int64_t>(bytes);
  raise_to(peak_[i], current_[i].fetch_add(n, std::memory_order_relaxed) + n);
  raise_to(total_peak_, total_.fetch_add(n, std::memory_order_relaxed) + n);
  live_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryTracker::on_free(MemTag tag, size_t bytes) {
  const auto n = static_cast<int64_t>(bytes);
  current_[index_of(tag)].fetch_sub(n, std::memory_order_relaxed);
  total_.fetch_sub(n, std::memory_order_relaxed);
  live_.fetch_sub(1, std::memory_order_relaxed);
}

void MemoryTracker::on_retag(MemTag from, MemTag to, size_t bytes) {
  const auto n = static_cast<int64_t>(bytes);
  const size_t j = index_of(to);
  raise_to(peak_[j], current_[j].fetch_add(n, std::memory_order_relaxed) + n);
  current_[index_of(from)].fetch_sub(n, std::memory_order_relaxed);
}

MemoryStats MemoryTracker::stats() const {
  MemoryStats s;
  for (size_t i = 0; i < kNumMemTags; ++i) {
    s.current[i] = current_[i].load(std::memory_order_relaxed);
    s.peak[i] = peak_[i].load(std::memory_order_relaxed);
  }
  s.total_current = total_.load(std::memory_order_relaxed);
  s.total_peak = total_peak_.load(std::memory_order_relaxed);
  s.live_allocations = live_.load(std::memory_order_relaxed);
  return s;
}

void MemoryTracker::reset_peak() {
  for (size_t i = 0; i < kNumMemTags; ++i) {
    peak_[i].store(current_[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  total_peak_.store(total_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryTracker& memory_tracker(Device device) {
  static MemoryTracker cpu;
  if (device.is_cpu()) return cpu;
  static std::mutex mutex;
  // Never destroyed: storages freed during static destruction still report here.
  static auto* cuda = new std::map<int, std::unique_ptr<MemoryTracker>>();
  std::lock_guard lock(mutex);
  auto& slot = (*cuda)[device.index];
  if (!slot) slot = std::make_unique<MemoryTracker>();
  return *slot;
}

MemoryStats memory_stats(Device device) { return memory_tracker(device).stats(); }
void reset_peak_memory(Device device) { memory_tracker(device).reset_peak(); }

MemTag current_mem_tag() { return t_current_tag; }
MemTagScope::MemTagScope(MemTag tag) : previous_(t_current_tag) { t_current_tag = tag; }
MemTagScope::~MemTagScope() { t_current_tag = previous_; }

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
#if OCTET_WITH_CUDA
  require_device(device);
  return cuda::detail::device_allocator(device.index);
#else
  OCTET_FAIL("device ", device, " requested but octet was built without CUDA");
#endif
}

}  // namespace octet
