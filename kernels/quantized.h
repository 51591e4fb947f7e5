// Operations on quantized tensors of any format (DESIGN.md "FP8 numbers"): dequantize, usage
// changes, in-place requantization, the FP8 GEMM with its three layouts, and the GEMM shape rule.
// Each checks its arguments and hands the format-specific part to the tensor's entry in the
// format table (kernels/quantized_format.h). The formats' own casts live with them:
// kernels/fp8_per_tensor.h (delayed and current scaling), kernels/mxfp8.h.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/ops.h"
#include "runtime/quantized_tensor.h"

namespace octet::ops {

// High precision (f32 or bf16) in the logical shape, from row-wise data when held, else from
// column-wise data (transposed back).
Tensor dequantize(const QuantizedTensor& t, DType dtype);

// Makes `t` hold exactly `usage` (not kNone): drops what is not asked for and creates what is
// missing. How a usage is made is the format's: per-tensor column-wise data is the byte
// transpose of the row-wise data (row-wise cannot be made from column-wise: an error); MXFP8
// quantizes each direction from high precision, so it needs `source` (the f32/bf16 tensor `t`
// was made from, e.g. the master weight). New buffers are allocated under the caller's
// MemTagScope.
void update_usage(QuantizedTensor& t, Usage usage, const Tensor* source = nullptr);

// Requantizes `src` into dst's buffers (its usages, in place) with dst's quantizer: per-tensor
// delayed scaling uses the slot's current scale and, with kRecord, max-accumulates |src| into
// the slot's history[0] in the same pass; current scaling computes a new scale from src; MXFP8
// recomputes every block. Bumps dst's version. Equal, bit for bit, to a fresh quantize of src.
void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax);

// ---- FP8 GEMM ----
// With Y = X·Wᵀ (X (M, K), W (N, K)), the three GEMMs of a linear layer. Every layout computes
// out = A·Bᵀ with A and B read along K, their last dimension:
//   kFprop: Y  (.., N) = X·Wᵀ    a = X  row-wise,    b = W row-wise
//   kDgrad: dX (.., K) = dY·W    a = dY row-wise,    b = W column-wise (stored (K, N) = Wᵀ)
//   kWgrad: dW (N, K)  = dYᵀ·X   a = dY column-wise, b = X column-wise (stored (N, M), (K, M))
enum class GemmLayout : uint8_t { kFprop, kDgrad, kWgrad };
std::string_view gemm_layout_name(GemmLayout layout);  // "fprop", "dgrad", "wgrad"
// The usages a layout reads of its two operands.
Usage gemm_a_usage(GemmLayout layout);
Usage gemm_b_usage(GemmLayout layout);

struct FP8GemmOptions {
  const Tensor* bias = nullptr;             // (cols of out,) f32 or bf16, added to every row
  Accumulate accumulate = Accumulate::kNo;  // kYes adds the product to out's contents
};

// Both operands of one format (per-tensor: e4m3/e5m2 in any mix, on ops::gemm with their
// scale_inv; MXFP8: blocks expanded exactly, then a high-precision GEMM; see each format).
// Accumulation in f32; out f32 or bf16. Operand shapes must satisfy the format's shape rule.
Tensor fp8_gemm(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout,
                DType out_dtype, const FP8GemmOptions& options = {});
void fp8_gemm(const QuantizedTensor& a, const QuantizedTensor& b, GemmLayout layout, Tensor& out,
              const FP8GemmOptions& options = {});

// The shape rule of a format's GEMM operands (per-tensor: prod(leading dims) % 8 == 0 and last
// dim % 16 == 0; MXFP8: both multiples of 32). The check throws an error naming `what`, the
// shape and the rule, so a module can check all its shapes before it starts (or fall back to
// high precision).
bool fp8_gemm_shape_supported(std::string_view format, const Shape& shape);
void check_fp8_gemm_shape(std::string_view format, const Shape& shape, std::string_view what);

}  // namespace octet::ops
