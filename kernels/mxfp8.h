// MXFP8 (DESIGN.md "FP8 numbers"): one E8M0 exponent per block of 32 values, each direction
// quantized from high precision. The block cast and its inverse, the quantizer, and the format's
// entry in the format table (blocks expanded exactly for the GEMM).
#pragma once

#include <memory>
#include <string>

#include "kernels/quantized_format.h"
#include "runtime/fp8_stats.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/quantized_tensor.h"

namespace octet {
namespace ops {

// One direction of the MXFP8 cast of f32/bf16 `x`, viewed as (rows, cols). Per block of 32:
// e = to_e8m0(block_amax / fp8_max) (rounded up to a power of two; NaN ignored in the amax),
// element = fp8(x * 2^(127 - e)). A last partial block covers what is left.
//   kRowwise:    data (x's shape), scales (rows, ceil(cols / 32)), blocks along the last dim;
//   kColumnwise: data (cols, rows), scales (cols, ceil(rows / 32)), blocks of 32 consecutive
//                rows: the row-wise cast of x's transpose.
// data's dtype (e4m3/e5m2) picks the format; scales are e8m0. With `counts` (host memory; CPU
// only) the elements saturated and flushed to zero are added to it, as in ops::quantize_fp8.
void quantize_mxfp8(const Tensor& x, Usage direction, Tensor& data, Tensor& scales,
                    FP8CastCounts* counts = nullptr);
// data (.., C) with scales (rows, ceil(C / 32)) -> f32 or bf16 of data's shape:
// value = fp8 code value * 2^(e - 127), exact in f32.
Tensor dequantize_mxfp8(const Tensor& data, const Tensor& scales, DType dtype);

}  // namespace ops

// MXFP8: each requested direction is cast from x with one E8M0 exponent per block of 32
// (ops::quantize_mxfp8). No scaling state: AmaxRecording only says whether the cast counts
// towards the slot's health statistics.
class MXFP8Quantizer final : public ScaledTensorQuantizer {
 public:
  // `stats`: where amax-recording casts add their counts and block scales (CPU; null: nowhere).
  explicit MXFP8Quantizer(DType dtype = DType::kE4M3, std::shared_ptr<SlotStats> stats = nullptr);

  std::string_view format() const override { return kMXFP8Format; }
  std::string describe() const override;

 private:
  // One direction's cast, recorded into the slot's statistics when asked.
  void cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scales,
            AmaxRecording amax) const override;
  Shape scale_shape(int64_t rows, int64_t cols) const override {
    return mxfp8_scale_shape(rows, cols);
  }
  DType scale_dtype() const override { return DType::kE8M0; }
  std::shared_ptr<ScaledTensor> make_tensor(const Shape& shape, Tensor rowwise,
                                            Tensor rowwise_scales, Tensor columnwise,
                                            Tensor columnwise_scales,
                                            Ownership ownership) const override;
};

}  // namespace octet
