// Tensor construction, views and host read-back.
#include "runtime/tensor.h"

#include <cstring>
#include <ostream>

#include "runtime/cuda.h"

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace octet {
namespace {

void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t n) {
  if (n == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
#if OCTET_WITH_CUDA
  // The legacy default stream of the GPU end's device orders the copy with that device's octet
  // stream (runtime/cuda.h). GPU-to-GPU copies wait for the source device's stream first.
  const Device gpu = dst_device.is_cuda() ? dst_device : src_device;
  if (src_device.is_cpu()) {  // an upload: staged, in order on the stream, the host goes on
    cuda::upload_async(dst_device, dst, src, n);
    return;
  }
  cuda::DeviceGuard guard(gpu);
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device) {
    cuda::synchronize(src_device);
  }
  if (dst_device.is_cpu()) cuda::detail::count_device_to_host();
  const cudaError_t status = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
  OCTET_CHECK(status == cudaSuccess, "cudaMemcpy of ", n, " bytes from ", src_device, " to ",
              dst_device, " failed: ", cudaGetErrorString(status));
  // The stream is drained now: a bad id a kernel found before this copy is raised here.
  if (dst_device.is_cpu()) cuda::check_device_errors(src_device);
#else
  OCTET_FAIL("copy between ", src_device, " and ", dst_device, " needs a CUDA build");
#endif
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
#if OCTET_WITH_CUDA
    // On the stream, with no host buffer and no wait.
    cuda::DeviceGuard guard(device);
    const cudaError_t status =
        cudaMemsetAsync(t.data(), 0, t.nbytes(), static_cast<cudaStream_t>(cuda::stream(device)));
    OCTET_CHECK(status == cudaSuccess, "cudaMemsetAsync of ", t.nbytes(), " bytes on ", device,
                " failed: ", cudaGetErrorString(status));
#else
    OCTET_FAIL("zeros on ", device, " needs a CUDA build");
#endif
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
#if OCTET_WITH_CUDA
  // One element uploaded, then doubled in place by device-to-device copies on the stream (a
  // handful of copies, no host buffer of the tensor's size and no wait).
  const Tensor one = from_floats({value}, {1}, dtype);
  const size_t element = one.nbytes(), total = t.nbytes();
  auto* base = static_cast<uint8_t*>(t.data());
  copy_bytes(device, base, Device::cpu(), one.data(), element);
  cuda::DeviceGuard guard(device);
  const auto stream = static_cast<cudaStream_t>(cuda::stream(device));
  for (size_t have = element; have < total; have *= 2) {
    const size_t n = have < total - have ? have : total - have;
    const cudaError_t status =
        cudaMemcpyAsync(base + have, base, n, cudaMemcpyDeviceToDevice, stream);
    OCTET_CHECK(status == cudaSuccess, "full: cudaMemcpyAsync on ", device,
                " failed: ", cudaGetErrorString(status));
  }
#else
  OCTET_FAIL("full on ", device, " needs a CUDA build");
#endif
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
