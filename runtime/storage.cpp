// Storage lifetime: allocation, accounting, retagging, release.
#include "runtime/storage.h"

#include <cstring>

#include "runtime/cuda.h"
#include "runtime/error.h"

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

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
#if OCTET_WITH_CUDA
    // cudaMemcpy runs on the legacy default stream of the current device, which waits for that
    // device's octet stream (a blocking stream) and is waited for by it. The GPU end is made
    // current (the destination of a GPU-to-GPU move), so the copy comes after the kernels that
    // wrote the source (or last used the cached destination block) and before later ones.
    const bool gpu_to_gpu = device.is_cuda() && device_.is_cuda();
    cudaError_t status = cudaSuccess;
    {
      cuda::DeviceGuard guard(device.is_cuda() ? device : device_);
      // Another device's legacy stream does not wait for the source device's octet stream.
      if (gpu_to_gpu) {
        status = cudaStreamSynchronize(static_cast<cudaStream_t>(cuda::stream(device_)));
      }
      if (gpu_to_gpu) cuda::detail::count_stream_wait();
      if (device.is_cpu()) cuda::detail::count_device_to_host();
      if (device_.is_cpu()) cuda::detail::count_blocking_upload();  // a move, not in a step
      if (status == cudaSuccess) status = cudaMemcpy(moved, data_, nbytes_, cudaMemcpyDefault);
      // A device-to-device cudaMemcpy may return before the copy ends; the source block goes back
      // to its device's cache below, whose next owner's kernels would not wait for the copy.
      if (status == cudaSuccess && gpu_to_gpu) status = cudaDeviceSynchronize();
    }
    if (status != cudaSuccess) allocator_for(device).deallocate(moved, nbytes_);
    OCTET_CHECK(status == cudaSuccess, "moving ", nbytes_, " bytes from ", device_, " to ", device,
                " failed: ", cudaGetErrorString(status));
#else
    OCTET_FAIL("moving storage from ", device_, " to ", device, " needs a CUDA build");
#endif
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
