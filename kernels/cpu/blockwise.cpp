// Blockwise FP8 on the CPU (TE's Float8BlockScaling): the 1x128 / 128x128 block cast, its inverse,
// and the GEMM that scales each 128-wide K-block's partial product by the two operands' block
// scales before it joins the f32 sum. The scale rule is runtime/fp8_scaling.h's.
#include <dnnl.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/cpu/block_formats_cpu.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/fp8_scaling.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

constexpr int64_t kBlock = kFP8BlockLen;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest finite value of the input dtype: a block scale that overflows becomes it.
float value_for_inf(DType input) { return input == DType::kBF16 ? from_bf16(0x7F7Fu) : FLT_MAX; }

float amax_of(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));  // fmax ignores NaN
  return m;
}

// Which scale a 1D or 2D operand stored (rows, K) uses for element row r, K-block kb.
struct ScaleIndex {
  BlockScaling blocks;
  int64_t stride;  // the scale tensor's second dimension
  int64_t at(int64_t r, int64_t kb) const {
    return blocks == BlockScaling::k1D ? kb * stride + r : (r / kBlock) * stride + kb;
  }
};

}  // namespace

void quantize_blockwise(const Tensor& x, const ops::BlockwiseCast& c, Tensor& data,
                        Tensor& scale_inv, FP8CastCounts* counts) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t col_blocks = ceil_div(cols, kBlock);
  const float inf_value = value_for_inf(x.dtype());
  const auto* px = static_cast<const uint8_t*>(x.data());
  const size_t es = x.element_size();
  uint8_t* q = data.data_as<uint8_t>();
  float* s = scale_inv.data_as<float>();
  std::fill(s, s + scale_inv.numel(), 0.f);  // the layout's padding stays 0
  const int64_t stride = scale_inv.size(1);
  auto scale_of = [&](float amax) {
    return blockwise_scale(amax, c.fp8_max, c.amax_epsilon, c.power_2_scale, inf_value);
  };
  // 1D: a task is a run of rows; 2D: a band of 128 rows (one row of tiles).
  const int64_t band = c.blocks == BlockScaling::k1D ? 1 : kBlock;
  const int64_t bands = ceil_div(rows, band);
  std::vector<FP8CastCounts> partial(static_cast<size_t>(num_threads()));
  parallel_for(0, bands, 1, [&](int64_t b0, int64_t b1) {
    FP8CastCounts* mine = counts ? &partial[static_cast<size_t>(parallel_chunk())] : nullptr;
    std::vector<float> in(static_cast<size_t>(band * cols));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * band, nr = std::min(band, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        to_f32(x.dtype(), px + (r0 + r) * cols * es, in.data() + r * cols, cols);
      }
      for (int64_t cb = 0; cb < col_blocks; ++cb) {
        const int64_t c0 = cb * kBlock, nc = std::min(kBlock, cols - c0);
        if (c.blocks == BlockScaling::k1D) {
          const float amax = amax_of(in.data() + c0, nc);
          const float scale = scale_of(amax);
          s[cb * stride + r0] = scale_inverse(scale);
          cast_fp8_block(data.dtype(), in.data() + c0, nc, scale, amax, q + r0 * cols + c0, mine);
          continue;
        }
        float amax = 0.f;
        for (int64_t r = 0; r < nr; ++r)
          amax = std::fmax(amax, amax_of(in.data() + r * cols + c0, nc));
        const float scale = scale_of(amax);
        s[b * stride + cb] = scale_inverse(scale);
        for (int64_t r = 0; r < nr; ++r) {
          cast_fp8_block(data.dtype(), in.data() + r * cols + c0, nc, scale, amax,
                         q + (r0 + r) * cols + c0, mine);
        }
      }
    }
  });
  add_partial_counts(partial, rows * cols, counts);
}

void dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                          Tensor& out) {
  const int64_t rows = data.rows(), cols = data.cols();
  const float* table = data.dtype() == DType::kE4M3 ? e4m3_to_float_table() : e5m2_to_float_table();
  const uint8_t* q = data.data_as<uint8_t>();
  const float* s = scale_inv.data_as<float>();
  const ScaleIndex index{blocks, scale_inv.size(1)};
  auto* po = static_cast<uint8_t*>(out.data());
  const size_t es = out.element_size();
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        row[static_cast<size_t>(c)] = table[q[r * cols + c]] * s[index.at(r, c / kBlock)];
      }
      from_f32(row.data(), out.dtype(), po + r * cols * es, cols);
    }
  });
}

void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                    const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks, Tensor& out,
                    const Tensor* bias, ops::Accumulate accumulate) {
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  // Every FP8 value is exact in f32, and so is every product of two: the partial sums are the
  // only roundings inside a K-block, as on the tensor cores.
  std::vector<float> af(static_cast<size_t>(m * k)), bf(static_cast<size_t>(n * k));
  to_f32(a.dtype(), a.data(), af.data(), m * k);
  to_f32(b.dtype(), b.data(), bf.data(), n * k);
  std::vector<float> acc(static_cast<size_t>(m * n), 0.f), partial(static_cast<size_t>(m * n));
  const ScaleIndex ia{a_blocks, a_scale_inv.size(1)}, ib{b_blocks, b_scale_inv.size(1)};
  const float* sa = a_scale_inv.data_as<float>();
  const float* sb = b_scale_inv.data_as<float>();
  // TE's order: the 1D operand's scale multiplies the partial product first, then one fused
  // multiply-add with the other scale joins the f32 accumulator; with two 1D operands, A's first.
  const bool b_first = a_blocks == BlockScaling::k2D && b_blocks == BlockScaling::k1D;
  for (int64_t kb = 0; kb < ceil_div(k, kBlock); ++kb) {
    const int64_t k0 = kb * kBlock, kn = std::min(kBlock, k - k0);
    const dnnl_status_t status = dnnl_sgemm('N', 'T', m, n, kn, 1.f, af.data() + k0, k,
                                            bf.data() + k0, k, 0.f, partial.data(), n);
    OCTET_CHECK(status == dnnl_success, "blockwise_gemm: dnnl_sgemm failed with status ",
                static_cast<int>(status), " for M=", m, " N=", n, " K-block of ", kn);
    parallel_for(0, m, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     const float s_row = sa[ia.at(r, kb)];
                     for (int64_t j = 0; j < n; ++j) {
                       const float s_col = sb[ib.at(j, kb)];
                       const float p = partial[static_cast<size_t>(r * n + j)];
                       float& y = acc[static_cast<size_t>(r * n + j)];
                       y = b_first ? std::fma(p * s_col, s_row, y) : std::fma(p * s_row, s_col, y);
                     }
                   }
                 });
  }
  // The epilogue in f32: bias, then the conversion to out's dtype; accumulation adds to out after
  // the conversion, as cuBLAS does with beta = 1.
  std::vector<float> bias_f;
  if (bias != nullptr) {
    bias_f.resize(static_cast<size_t>(n));
    to_f32(bias->dtype(), bias->data(), bias_f.data(), n);
  }
  std::vector<float> prev;
  if (accumulate == ops::Accumulate::kYes) {
    prev.resize(static_cast<size_t>(m * n));
    to_f32(out.dtype(), out.data(), prev.data(), m * n);
  }
  for (int64_t i = 0; i < m * n; ++i) {
    if (bias != nullptr) acc[static_cast<size_t>(i)] += bias_f[static_cast<size_t>(i % n)];
  }
  if (accumulate == ops::Accumulate::kYes && out.dtype() != DType::kF32) {
    // Rounded to out's dtype first, then added there (bf16 + bf16 in f32, rounded again).
    std::vector<float> rounded(acc.size());
    std::vector<uint16_t> tmp(acc.size());
    from_f32(acc.data(), out.dtype(), tmp.data(), m * n);
    to_f32(out.dtype(), tmp.data(), rounded.data(), m * n);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = rounded[i] + prev[i];
  } else if (accumulate == ops::Accumulate::kYes) {
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += prev[i];
  }
  from_f32(acc.data(), out.dtype(), out.data(), m * n);
}

}  // namespace octet::cpu
