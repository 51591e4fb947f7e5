// Edge cases of the CUDA kernels found by review, each against the CPU: an amax slot
// that starts at -0.0 or below zero, the FP8 casts of negative NaNs, norms of empty rows, and the
// grid-stride (row, column) walk that replaced a 64-bit divide per element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"  // norm_forward with an empty last dimension, called directly
#include "kernels/math/grid_index.h"
#include "kernels/math/norm.h"
#include "kernels/mxfp8.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "runtime/fp8.h"
#include "runtime/mxfp8_tensor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::NormKind;
using ops::ZeroCenteredGamma;
using test::on_cpu;
using test::on_gpu;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// ---- amax ----

TEST(CudaKernelEdges, AmaxRisesFromNegativeZeroAndNegativeStarts) {
  OCTET_REQUIRE_CUDA();
  const Tensor x = test::random_tensor({70, 300}, DType::kF32, 21, 3.f);
  const Tensor scale = test::scalar(2.f);
  // -0.0 is the case the unsigned comparison got wrong (0x80000000 is above every positive
  // float's bits); -1 and a negative NaN (the emulation's 0xFF poison) have the sign bit too.
  for (uint32_t start : {0x80000000u, 0xBF800000u, 0xFFC00000u}) {
    SCOPED_TRACE("amax starts at bits " + std::to_string(start));
    for (bool tile : {false, true}) {  // the row-wise kernel, and the tiled one (column-wise too)
      Tensor row = Tensor::empty(x.shape(), DType::kE4M3);
      Tensor col = Tensor::empty({x.cols(), x.rows()}, DType::kE4M3);
      Tensor amax = test::scalar(from_bits(start));
      ops::quantize_fp8(x, scale, &row, tile ? &col : nullptr, &amax);

      Tensor rg = Tensor::empty(x.shape(), DType::kE4M3, test::gpu());
      Tensor cg = Tensor::empty({x.cols(), x.rows()}, DType::kE4M3, test::gpu());
      Tensor ag = test::scalar(from_bits(start), test::gpu());
      ops::quantize_fp8(on_gpu(x), on_gpu(scale), &rg, tile ? &cg : nullptr, &ag);
      EXPECT_TRUE(test::same_bits(ag, amax)) << (tile ? "tiled" : "row-wise");
      if (start != 0xFFC00000u) {  // a NaN start stays NaN (the next test)
        const float got = on_cpu(ag).item();
        EXPECT_GT(got, 0.f);
        EXPECT_EQ(got, on_cpu(ops::amax(x)).item());
      }
    }
  }
  // The fused norm + cast max-accumulates through the same atomic.
  const Tensor xn = on_gpu(test::random_tensor({40, 96}, DType::kF32, 22));
  const Tensor gamma = on_gpu(test::random_tensor({96}, DType::kF32, 23));
  Tensor row = Tensor::empty({40, 96}, DType::kE4M3, test::gpu());
  Tensor amax = test::scalar(-0.f, test::gpu());
  ops::norm_fp8(NormKind::kRMSNorm, xn, gamma, nullptr, 1e-5f, ZeroCenteredGamma::kNo,
                test::scalar(1.f, test::gpu()), &row, nullptr, &amax);
  const ops::NormForward ref = ops::rmsnorm(xn, gamma, 1e-5f, ZeroCenteredGamma::kNo);
  EXPECT_TRUE(test::same_bits(amax, ops::amax(ref.y))) << "norm_fp8 amax from -0.0";
}

