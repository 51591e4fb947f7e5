// Optimizer kernels against the update rules written out in f64.
#include "kernels/optim.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/ops.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

TEST(OptimKernels, AdamWMatchesTheRuleOverThreeSteps) {
  Tensor w = test::random_tensor({37, 29}, DType::kF32, 1);
  Tensor m = Tensor::zeros(w.shape(), DType::kF32), v = Tensor::zeros(w.shape(), DType::kF32);
  std::vector<double> rw = test::to_doubles(w), rm(rw.size(), 0.0), rv(rw.size(), 0.0);
  ops::AdamWHyper h;
  h.lr = 0.01f;
  h.beta1 = 0.8f;
  h.beta2 = 0.95f;
  h.eps = 1e-6f;
  h.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 3; ++step) {
    const DType gd = step == 2 ? DType::kBF16 : DType::kF32;  // bf16 gradients convert exactly
    const Tensor g = test::random_tensor(w.shape(), gd, 10 + static_cast<uint64_t>(step));
    const std::vector<double> gv = test::to_doubles(g);
    h.step = step;
    ops::adamw_step(w, g, m, v, h);
    for (size_t i = 0; i < rw.size(); ++i) {
      rw[i] *= 1 - 0.01 * 0.1;
      rm[i] = 0.8 * rm[i] + 0.2 * gv[i];
      rv[i] = 0.95 * rv[i] + 0.05 * gv[i] * gv[i];
      const double mh = rm[i] / (1 - std::pow(0.8, step)), vh = rv[i] / (1 - std::pow(0.95, step));
      rw[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-6);
    }
  }
  EXPECT_TRUE(test::all_close(w.to_floats(), rw, {1e-6, 1e-5}));
  EXPECT_TRUE(test::all_close(m.to_floats(), rm, {1e-6, 1e-5}));
  EXPECT_TRUE(test::all_close(v.to_floats(), rv, {1e-7, 1e-5}));
}

TEST(OptimKernels, SgdMomentumMatchesTheRule) {
  Tensor w = test::random_tensor({100}, DType::kF32, 2);
  Tensor buf = Tensor::zeros({100}, DType::kF32);
  std::vector<double> rw = test::to_doubles(w), rb(100, 0.0);
  for (int64_t step = 1; step <= 3; ++step) {
    const Tensor g = test::random_tensor({100}, DType::kF32, 20 + static_cast<uint64_t>(step));
    const std::vector<double> gv = test::to_doubles(g);
    ops::sgd_step(w, g, buf, 0.1f, 0.9f, 0.01f, step);
    for (size_t i = 0; i < 100; ++i) {
      const double gi = gv[i] + 0.01 * rw[i];
      rb[i] = step == 1 ? gi : 0.9 * rb[i] + gi;
      rw[i] -= 0.1 * rb[i];
    }
  }
  EXPECT_TRUE(test::all_close(w.to_floats(), rw, {1e-6, 1e-5}));
  Tensor none;
  Tensor w2 = Tensor::full({4}, 1.f, DType::kF32);
  ops::sgd_step(w2, Tensor::full({4}, 2.f, DType::kF32), none, 0.5f, 0.f, 0.f, 1);
  EXPECT_EQ(w2.to_floats(), std::vector<float>(4, 0.f));  // 1 - 0.5 * 2
}

TEST(OptimKernels, SumOfSquaresAndErrors) {
  const Tensor x = test::random_tensor({1000}, DType::kF32, 3);
  double want = 0;
  for (double v : test::to_doubles(x)) want += v * v;
  EXPECT_NEAR(ops::sum_of_squares(x), want, 1e-9 * want);
  Tensor w = Tensor::zeros({3}, DType::kF32), m = Tensor::zeros({3}, DType::kF32);
  Tensor v = Tensor::zeros({4}, DType::kF32);
  EXPECT_THROW(ops::adamw_step(w, w, m, v, {}), Error);
}

}  // namespace
}  // namespace octet
