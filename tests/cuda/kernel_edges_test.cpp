// Edge cases of the CUDA kernels found by review that the op table
// (tests/devices/op_table_test.cpp, which has the amax slot's starts and the casts of negative
// NaNs) cannot reach through the public API: norms of empty rows, launched straight into the
// backend, and the grid-stride (row, column) walk that replaced a 64-bit divide per element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"  // norm_forward with an empty last dimension, called directly
#include "kernels/math/grid_index.h"
#include "kernels/math/norm.h"
#include "kernels/nn.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::NormKind;
using ops::ZeroCenteredGamma;
using test::on_cpu;

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
