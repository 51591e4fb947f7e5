// A buffer from a device allocator, accounted under a memory tag, with the version counter
// that save-for-backward uses to detect in-place changes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/device.h"
#include "runtime/memory.h"

namespace octet {

class Storage {
 public:
  // Allocates `nbytes` on `device`, counted under `tag`.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device,
                                           MemTag tag = current_mem_tag());
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemTag tag() const { return tag_; }
  // Moves this storage's bytes to another tag (e.g. an activation that becomes saved state).
  void set_tag(MemTag tag);

  // Moves the bytes to `device` in place (new buffer, copy, old buffer freed; same tag, same
  // version): every tensor sharing this storage follows. Module::to moves parameters, FP8 data
  // and metas this way, so quantizers and saved handles that share them need no rewiring.
  void move_to(Device device);

  // Save-for-backward holds. While at least one context holds this storage, bytes that were
  // counted as computed data (kActivations or kOther) are counted as kSaved; parameters and other
  // owned tags keep theirs. The last release puts the original tag back.
  void hold_for_backward();
  void release_from_backward();
  int backward_holds() const { return holds_; }

  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void bump_version() { version_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  Storage(void* data, size_t nbytes, Device device, MemTag tag);

  void* data_;
  size_t nbytes_;
  Device device_;
  MemTag tag_;
  std::atomic<uint64_t> version_{0};
  int holds_ = 0;
  MemTag tag_before_hold_ = MemTag::kOther;
  bool retagged_by_hold_ = false;
};

}  // namespace octet