// The merge is the CPU's `m > amax ? m : amax` for every start: a NaN start of either sign
// stays (it compares false), and so does -0.0 when the data are all zeros (0 > -0.0 is false).
// The signed-int atomicMax replaced a negative-NaN start and turned that -0.0 into +0.
TEST(CudaKernelEdges, AmaxMergesLikeTheCpuFromEveryStart) {
  OCTET_REQUIRE_CUDA();
  const std::vector<uint32_t> starts = {0x00000000u, 0x80000000u, 0xBF800000u, 0x7FC00000u,
                                        0xFFC00000u, 0x7F7FFFFFu};  // ..., +NaN, -NaN, FLT_MAX
  const Tensor scale = test::scalar(2.f);
  for (bool zeros : {false, true}) {
    const Tensor x = zeros ? Tensor::zeros({40, 96}, DType::kF32)
                           : test::random_tensor({40, 96}, DType::kF32, 24, 3.f);
    for (uint32_t start : starts) {
      SCOPED_TRACE((zeros ? std::string("zeros, start ") : std::string("random, start ")) +
                   std::to_string(start));
      for (bool tile : {false, true}) {
        Tensor row = Tensor::empty(x.shape(), DType::kE4M3);
        Tensor col = Tensor::empty({x.cols(), x.rows()}, DType::kE4M3);
        Tensor amax = test::scalar(from_bits(start));
        ops::quantize_fp8(x, scale, &row, tile ? &col : nullptr, &amax);
        Tensor rg = Tensor::empty(x.shape(), DType::kE4M3, test::gpu());
        Tensor cg = Tensor::empty({x.cols(), x.rows()}, DType::kE4M3, test::gpu());
        Tensor ag = test::scalar(from_bits(start), test::gpu());
        ops::quantize_fp8(on_gpu(x), on_gpu(scale), &rg, tile ? &cg : nullptr, &ag);
        EXPECT_TRUE(test::same_bits(ag, amax)) << (tile ? "tiled" : "row-wise");
      }
      // The fused norm + cast: its amax against the CPU's merge rule applied to max |y| of the
      // GPU's own unfused norm (the CPU's f32 norm may differ in the last bits).
      const Tensor gamma = on_gpu(test::random_tensor({96}, DType::kF32, 25));
      const Tensor xg = on_gpu(x);
      Tensor row = Tensor::empty({40, 96}, DType::kE4M3, test::gpu());
      Tensor ag = test::scalar(from_bits(start), test::gpu());
      ops::norm_fp8(NormKind::kRMSNorm, xg, gamma, nullptr, 1e-5f, ZeroCenteredGamma::kNo,
                    test::scalar(1.f, test::gpu()), &row, nullptr, &ag);
      const ops::NormForward ref = ops::rmsnorm(xg, gamma, 1e-5f, ZeroCenteredGamma::kNo);
      const float m = on_cpu(ops::amax(ref.y)).item(), s = from_bits(start);
      EXPECT_TRUE(test::same_bits(ag, test::scalar(m > s ? m : s))) << "norm_fp8";
    }
  }
}

// ---- negative NaN ----

// runtime/fp8.h follows CUDA's host conversion: any NaN, whatever its sign, casts to 0x7F. The
// GPU's product x * scale turns a NaN into its canonical 0x7FFFFFFF where x86 keeps the sign, so
// the byte must not depend on the NaN's sign for both backends to agree.
TEST(CudaKernelEdges, NegativeNanCastsToTheCpusByte) {
  OCTET_REQUIRE_CUDA();
  const std::vector<uint32_t> nans = {0xFFC00000u, 0xFF800001u, 0x7FC00000u, 0xFFFFFFFFu};
  for (uint32_t n : nans) {
    EXPECT_EQ(to_e4m3(from_bits(n)), 0x7Fu) << n;
    EXPECT_EQ(to_e5m2(from_bits(n)), 0x7Fu) << n;
  }
  // 64 x 64 (one tile, one MXFP8 block per 32): the NaNs among ordinary values.
  std::vector<float> v = test::random_tensor({64, 64}, DType::kF32, 31).to_floats();
  for (size_t k = 0; k < nans.size(); ++k) v[k * 37 + 5] = from_bits(nans[k]);
  for (DType input : {DType::kF32, DType::kBF16}) {
    const Tensor x = Tensor::from_floats(v, {64, 64}, input);
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      SCOPED_TRACE(std::string(dtype_name(input)) + " -> " + std::string(dtype_name(fp8)));
      const Tensor scale = test::scalar(4.f);
      Tensor row = Tensor::empty({64, 64}, fp8), col = Tensor::empty({64, 64}, fp8);
      ops::quantize_fp8(x, scale, &row, &col, nullptr);
      Tensor rg = Tensor::empty({64, 64}, fp8, test::gpu());
      Tensor cg = Tensor::empty({64, 64}, fp8, test::gpu());
      ops::quantize_fp8(on_gpu(x), on_gpu(scale), &rg, &cg, nullptr);
      EXPECT_TRUE(test::same_bits(rg, row)) << "per-tensor row-wise";
      EXPECT_TRUE(test::same_bits(cg, col)) << "per-tensor column-wise";
      const Tensor back = on_cpu(rg);
      const uint8_t* bytes = back.data_as<uint8_t>();
      for (size_t k = 0; k < nans.size(); ++k) EXPECT_EQ(bytes[k * 37 + 5], 0x7Fu) << k;

      for (Usage direction : {Usage::kRowwise, Usage::kColumnwise}) {
        const Shape scales = mxfp8_scale_shape(64, 64);
        Tensor data = Tensor::empty({64, 64}, fp8), e = Tensor::empty(scales, DType::kE8M0);
        ops::quantize_mxfp8(x, direction, data, e);
        Tensor dg = Tensor::empty({64, 64}, fp8, test::gpu());
        Tensor eg = Tensor::empty(scales, DType::kE8M0, test::gpu());
        ops::quantize_mxfp8(on_gpu(x), direction, dg, eg);
        EXPECT_TRUE(test::same_bits(dg, data)) << "MXFP8 " << usage_name(direction);
        EXPECT_TRUE(test::same_bits(eg, e)) << "MXFP8 exponents " << usage_name(direction);
      }
    }
  }
}

