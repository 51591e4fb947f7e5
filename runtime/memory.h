// Byte accounting per device and per tag (current and peak): the instrument behind every
// memory promise octet makes. Counts are the exact requested sizes of live storages.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/device.h"

namespace octet {

enum class MemTag : uint8_t {
  kWeights,
  kGrads,
  kOptimizer,
  kActivations,
  kSaved,
  kWorkspace,
  kOther
};
inline constexpr size_t kNumMemTags = 7;
std::string_view mem_tag_name(MemTag tag);  // "weights", "grads", ..., "other"

// A snapshot of one device's counters.
struct MemoryStats {
  std::array<int64_t, kNumMemTags> current{};  // live bytes per tag
  std::array<int64_t, kNumMemTags> peak{};     // highest live bytes per tag since the last reset
  int64_t total_current = 0;
  int64_t total_peak = 0;  // highest sum over tags (not the sum of per-tag peaks)
  int64_t live_allocations = 0;

  int64_t current_of(MemTag tag) const { return current[static_cast<size_t>(tag)]; }
  int64_t peak_of(MemTag tag) const { return peak[static_cast<size_t>(tag)]; }
};

// Counters of one device. Thread-safe; allocation and free paths use relaxed atomics plus a
// compare-exchange for the peaks.
class MemoryTracker {
 public:
  void on_allocate(MemTag tag, size_t bytes);
  void on_free(MemTag tag, size_t bytes);
  void on_retag(MemTag from, MemTag to, size_t bytes);  // bytes change tag, total unchanged
  MemoryStats stats() const;
  void reset_peak();  // every peak becomes the current value

 private:
  std::array<std::atomic<int64_t>, kNumMemTags> current_{};
  std::array<std::atomic<int64_t>, kNumMemTags> peak_{};
  std::atomic<int64_t> total_{0};
  std::atomic<int64_t> total_peak_{0};
  std::atomic<int64_t> live_{0};
};

MemoryTracker& memory_tracker(Device device);
MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory(Device device = Device::cpu());

// The tag that new storages get on this thread: `MemTagScope saved(MemTag::kSaved);`.
// Scopes nest; the default outside any scope is kOther.
MemTag current_mem_tag();

class MemTagScope {
 public:
  explicit MemTagScope(MemTag tag);
  ~MemTagScope();
  MemTagScope(const MemTagScope&) = delete;
  MemTagScope& operator=(const MemTagScope&) = delete;

 private:
  MemTag previous_;
};

// Raw device memory. Storage is the only caller; it does the accounting.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
};

// The allocator for `device` (CPU: 64-byte aligned host memory; CUDA: device memory).
Allocator& allocator_for(Device device);

inline constexpr size_t kCpuAlignment = 64;

}  // namespace octet
