// Operations on quantized tensors (DESIGN.md "FP8 numbers"): the MXFP8 block cast and its inverse,
// dequantize, usage changes, in-place requantization, and the FP8 GEMM with its three layouts.
// Included by kernels/ops.h; the quantizers that make these tensors are in kernels/quantizer.h.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/ops.h"
#include "runtime/float8_tensor.h"
#include "runtime/fp8_meta.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/quantized_tensor.h"

namespace octet::ops {

// ---- MXFP8 block cast ----
// One direction of the MXFP8 cast of f32/bf16 `x`, viewed as (rows, cols). Per block of 32:
// e = to_e8m0(block_amax / fp8_max) (rounded up to a power of two; NaN ignored in the amax),
// element = fp8(x * 2^(127 - e)). A last partial block covers what is left.
//   kRowwise:    data (x's shape), scales (rows, ceil(cols / 32)), blocks along the last dim;
//   kColumnwise: data (cols, rows), scales (cols, ceil(rows / 32)), blocks of 32 consecutive
//                rows: the row-wise cast of x's transpose.
// data's dtype (e4m3/e5m2) picks the format; scales are e8m0.
void quantize_mxfp8(const Tensor& x, Usage direction, Tensor& data, Tensor& scales);
// data (.., C) with scales (rows, ceil(C / 32)) -> f32 or bf16 of data's shape:
// value = fp8 code value * 2^(e - 127), exact in f32.
Tensor dequantize_mxfp8(const Tensor& data, const Tensor& scales, DType dtype);

// ---- quantized tensors ----
// High precision (f32 or bf16) in the logical shape, from row-wise data when held, else from
// column-wise data (transposed back).
Tensor dequantize(const QuantizedTensor& t, DType dtype);

// Makes `t` hold exactly `usage` (not kNone): drops what is not asked for and creates what is
// missing. Per-tensor: column-wise data is the byte transpose of row-wise data; asking for
// row-wise data when only column-wise data is held is an error (`source` is not used). MXFP8:
// each direction is quantized from high precision, so creating a usage needs `source` (the
// f32/bf16 tensor `t` was made from, e.g. the master weight). New buffers are allocated under
// the caller's MemTagScope.
void update_usage(QuantizedTensor& t, Usage usage, const Tensor* source = nullptr);

// Requantizes `src` into dst's buffers (its usages, in place) with dst's quantizer: per-tensor
// delayed scaling uses the slot's current scale and, with kRecord, max-accumulates |src| into
// the slot's history[0] in the same pass; current scaling computes a new scale from src; MXFP8
// recomputes every block. Bumps dst's version. Equal, bit for bit, to a fresh quantize of src.
void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax);

// ---- delayed scaling ----
// The once-per-step update (FP8Meta::update's rule) of `direction`'s slots of every meta: CPU
// metas slot by slot, the slots of all CUDA metas together in one launch.
void update_fp8_metas(const std::vector<FP8Meta*>& metas, FP8Direction direction);

// ---- FP8 GEMM ----
// With Y = X·Wᵀ (X (M, K), W (N, K)), the three GEMMs of a linear layer. Every layout computes
// out = A·Bᵀ with A and B read along K, their last dimension:
//   kFprop: Y  (.., N) = X·Wᵀ    a = X  row-wise,    b = W row-wise
//   kDgrad: dX (.., K) = dY·W    a = dY row-wise,    b = W column-wise (stored (K, N) = Wᵀ)
//   kWgrad: dW (N, K)  = dYᵀ·X   a = dY column-wise, b = X column-wise (stored (N, M), (K, M))
enum class GemmLayout : uint8_t { kFprop, kDgrad, kWgrad };
std::string_view gemm_layout_name(GemmLayout layout);  // "fprop", "dgrad", "wgrad"

struct FP8GemmOptions {
  const Tensor* bias = nullptr;             // (cols of out,) f32 or bf16, added to every row
  Accumulate accumulate = Accumulate::kNo;  // kYes adds the product to out's contents
};

// Both operands per-tensor (e4m3/e5m2 in any mix; runs on ops::gemm with their scale_inv) or both
// MXFP8 (blocks expanded exactly to f32, then an f32 GEMM). Accumulation in f32; out f32 or bf16.
// Operand shapes must satisfy the FP8 GEMM rule (see check_fp8_gemm_shape).
Tensor fp8_gemm(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout,
                DType out_dtype, const FP8GemmOptions& options = {});
void fp8_gemm(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout, Tensor& out,
              const FP8GemmOptions& options = {});

// The shape rule of FP8 GEMM operands: per-tensor, prod(leading dims) % 8 == 0 and last dim % 16
// == 0; MXFP8, both multiples of 32. The check throws an error naming `what`, the shape and the
// rule, so a module can check all its shapes before it starts (or fall back to high precision).
bool fp8_gemm_shape_supported(ScalingMode mode, const Shape& shape);
void check_fp8_gemm_shape(ScalingMode mode, const Shape& shape, std::string_view what);

}  // namespace octet::ops