// ---- empty rows ----

#if OCTET_WITH_CUDA
TEST(CudaKernelEdges, NormOfEmptyRowsLaunches) {
  OCTET_REQUIRE_CUDA();
  // (4, 0) straight into the CUDA backend (ops::layernorm refuses an empty last dimension): the
  // statistics kernel used to be launched with 0 threads per block, an invalid configuration.
  // Each row's statistics are then the CPU formulas' values for n = 0.
  const float eps = 1e-5f;
  const Tensor x = Tensor::empty({4, 0}, DType::kF32, test::gpu());
  const Tensor gamma = Tensor::empty({0}, DType::kF32, test::gpu());
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRMSNorm}) {
    const bool layer = kind == NormKind::kLayerNorm;
    SCOPED_TRACE(layer ? "layernorm" : "rmsnorm");
    Tensor y = Tensor::empty({4, 0}, DType::kF32, test::gpu());
    Tensor mean = test::on_gpu(Tensor::full({4}, 7.f, DType::kF32));
    Tensor rsigma = test::on_gpu(Tensor::full({4}, 7.f, DType::kF32));
    ASSERT_NO_THROW(ops::detail::backend_for(test::gpu())
                        .norm_forward(kind, x, gamma, layer ? &gamma : nullptr, eps,
                                      ZeroCenteredGamma::kNo, y, layer ? &mean : nullptr, rsigma));
    const volatile float zero = 0.f;  // 0 / 0 at run time, as the kernels compute it
    const float m0 = zero / zero;
    const float want_rsigma = layer ? math::rsqrt_eps(math::corrected_variance(0.f, 0.f, 0.f), eps)
                                    : math::rsqrt_eps(zero / zero, eps);
    const std::vector<float> rs = on_cpu(rsigma).to_floats();
    for (float v : rs) {
      if (std::isnan(want_rsigma)) {
        EXPECT_TRUE(std::isnan(v)) << v;
      } else {
        EXPECT_EQ(v, want_rsigma);
      }
    }
    if (layer) {
      for (float v : on_cpu(mean).to_floats()) EXPECT_EQ(std::isnan(v), std::isnan(m0 + m0)) << v;
    }
  }
}
#endif  // OCTET_WITH_CUDA

// ---- the grid-stride (row, column) walk ----

TEST(CudaKernelEdges, GridRowColWalksLikeDivideAndModulo) {
  // Host code (the helper is __host__ __device__): the strides the kernels use and odd ones.
  for (int64_t cols : {1, 3, 64, 768, 1000, 3072}) {
    for (int64_t stride : {1, 5, 256, 768, 2000, 10007, 134215680}) {
      for (int64_t first : {0, 7, 255, 999}) {
        math::GridRowCol at = math::GridRowCol::start(first, stride, cols);
        for (int64_t i = first, step = 0; step < 200; i += stride, ++step, at.advance()) {
          ASSERT_EQ(at.row, i / cols) << cols << " " << stride << " " << first << " " << step;
          ASSERT_EQ(at.col, i % cols) << cols << " " << stride << " " << first << " " << step;
        }
      }
    }
  }
}

}  // namespace
}  // namespace octet
