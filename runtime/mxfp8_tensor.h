// MXFP8Tensor: FP8 data with one E8M0 exponent per block of 32 values (DESIGN.md "FP8 numbers").
// Each direction is quantized from high precision; neither can be made from the other.
#pragma once

#include <vector>

#include "runtime/quantized_tensor.h"

namespace octet {

inline constexpr int64_t kMXFP8BlockSize = 32;

// Exponents of `rows` x `cols` data blocked along its last dimension: (rows, ceil(cols / 32)).
Shape mxfp8_scale_shape(int64_t rows, int64_t cols);

class MXFP8Tensor final : public QuantizedTensor {
 public:
  // Row-wise: `data` in the logical shape with e8m0 exponents (rows, ceil(cols / 32)), blocks of
  // 32 along the last dim. Column-wise: data laid out transposed, (cols, rows), with exponents
  // (cols, ceil(rows / 32)): blocks of 32 consecutive logical rows, i.e. exactly the row-wise
  // MXFP8 form of the transpose. Either pair may be undefined, not both.
  MXFP8Tensor(Shape shape, Tensor rowwise, Tensor rowwise_scales, Tensor columnwise,
              Tensor columnwise_scales, Ownership ownership);

  std::string_view format() const override { return kMXFP8Format; }
  using QuantizedTensor::nbytes;
  size_t nbytes(Usage usage) const override;
  std::vector<std::pair<std::string, Tensor>> rowwise_state() const override;

  // Undefined when that usage is not held; throws while a context holds the buffers.
  const Tensor& rowwise_data() const override;
  const Tensor& rowwise_scales() const;     // (rows, ceil(cols / 32)) e8m0
  const Tensor& columnwise_data() const;    // (cols, rows)
  const Tensor& columnwise_scales() const;  // (cols, ceil(rows / 32)) e8m0

  // For the kernels that create usages from high precision (ops::update_usage).
  void set_rowwise(Tensor data, Tensor scales);
  void set_columnwise(Tensor data, Tensor scales);
  void drop_usage(Usage usage) override;

  // Saveable (internal tensors only): {row-wise data, row-wise exponents, column-wise data,
  // column-wise exponents}, undefined entries for usages not held.
  std::vector<Tensor> take_buffers() override;
  void give_buffers(std::vector<Tensor> buffers) override;

 private:
  std::vector<Tensor> held_buffers() const override {
    return {rowwise_, rowwise_scales_, columnwise_, columnwise_scales_};
  }

  Tensor rowwise_;
  Tensor rowwise_scales_;
  Tensor columnwise_;
  Tensor columnwise_scales_;
};

}  // namespace octet
