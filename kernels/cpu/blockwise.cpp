// Blockwise FP8 on the CPU (TE's Float8BlockScaling): the 1x128 / 128x128 block cast, its inverse,
// and the GEMM that scales each 128-wide K-block's partial product by the two operands' block
// scales before it joins the f32 sum. The scale rule is runtime/fp8_scaling.h's.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
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

void CpuBackend::quantize_blockwise(const Tensor& x, const ops::BlockwiseCast& c, Tensor& data,
                                    Tensor& scale_inv, FP8CastCounts* counts) const {
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

void CpuBackend::quantize_blockwise_both(const Tensor& x, const ops::BlockwiseCast& c,
                                         Tensor& rowwise, Tensor& rowwise_scale_inv,
                                         Tensor& columnwise, Tensor& columnwise_scale_inv,
                                         FP8CastCounts* counts) const {
  // The reference: the row-wise cast of x, then the row-wise cast of its transpose.
  quantize_blockwise(x, c, rowwise, rowwise_scale_inv, counts);
  Tensor xt;
  {
    MemTagScope workspace(MemTag::kWorkspace);
    xt = Tensor::empty({x.cols(), x.rows()}, x.dtype());  // (cols, rows)
  }
  transpose_2d(x, xt);
  quantize_blockwise(xt, c, columnwise, columnwise_scale_inv, counts);
}

void CpuBackend::dequantize_blockwise(const Tensor& data, const Tensor& scale_inv,
                                      BlockScaling blocks, Tensor& out) const {
  const float* s = scale_inv.data_as<float>();
  const ScaleIndex index{blocks, scale_inv.size(1)};
  dequantize_scaled_fp8(data, out,
                        [&](int64_t r, int64_t c) { return s[index.at(r, c / kBlock)]; });
}

void CpuBackend::blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                                const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                                Tensor& out, const Tensor* bias, ops::Accumulate accumulate) const {
  // Each operand expanded to f32 with its block scales, then one f32 GEMM over the whole K. With
  // power-of-two scales (the default) the expansion is exact, and so is every product of two
  // expanded values: the GEMM's f32 accumulation is the only rounding. (Scaling each K-block's
  // partial product instead costs a pass over the output per 128 of K and a GEMM too thin for
  // the CPU's kernels: 3x slower end to end, for a different order of the same f32 sums.)
  MemTagScope workspace(MemTag::kWorkspace);
  Tensor ax = Tensor::empty(a.shape(), DType::kF32), bx = Tensor::empty(b.shape(), DType::kF32);
  dequantize_blockwise(a, a_scale_inv, a_blocks, ax);
  dequantize_blockwise(b, b_scale_inv, b_blocks, bx);
  cpu::gemm(ax, ops::Transpose::kNo, bx, ops::Transpose::kYes, out, 1.f, accumulate, bias,
            ops::Epilogue::kNone, 1.f, nullptr);
}

void CpuBackend::transpose_scales(const Tensor& src, int64_t rows, int64_t cols,
                                  Tensor& dst) const {
  const auto* s = static_cast<const uint8_t*>(src.data());
  auto* d = static_cast<uint8_t*>(dst.data());
  const size_t es = src.element_size();
  std::fill(d, d + dst.nbytes(), uint8_t{0});
  const int64_t ss = src.size(1), ds = dst.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(d + (c * ds + r) * es, s + (r * ss + c) * es, es);
  }
}

}  // namespace octet::cpu
