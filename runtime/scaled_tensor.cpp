// ScaledTensor: per-direction buffers, usage bookkeeping and the save-for-backward hand-over.
#include "runtime/scaled_tensor.h"

namespace octet {

ScaledTensor::ScaledTensor(Shape shape, DType dtype, Usage usage, Ownership ownership,
                           Device device)
    : QuantizedTensor(std::move(shape), dtype, usage, ownership, device) {}

Usage ScaledTensor::held(const Tensor& rowwise, const Tensor& columnwise) {
  return (rowwise.defined() ? Usage::kRowwise : Usage::kNone) |
         (columnwise.defined() ? Usage::kColumnwise : Usage::kNone);
}

size_t ScaledTensor::index_of(Usage direction) {
  OCTET_CHECK(direction == Usage::kRowwise || direction == Usage::kColumnwise,
              "a direction is row-wise or column-wise, got ", usage_name(direction));
  return direction == Usage::kRowwise ? 0 : 1;
}

const Tensor& ScaledTensor::part(Usage direction, Part p) const {
  check_buffers_present("reading the data");
  return buffers_[index_of(direction)][p];
}

size_t ScaledTensor::nbytes(Usage usage) const {
  size_t n = 0;
  for (const Tensor& t : buffers_[index_of(usage)]) n += t.defined() ? t.nbytes() : 0;
  return n;
}

void ScaledTensor::set_direction(Usage direction, Tensor data, Tensor scales, Tensor extra) {
  check_buffers_present("set_direction");
  OCTET_CHECK(data.defined() && scales.defined(), describe(), ": ", usage_name(direction),
              " data and scales must both be given");
  check_direction(direction, data, scales, extra);
  for (const Tensor* t : {&data, &scales, &extra}) {
    OCTET_CHECK(!t->defined() || t->device() == device(), describe(), ": ", usage_name(direction),
                " buffer on ", t->device(), " but the tensor is on ", device());
  }
  buffers_[index_of(direction)] = {std::move(data), std::move(scales), std::move(extra)};
  set_usage(usage() | direction);
  bump_version();
}

void ScaledTensor::drop_usage(Usage drop) {
  check_buffers_present("drop_usage");
  const Usage keep =
      static_cast<Usage>(static_cast<uint8_t>(usage()) & ~static_cast<uint8_t>(drop));
  OCTET_CHECK(keep != Usage::kNone, "dropping ", usage_name(drop), " from ", describe(),
              " would leave no data");
  for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
    if (!has_usage(keep, d)) buffers_[index_of(d)] = {};
  }
  set_usage(keep);
  bump_version();
}

std::vector<Tensor> ScaledTensor::held_buffers() const {
  std::vector<Tensor> out;
  for (const auto& direction : buffers_) out.insert(out.end(), direction.begin(), direction.end());
  return out;
}

std::vector<Tensor> ScaledTensor::take_buffers() {
  begin_take();
  std::vector<Tensor> out;
  for (auto& direction : buffers_) {
    for (Tensor& t : direction) out.push_back(std::exchange(t, Tensor()));
  }
  return out;
}

void ScaledTensor::give_buffers(std::vector<Tensor> buffers) {
  begin_give(buffers.size(), 6);
  for (size_t d = 0; d < 2; ++d) {
    for (size_t p = 0; p < 3; ++p) buffers_[d][p] = std::move(buffers[d * 3 + p]);
  }
  OCTET_ASSERT(held(buffers_[0][kData], buffers_[1][kData]) == usage(), "give_buffers of ",
               describe(), " returned buffers for another usage");
}

}  // namespace octet
