// CPU implementations behind kernels/ops.h. Arguments are already validated by ops.cpp.
#pragma once

#include "kernels/ops.h"

namespace octet::cpu {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv };

// out = a (op) b; b has a's shape or is a row of a's last dimension.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void axpy(Tensor& dst, const Tensor& src, float alpha);  // dst += alpha * src
void scale(const Tensor& x, float s, Tensor& out);
void fill(Tensor& dst, float value);
void convert(const Tensor& src, Tensor& dst);  // floating dtypes except FP8 (RNE)

float sum(const Tensor& x);
float max(const Tensor& x);
float amax(const Tensor& x);
void sum_rows(const Tensor& x, Tensor& out);

void quantize_fp8(const Tensor& x, float scale, Tensor* rowwise, Tensor* columnwise, float* amax,
                  FP8CastCounts* counts);
void transpose_2d(const Tensor& x, Tensor& out);
void dequantize_fp8(const Tensor& data, float scale_inv, Tensor& out);

// out = epilogue(alpha * op(a) · op(b) [+ out] [+ bias]); an FP8 out is cast from the f32 value
// times out_scale, with max |value| max-accumulated into *out_amax when not null.
void gemm(const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb, Tensor& out,
          float alpha, ops::Accumulate accumulate, const Tensor* bias, ops::Epilogue epilogue,
          float out_scale, float* out_amax);
void release_workspace();

// Element pointer of any floating dtype converted to f32 in bulk (FP8 exact, bf16/f16 exact).
void to_f32(DType dtype, const void* src, float* dst, int64_t n);
void from_f32(const float* src, DType dtype, void* dst, int64_t n);

}  // namespace octet::cpu
