// CPU MXFP8 kernels behind kernels/quantized.h. Arguments are already validated.
#pragma once

#include "runtime/tensor.h"

namespace octet::cpu {

// x (rows, cols) f32/bf16 -> data (rows, cols) and scales (rows, ceil(cols / 32)).
void quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales, FP8CastCounts* counts);
// x (rows, cols) f32/bf16 -> data (cols, rows) and scales (cols, ceil(rows / 32)).
void quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                               FP8CastCounts* counts);
// data (R, C) with scales (R, ceil(C / 32)) -> out (R, C) f32 or bf16.
void dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out);

}  // namespace octet::cpu
