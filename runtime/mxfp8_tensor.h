// MXFP8Tensor: FP8 data with one E8M0 exponent per block of 32 values (DESIGN.md "FP8 numbers").
// Each direction is quantized from high precision; neither can be made from the other.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/scaled_tensor.h"

namespace octet {

inline constexpr int64_t kMXFP8BlockSize = 32;

// Exponents of `rows` x `cols` data blocked along its last dimension: (rows, ceil(cols / 32)).
Shape mxfp8_scale_shape(int64_t rows, int64_t cols);

class MXFP8Tensor final : public ScaledTensor {
 public:
  // Row-wise: `data` in the logical shape with e8m0 exponents (rows, ceil(cols / 32)), blocks of
  // 32 along the last dim. Column-wise: data laid out transposed, (cols, rows), with exponents
  // (cols, ceil(rows / 32)): blocks of 32 consecutive logical rows, i.e. exactly the row-wise
  // MXFP8 form of the transpose. Either pair may be undefined, not both.
  MXFP8Tensor(Shape shape, Tensor rowwise, Tensor rowwise_scales, Tensor columnwise,
              Tensor columnwise_scales, Ownership ownership);

  std::string_view format() const override { return kMXFP8Format; }
  std::vector<std::pair<std::string, Tensor>> rowwise_state() const override;

  // For the kernels that create usages from high precision (ops::update_usage).
  void set_rowwise(Tensor data, Tensor scales) {
    set_direction(Usage::kRowwise, std::move(data), std::move(scales));
  }
  void set_columnwise(Tensor data, Tensor scales) {
    set_direction(Usage::kColumnwise, std::move(data), std::move(scales));
  }

 private:
  void check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                       const Tensor& extra) const override;
};

}  // namespace octet
