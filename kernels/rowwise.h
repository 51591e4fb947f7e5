// Row-wise FP8 (torchao's "rowwise" float8 recipe): one f32 scale per row of a GEMM operand,
// along the dimension the GEMM reduces. The format's tensor, its cast and inverse, the quantizer
// and the format's entry in the format table. Scales are power-of-two by default, stored as f32
// scale_inv.
#pragma once

#include <memory>
#include <string>

#include "kernels/ops.h"
#include "kernels/quantized_format.h"
#include "runtime/fp8.h"
#include "runtime/fp8_stats.h"
#include "runtime/quantized_tensor.h"
#include "runtime/scaled_tensor.h"

namespace octet {

namespace ops {
class QuantizedFormat;
}  // namespace ops

inline constexpr std::string_view kRowwiseFormat = "rowwise";

// Row-wise: data (rows, cols) in the logical shape with scale_inv (rows,) f32, one per row (the
// GEMM's K is the last dim). Column-wise: data (cols, rows), the cast of the transpose, with
// scale_inv (cols,). Each direction is quantized from high precision; either may be undefined, not
// both.
class RowwiseFP8Tensor final : public ScaledTensor {
 public:
  RowwiseFP8Tensor(Shape shape, Tensor rowwise, Tensor rowwise_scale_inv, Tensor columnwise,
                   Tensor columnwise_scale_inv, Ownership ownership);

  std::string_view format() const override { return kRowwiseFormat; }
  std::vector<std::pair<std::string, Tensor>> rowwise_state() const override;
  std::vector<std::string> positive_state() const override { return {".scale_inv"}; }

 private:
  void check_direction(Usage direction, const Tensor& data, const Tensor& scales,
                       const Tensor& extra) const override;
};

namespace ops {

// How a row-wise cast scales (runtime/fp8_scaling.h blockwise_scale, one block a row).
struct RowwiseCast {
  float fp8_max = kE4M3Max;  // of the data's dtype
  bool power_2_scale = true;
  float amax_epsilon = 0.f;
};

// x (f32/bf16) viewed as (rows, cols) -> data (rows, cols) e4m3/e5m2 and scale_inv (rows,) f32:
// per row scale = blockwise_scale(row amax, ...), element = fp8(x * scale), scale_inv = 1 / scale.
// Column-wise data is this cast of x's transpose. `counts` (host, nullable) gets what saturated
// and flushed.
void quantize_rowwise(const Tensor& x, const RowwiseCast& cast, Tensor& data, Tensor& scale_inv,
                      FP8CastCounts* counts = nullptr);
// data (rows, cols) with scale_inv (rows,) -> f32/bf16: fp8 value * the row's scale_inv.
Tensor dequantize_rowwise(const Tensor& data, const Tensor& scale_inv, DType dtype);

std::shared_ptr<const QuantizedFormat> make_rowwise_format();

}  // namespace ops

// The quantizer of one tensor role under the rowwise recipe: its dtype (hybrid: e5m2 for
// gradients) and scale rule. No state; with AmaxRecording::kRecord its casts add their saturated
// / flushed counts and scale spread to `stats`.
class RowwiseQuantizer final : public ScaledTensorQuantizer {
 public:
  RowwiseQuantizer(DType dtype, bool power_2_scale, float amax_epsilon,
                   std::shared_ptr<SlotStats> stats = nullptr);

  std::string_view format() const override { return kRowwiseFormat; }
  std::string describe() const override;

 private:
  void cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scale_inv,
            AmaxRecording amax) const override;
  Shape scale_shape(int64_t rows, int64_t) const override { return {rows}; }
  DType scale_dtype() const override { return DType::kF32; }
  std::shared_ptr<ScaledTensor> make_tensor(const Shape& shape, Tensor rowwise,
                                            Tensor rowwise_scale_inv, Tensor columnwise,
                                            Tensor columnwise_scale_inv,
                                            Ownership ownership) const override;

  ops::RowwiseCast cast_;
};

}  // namespace octet
