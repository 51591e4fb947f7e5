// Storage lifetime: allocation, accounting, retagging, release.
#include "runtime/storage.h"

#include <cstring>

#include "runtime/cuda.h"
#include "runtime/error.h"

namespace octet {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device, MemTag tag) {
  void* data = allocator_for(device).allocate(nbytes);
  memory_tracker(device).on_allocate(tag, nbytes);
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, tag));
}

Storage::Storage(void* data, size_t nbytes, Device device, MemTag tag)
    : data_(data), nbytes_(nbytes), device_(device), tag_(tag) {}

Storage::~Storage() {
  allocator_for(device_).deallocate(data_, nbytes_);
  memory_tracker(device_).on_free(tag_, nbytes_);
}

void Storage::set_tag(MemTag tag) {
  if (tag == tag_) return;
  memory_tracker(device_).on_retag(tag_, tag, nbytes_);
  tag_ = tag;
}

void Storage::move_to(Device device) {
  if (device == device_) return;
  void* moved = allocator_for(device).allocate(nbytes_);
  if (nbytes_ > 0 && device.is_cpu() && device_.is_cpu()) {
    std::memcpy(moved, data_, nbytes_);
  } else if (nbytes_ > 0) {
    try {
      cuda::move_bytes(device, moved, device_, data_, nbytes_);
    } catch (...) {
      allocator_for(device).deallocate(moved, nbytes_);
      throw;
    }
  }
  memory_tracker(device).on_allocate(tag_, nbytes_);
  allocator_for(device_).deallocate(data_, nbytes_);
  memory_tracker(device_).on_free(tag_, nbytes_);
  data_ = moved;
  device_ = device;
}

void Storage::hold_for_backward() {
  if (holds_++ > 0) return;
  retagged_by_hold_ = tag_ == MemTag::kActivations || tag_ == MemTag::kOther;
  if (retagged_by_hold_) {
    tag_before_hold_ = tag_;
    set_tag(MemTag::kSaved);
  }
}

void Storage::release_from_backward() {
  OCTET_ASSERT(holds_ > 0, "release_from_backward without a hold");
  if (--holds_ > 0 || !retagged_by_hold_) return;
  retagged_by_hold_ = false;
  if (tag_ == MemTag::kSaved) set_tag(tag_before_hold_);
}

}  // namespace octet
