// Operations on tensors: elementwise, reductions, the per-tensor FP8 cast, transpose, GEMM. Each op
// checks its arguments (clear errors that name shapes, dtypes and devices), then runs on the
// device its tensors share through that backend's table (kernels/backend.h: kernels/cpu or
// kernels/cuda). Ops that write into a caller's tensor bump its version. The other families have
// their own headers: kernels/nn.h (the layers' forward and backward), kernels/optim.h (optimizer
// updates), kernels/quantized.h (quantized tensors); octet/octet.h includes them all.
#pragma once

#include <cstdint>

#include "runtime/fp8.h"
#include "runtime/tensor.h"

namespace octet::ops {

// ---- elementwise: same shape, or `b` a row broadcast over `a`'s last dimension ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);
void add_(Tensor& dst, const Tensor& src, float alpha = 1.f);  // dst += alpha * src (same shape)
void scale_(Tensor& dst, float s);
void fill_(Tensor& dst, float value);
// dst (f32/bf16/f16) = value[0], rounded as fill_ rounds; value is (1,) f32 on dst's device, so
// a device's number is broadcast where it lives (a sum's backward: no copy back).
void fill_from_(Tensor& dst, const Tensor& value);
void copy_(Tensor& dst, const Tensor& src);  // same shape; converts f32/bf16/f16 with RNE
// f32/bf16/f16 to f32/bf16/f16 (RNE). FP8 goes through quantize_fp8 / dequantize_fp8.
Tensor cast(const Tensor& x, DType dtype);

// ---- reductions over all elements, as one-element f32 tensors ----
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
Tensor max(const Tensor& x);
Tensor amax(const Tensor& x);  // max |x|, NaN ignored; 0 for an empty tensor
// (rows, cols) -> (cols,): sum over every leading dimension (a bias gradient).
Tensor sum_rows(const Tensor& x);

// ---- FP8 ----
// One pass over f32/bf16 `x` (viewed as rows x cols): q = fp8(x * scale) with the CUDA
// saturating rule, written row-wise into `rowwise` (x's shape) and/or column-wise (the byte
// transpose, shape (cols, rows)) into `columnwise`; max |x| (f32, before scaling, NaN ignored)
// is max-accumulated into amax[0]. `scale` and `amax` are one-element f32 tensors; null
// outputs are skipped. The FP8 dtype is the outputs' dtype. With `counts` (host memory; CPU
// inputs only), the same pass adds how many elements saturated and flushed to zero, and how many
// were cast (see FP8CastCounts); null counts nothing and costs nothing. With `scale_inv` (a
// one-element f32 tensor), the cast also writes scale_inv[0] = 1 / scale[0] rounded to nearest
// (runtime/fp8_scaling.h's scale_inverse), so the FP8 tensor's scale needs no launch of its own.
void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                  Tensor* amax, FP8CastCounts* counts = nullptr, Tensor* scale_inv = nullptr);
// (rows, cols) -> (cols, rows) for any element size (FP8 data, f32, ...).
Tensor transpose_2d(const Tensor& x);
// q * scale_inv into `dtype` (f32 or bf16), same shape as `data`.
Tensor dequantize_fp8(const Tensor& data, const Tensor& scale_inv, DType dtype);

// ---- GEMM: out (M, N) = epilogue(alpha * op(a) · op(b) [+ out] [+ bias]) ----
// On CUDA, cuBLASLt runs it (FP8 operands with their scale_inv read on the device).
// Row-major; op(a) is (M, K): `a` is (M, K) or, transposed, (K, M); op(b) is (K, N): `b` is
// (K, N) or, transposed, (N, K). Leading dimensions of 3-D+ operands fold into rows.
// Operands: both f32, both bf16, or both FP8 (e4m3/e5m2 in any mix) with their scale_inv.
// Accumulation in f32; out is f32 or bf16, or FP8 (e4m3/e5m2) with `out_scale`:
// out = fp8(v * out_scale[0]) with runtime/fp8.h's saturating rule, v the f32 value after the
// bias and the epilogue, and max |v| (before the out_scale multiply, NaN ignored) max-accumulated
// into out_amax[0] when given, as quantize_fp8 does.
enum class Transpose : uint8_t { kNo, kYes };
enum class Accumulate : uint8_t { kNo, kYes };
// FP8 tensor-core accumulation on CUDA (TE's defaults: kFast for the forward GEMM, kSplit, which
// promotes partial sums to f32 at intervals, for dgrad and wgrad). The CPU accumulates in f32
// either way.
enum class FP8Accumulation : uint8_t { kSplit, kFast };
// A pointwise function of the f32 result (after alpha and the bias, before out's rounding):
// kGelu is the tanh GELU of kernels/math/activation.h, the one ops::activation uses.
enum class Epilogue : uint8_t { kNone, kGelu };

struct GemmOptions {
  float alpha = 1.f;
  Accumulate accumulate = Accumulate::kNo;  // kYes adds the product to out's contents
  const Tensor* bias = nullptr;             // (N,) f32 or bf16, added to every row
  const Tensor* a_scale_inv = nullptr;      // one-element f32, required for FP8 `a`
  const Tensor* b_scale_inv = nullptr;      // one-element f32, required for FP8 `b`
  // High-precision operands only: a one-element f32 on the operands' device multiplying alpha
  // (alpha * alpha_scale[0]), read where it lives, so a scale computed on a GPU (NVFP4's tensor
  // scales) reaches the GEMM without a copy back.
  const Tensor* alpha_scale = nullptr;
  FP8Accumulation fp8_accumulation = FP8Accumulation::kSplit;
  Epilogue epilogue = Epilogue::kNone;  // kGelu needs accumulate kNo
  // FP8 out only (and required for it), with accumulate kNo: one-element f32 tensors.
  const Tensor* out_scale = nullptr;
  Tensor* out_amax = nullptr;  // optional
};

void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& out,
          const GemmOptions& options = {});
// Allocates out (M, N) of `out_dtype` (accumulate must be kNo; an FP8 dtype needs out_scale).
Tensor gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, DType out_dtype,
            const GemmOptions& options = {});

// A high-precision GEMM operand as the other operand can meet it: `t` itself when the dtypes
// agree or `t` is f32, else `t` in f32 (bf16/f16 convert exactly), so that a bf16 weight and an
// f32 activation multiply in f32 on the CPU. On CUDA the other way: f32 meets bf16 in bf16, so
// the GEMM runs on tensor cores (the autocast rule).
Tensor gemm_operand_for(const Tensor& t, const Tensor& other);

// Frees the cached GEMM conversion workspace (counted under MemTag::kWorkspace while held).
void release_workspace();

}  // namespace octet::ops
