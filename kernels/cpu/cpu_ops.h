// Helpers shared by the CPU backend's files (kernels/cpu/cpu_backend.h): conversions, the FP8
// block cast and its counts, and the GEMM and FP8 cast with their scalars as host floats.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "runtime/fp8.h"
#include "runtime/parallel.h"

namespace octet::cpu {

using ops::detail::BinaryOp;

// CpuBackend::quantize_fp8 with the scale and amax as host floats (the GEMM's FP8 output too).
void quantize_fp8(const Tensor& x, float scale, Tensor* rowwise, Tensor* columnwise, float* amax,
                  FP8CastCounts* counts);
// Adds the saturated and flushed elements of a block just cast (q = fp8(x * scale), n values,
// max |x| = block_max) to *counts, all but `total`. Shared by every FP8 cast that counts.
void count_fp8_block(const float* x, const uint8_t* q, int64_t n, float scale, float block_max,
                     float fp8_max, FP8CastCounts* counts);
// q = fp8(x * scale) for a block whose max |x| the caller knows, counted into *counts (nullable)
// as count_fp8_block does.
void cast_fp8_block(DType fp8, const float* x, int64_t n, float scale, float block_amax, uint8_t* q,
                    FP8CastCounts* counts);
// max |x| over n values, NaN ignored (a NaN compares false and never wins).
inline float amax_f32(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(x[i]);
    m = v > m ? v : m;
  }
  return m;
}
// The threads' counts (one per parallel_chunk) and the element total added to *counts (nullable).
void add_partial_counts(const std::vector<FP8CastCounts>& partial, int64_t total,
                        FP8CastCounts* counts);

// out = epilogue(alpha * op(a) · op(b) [+ out] [+ bias]); an FP8 out is cast from the f32 value
// times out_scale, with max |value| max-accumulated into *out_amax when not null.
void gemm(const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb, Tensor& out,
          float alpha, ops::Accumulate accumulate, const Tensor* bias, ops::Epilogue epilogue,
          float out_scale, float* out_amax);

// out (rows, cols) of data's shape, f32/bf16 = each FP8 code's value times scale_of(r, c), a row
// at a time: the dequantization of the block-scaled formats.
template <typename ScaleOf>
void dequantize_scaled_fp8(const Tensor& data, Tensor& out, ScaleOf scale_of);

// Element pointer of any floating dtype converted to f32 in bulk (FP8 exact, bf16/f16 exact).
void to_f32(DType dtype, const void* src, float* dst, int64_t n);
void from_f32(const float* src, DType dtype, void* dst, int64_t n);

template <typename ScaleOf>
void dequantize_scaled_fp8(const Tensor& data, Tensor& out, ScaleOf scale_of) {
  const int64_t rows = data.rows(), cols = data.cols();
  const float* table = data.dtype() == DType::kE4M3 ? e4m3_to_float_table() : e5m2_to_float_table();
  const uint8_t* q = data.data_as<uint8_t>();
  auto* po = static_cast<uint8_t*>(out.data());
  const size_t es = out.element_size();
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        row[static_cast<size_t>(c)] = table[q[r * cols + c]] * scale_of(r, c);
      }
      from_f32(row.data(), out.dtype(), po + r * cols * es, cols);
    }
  });
}

}  // namespace octet::cpu
