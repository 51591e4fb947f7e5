// The common base of the block-scaled formats (MXFP8, blockwise FP8, NVFP4): each usage is an
// independent pair of buffers, its data and its block scales (plus, for NVFP4, the direction's
// tensor amax), quantized from high precision on its own and made or dropped on its own.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "runtime/quantized_tensor.h"

namespace octet {

class ScaledTensor : public QuantizedTensor {
 public:
  // Undefined when that usage is not held; throws while a context holds the buffers.
  const Tensor& rowwise_data() const override { return part(Usage::kRowwise, kData); }
  const Tensor& rowwise_scales() const { return part(Usage::kRowwise, kScales); }
  const Tensor& columnwise_data() const { return part(Usage::kColumnwise, kData); }
  const Tensor& columnwise_scales() const { return part(Usage::kColumnwise, kScales); }
  // The direction's extra buffer (NVFP4: its f32 tensor amax); undefined for other formats.
  const Tensor& rowwise_extra() const { return part(Usage::kRowwise, kExtra); }
  const Tensor& columnwise_extra() const { return part(Usage::kColumnwise, kExtra); }
  // The same buffers of a direction (kRowwise or kColumnwise) named by its Usage.
  const Tensor& direction_data(Usage direction) const { return part(direction, kData); }
  const Tensor& direction_scales(Usage direction) const { return part(direction, kScales); }
  const Tensor& direction_extra(Usage direction) const { return part(direction, kExtra); }

  using QuantizedTensor::nbytes;
  size_t nbytes(Usage usage) const override;
  void drop_usage(Usage usage) override;

  // Adds a direction (kRowwise or kColumnwise): its data, scales and (for formats that have it)
  // extra buffer, checked against the format's shapes; bumps the version.
  void set_direction(Usage direction, Tensor data, Tensor scales, Tensor extra = Tensor());

  // Saveable (internal tensors only): every buffer of both directions, undefined entries for
  // usages not held.
  std::vector<Tensor> take_buffers() override;
  void give_buffers(std::vector<Tensor> buffers) override;

 protected:
  ScaledTensor(Shape shape, DType dtype, Usage usage, Ownership ownership, Device device);
  // The format's checks for one direction's buffers (shapes, dtypes, device).
  virtual void check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                               const Tensor& extra) const = 0;
  std::vector<Tensor> held_buffers() const override;

  // The usage held by a constructor's arguments.
  static Usage held(const Tensor& rowwise, const Tensor& columnwise);

 private:
  enum Part { kData = 0, kScales = 1, kExtra = 2 };
  static size_t index_of(Usage direction);
  const Tensor& part(Usage direction, Part p) const;

  std::array<std::array<Tensor, 3>, 2> buffers_;  // [row-wise, column-wise][data, scales, extra]
};

}  // namespace octet
