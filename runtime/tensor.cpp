// Tensor construction, views and host read-back.
#include "runtime/tensor.h"

#include <cstring>
#include <ostream>

#include "runtime/cuda.h"

namespace octet {
namespace {

// Host bytes are copied here; anything that touches a GPU is runtime/cuda.h's.
void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t n) {
  if (n == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
  cuda::copy_bytes(dst_device, dst, src_device, src, n);
}

void check_shape(const Shape& shape) {
  for (int64_t d : shape) {
    OCTET_CHECK(d >= 0, "shape ", shape_str(shape), " has a negative dimension");
  }
}

}  // namespace

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), dtype_(dtype) {}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(Storage::allocate(bytes, device), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;  // no storage to clear: memset of its null pointer is UB
  if (device.is_cpu()) {
    std::memset(t.data(), 0, t.nbytes());
  } else {
    cuda::zero_async(device, t.data(), t.nbytes());  // on the stream: no host buffer, no wait
  }
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, DType dtype, Device device) {
  if (device.is_cpu()) {
    return from_floats(std::vector<float>(static_cast<size_t>(shape_numel(shape)), value), shape,
                       dtype);
  }
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;
  // One element uploaded, then doubled in place on the device.
  const Tensor one = from_floats({value}, {1}, dtype);
  copy_bytes(device, t.data(), Device::cpu(), one.data(), one.nbytes());
  cuda::replicate_async(device, t.data(), one.nbytes(), t.nbytes());
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype) {
  OCTET_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
              "from_floats: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) store_from_f32(dtype, t.data(), i, values[i]);
  return t;
}

Tensor Tensor::from_bytes(const void* bytes, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (t.nbytes() > 0) std::memcpy(t.data(), bytes, t.nbytes());
  return t;
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  const int64_t i = d < 0 ? d + n : d;
  OCTET_CHECK(i >= 0 && i < n, "dimension ", d, " out of range for shape ", shape_str(shape_));
  return shape_[static_cast<size_t>(i)];
}

Device Tensor::device() const {
  OCTET_CHECK(defined(), "device() of an undefined tensor");
  return storage_->device();
}

int64_t Tensor::rows() const { return dim() ? shape_numel({shape_.begin(), shape_.end() - 1}) : 1; }
int64_t Tensor::cols() const { return dim() == 0 ? 1 : shape_.back(); }

void* Tensor::data() {
  OCTET_CHECK(defined(), "data() of an undefined tensor");
  return static_cast<uint8_t*>(storage_->data()) + offset_;
}

const void* Tensor::data() const {
  OCTET_CHECK(defined(), "data() of an undefined tensor");
  return static_cast<const uint8_t*>(storage_->data()) + offset_;
}

void Tensor::check_element_type(size_t size) const {
  OCTET_CHECK(size == element_size(), "typed access with a ", size, "-byte type to a ", dtype_,
              " tensor (", element_size(), "-byte elements)");
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape resolved = shape;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      OCTET_CHECK(inferred < 0, "reshape to ", shape_str(shape), ": only one -1 is allowed");
      inferred = static_cast<int>(i);
    } else {
      OCTET_CHECK(resolved[i] >= 0, "reshape to ", shape_str(shape), ": negative dimension");
      known *= resolved[i];
    }
  }
  if (inferred >= 0) {
    OCTET_CHECK(known != 0 && numel() % known == 0, "reshape of ", shape_str(shape_), " to ",
                shape_str(shape), ": ", numel(), " elements do not divide");
    resolved[static_cast<size_t>(inferred)] = numel() / known;
  }
  OCTET_CHECK(shape_numel(resolved) == numel(), "reshape of ", shape_str(shape_), " (", numel(),
              " elements) to ", shape_str(shape), " (", shape_numel(resolved), " elements)");
  return Tensor(storage_, offset_, std::move(resolved), dtype_);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  OCTET_CHECK(dim() >= 1, "slice of a 0-d tensor");
  OCTET_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ", end,
              ") out of range for dimension 0 of shape ", shape_str(shape_));
  Shape shape = shape_;
  shape[0] = end - begin;
  const size_t row_bytes =
      static_cast<size_t>(shape_numel(shape_) / std::max<int64_t>(shape_[0], 1)) * element_size();
  return Tensor(storage_, offset_ + static_cast<size_t>(begin) * row_bytes, std::move(shape),
                dtype_);
}

Tensor Tensor::clone() const { return to(device()); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  copy_bytes(device, t.data(), this->device(), data(), nbytes());
  return t;
}

void Tensor::move_storage_to(Device device) const {
  OCTET_CHECK(defined(), "move_storage_to of an undefined tensor");
  require_device(device);
  storage_->move_to(device);
}

void Tensor::copy_bytes_from(const Tensor& src) {
  OCTET_CHECK(defined() && src.defined(), "copy_bytes_from: undefined tensor");
  OCTET_CHECK(src.dtype() == dtype_ && src.numel() == numel(), "copy_bytes_from: ", src,
              " does not match ", *this, " in dtype and element count");
  copy_bytes(device(), data(), src.device(), src.data(), nbytes());
  bump_version();
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> values(static_cast<size_t>(numel()));
  if (device().is_cpu()) {
    for (size_t i = 0; i < values.size(); ++i) values[i] = load_as_f32(dtype_, data(), i);
    return values;
  }
  std::vector<uint8_t> host(nbytes());
  copy_bytes(Device::cpu(), host.data(), device(), data(), host.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = load_as_f32(dtype_, host.data(), i);
  return values;
}

float Tensor::item() const {
  OCTET_CHECK(numel() == 1, "item() needs a one-element tensor, got shape ", shape_str(shape_));
  return to_floats()[0];
}

uint64_t Tensor::version() const {
  OCTET_CHECK(defined(), "version() of an undefined tensor");
  return storage_->version();
}

void Tensor::bump_version() const {
  OCTET_CHECK(defined(), "bump_version() of an undefined tensor");
  storage_->bump_version();
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  if (!tensor.defined()) return out << "Tensor(undefined)";
  return out << tensor.dtype() << shape_str(tensor.shape()) << "@" << tensor.device();
}

}  // namespace octet
