// Tensor: a cheap shared handle to a contiguous buffer (shape, dtype, device, storage).
// Views that keep contiguity (reshape, leading-dimension slices) share the storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/storage.h"

namespace octet {

namespace autograd {
struct AutogradMeta;  // defined by the autograd layer; runtime only carries the pointer
}

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(4, 768)"

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // New storage, counted under the current MemTagScope's tag. Contents of empty() are unset.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, DType dtype, Device device = Device::cpu());
  // CPU tensor from f32 values, converted to `dtype` (round to nearest even).
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::kF32);
  // CPU tensor wrapping a copy of raw bytes of `dtype`.
  static Tensor from_bytes(const void* bytes, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  // Rows of the 2-D view every kernel uses: prod(leading dims) x last dim.
  int64_t rows() const;
  int64_t cols() const;

  void* data();
  const void* data() const;
  // Typed pointer; checks that T's size matches the dtype's.
  template <typename T>
  T* data_as() {
    check_element_type(sizeof(T));
    return static_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    check_element_type(sizeof(T));
    return static_cast<const T*>(data());
  }

  // Views sharing storage. reshape accepts one -1.
  Tensor reshape(const Shape& shape) const;
  Tensor slice(int64_t begin, int64_t end) const;  // rows [begin, end) of dimension 0
  Tensor flatten_2d() const { return reshape({rows(), cols()}); }

  // Deep copy into new storage (current tag), same device.
  Tensor clone() const;
  // Copy to `device` (new storage; a copy even when already there).
  Tensor to(Device device) const;
  // Moves the storage itself to `device` (runtime/storage.h Storage::move_to): this tensor, its
  // views and every handle sharing the storage now live there.
  void move_storage_to(Device device) const;
  // Overwrites this tensor's bytes with src's (same dtype and element count, any two devices)
  // and bumps the version.
  void copy_bytes_from(const Tensor& src);
  // Host copy of the elements as f32 (CPU only; exact for every dtype but i64 > 2^24).
  std::vector<float> to_floats() const;
  float item() const;  // the one element of a one-element tensor, as f32

  // In-place writes bump the storage's version; save-for-backward compares it.
  uint64_t version() const;
  void bump_version() const;

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t storage_offset() const { return offset_; }  // in bytes
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // Autograd state (requires_grad, grad, grad_fn), shared by copies of this handle and owned by
  // the autograd layer; views made by reshape/slice start without it.
  const std::shared_ptr<autograd::AutogradMeta>& autograd_meta() const { return autograd_; }
  void set_autograd_meta(std::shared_ptr<autograd::AutogradMeta> meta) const {
    autograd_ = std::move(meta);
  }

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype);
  void check_element_type(size_t size) const;

  std::shared_ptr<Storage> storage_;
  // mutable: attaching autograd state to a const handle is not a change of the tensor's value
  mutable std::shared_ptr<autograd::AutogradMeta> autograd_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);  // "f32(4, 768)@cpu"

}  // namespace octet
