// QuantizedTensor: metadata, the take/give protocol shared by every quantized format.
#include "runtime/quantized_tensor.h"

#include <sstream>

#include "runtime/named.h"

namespace octet {

Quantizer::BackwardOperands Quantizer::backward_operands(const Tensor&, const QuantizedTensor*,
                                                         const QuantizedTensor*) const {
  OCTET_FAIL("backward_operands: the ", describe(),
             " quantizer does not re-cast a GEMM's operands for its backward");
}

constexpr Named<Usage> kUsages[] = {{Usage::kNone, "none"},
                                    {Usage::kRowwise, "row-wise"},
                                    {Usage::kColumnwise, "column-wise"},
                                    {Usage::kBoth, "row-wise+column-wise"}};
std::string_view usage_name(Usage usage) { return name_in(kUsages, usage); }

QuantizedTensor::QuantizedTensor(Shape shape, DType dtype, Usage usage, Ownership ownership,
                                 Device device)
    : shape_(std::move(shape)),
      dtype_(dtype),
      usage_(usage),
      ownership_(ownership),
      device_(device) {
  OCTET_CHECK(usage_ != Usage::kNone, "a quantized tensor of shape ", shape_str(shape_),
              " must hold row-wise or column-wise data (or both)");
}

int64_t QuantizedTensor::rows() const {
  return shape_.empty() ? 1 : shape_numel(Shape(shape_.begin(), shape_.end() - 1));
}

int64_t QuantizedTensor::cols() const { return shape_.empty() ? 1 : shape_.back(); }

size_t QuantizedTensor::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : held_buffers()) n += t.defined() ? t.nbytes() : 0;
  return n;
}

std::vector<Tensor> QuantizedTensor::held_tensors() const {
  std::vector<Tensor> out;
  for (Tensor& t : held_buffers()) {
    if (t.defined()) out.push_back(std::move(t));
  }
  return out;
}

void QuantizedTensor::move_to(Device device) {
  check_buffers_present("move_to");
  for (const Tensor& t : held_buffers()) {
    if (t.defined()) t.move_storage_to(device);
  }
  device_ = device;
}

std::string QuantizedTensor::describe() const {
  std::ostringstream out;
  out << dtype_ << " " << format() << " " << shape_str(shape_) << " " << usage_name(usage_)
      << (ownership_ == Ownership::kOwned ? " owned" : " internal");
  return out.str();
}

void QuantizedTensor::check_buffers_present(const char* what) const {
  OCTET_CHECK(!taken_, what, " of ", describe(),
              ": its buffers are held by a save-for-backward context (restore it first)");
}

void QuantizedTensor::begin_take() {
  OCTET_CHECK(ownership_ == Ownership::kInternal, "take_buffers of ", describe(),
              ": owned quantized tensors are saved by reference, never emptied");
  OCTET_CHECK(!taken_, "take_buffers of ", describe(), ": buffers already taken");
  taken_ = true;
}

void QuantizedTensor::begin_give(size_t got, size_t want) {
  OCTET_CHECK(ownership_ == Ownership::kInternal, "give_buffers of ", describe(),
              ": owned quantized tensors never hand out their buffers");
  OCTET_CHECK(taken_, "give_buffers of ", describe(), ": its buffers were not taken");
  OCTET_CHECK(got == want, "give_buffers of ", describe(), ": got ", got, " buffers, expected ",
              want, " (exactly what take_buffers returned)");
  taken_ = false;
}

}  // namespace octet
