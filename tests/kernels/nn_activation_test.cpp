// Activations and gated activations, forward and backward, against f64 formulas written out here
// (GELU with std::tanh, SiLU with std::exp): random inputs, odd shapes, extreme values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernels/nn.h"
#include "kernels/ops.h"
#include "tests/kernels/nn_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::Activation;

struct Reference {
  Activation act;
  std::function<double(double)> f;
  std::function<double(double)> df;
};

const double kC = std::sqrt(2.0 / M_PI);

std::vector<Reference> references() {
  return {
      {Activation::kGelu,
       [](double x) { return 0.5 * x * (1 + std::tanh(kC * (x + 0.044715 * x * x * x))); },
       [](double x) {
         const double t = std::tanh(kC * (x + 0.044715 * x * x * x));
         return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kC * (1 + 3 * 0.044715 * x * x);
       }},
      {Activation::kRelu, [](double x) { return x > 0 ? x : 0.0; },
       [](double x) { return x > 0 ? 1.0 : 0.0; }},
      {Activation::kSquaredRelu, [](double x) { return x > 0 ? x * x : 0.0; },
       [](double x) { return x > 0 ? 2 * x : 0.0; }},
      {Activation::kSilu, [](double x) { return x / (1 + std::exp(-x)); },
       [](double x) {
         const double s = 1 / (1 + std::exp(-x));
         return s * (1 + x * (1 - s));
       }},
  };
}

// f32 rounding of a few operations on O(1) values, plus cancellation in the derivatives (GELU's
// terms cancel near its minimum at x = -0.75): an absolute floor of a few f32 ulps.
constexpr test::Tolerance kTol{4e-6, 4e-6};

TEST(Activation, ForwardAndBackwardMatchF64) {
  const Tensor x = test::random_tensor({7, 13, 37}, DType::kF32, 101, 3.f);
  const Tensor dy = test::random_tensor({7, 13, 37}, DType::kF32, 102);
  const std::vector<double> xv = test::to_doubles(x), dyv = test::to_doubles(dy);
  for (const Reference& r : references()) {
    std::vector<double> y(xv.size()), dx(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      y[i] = r.f(xv[i]);
      dx[i] = dyv[i] * r.df(xv[i]);
    }
    const Tensor got_y = ops::activation(r.act, x);
    const Tensor got_dx = ops::activation_backward(r.act, dy, x);
    EXPECT_EQ(got_y.shape(), x.shape());
    EXPECT_TRUE(test::all_close(got_y.to_floats(), y, kTol)) << ops::activation_name(r.act);
    EXPECT_TRUE(test::all_close(got_dx.to_floats(), dx, kTol)) << ops::activation_name(r.act);
  }
}

TEST(Activation, ExtremeInputsStayFiniteAndCorrect) {
  const std::vector<float> xs = {-1e4f, -100.f, -30.f, -9.f, -0.75f, -1e-8f, 0.f,
                                 1e-8f, 0.5f,   9.f,   30.f, 100.f,  1e4f};
  const Tensor x = Tensor::from_floats(xs, {static_cast<int64_t>(xs.size())});
  const Tensor dy = Tensor::full(x.shape(), 1.f, DType::kF32);
  for (const Reference& r : references()) {
    if (r.act == Activation::kSquaredRelu) continue;  // 1e4^2 is fine, but nothing extreme to test
    std::vector<double> y, dx;
    for (const float v : xs) {
      y.push_back(r.f(v));
      dx.push_back(r.df(v));
    }
    const Tensor got_y = ops::activation(r.act, x), got_dx = ops::activation_backward(r.act, dy, x);
    EXPECT_TRUE(test::all_finite(got_y)) << ops::activation_name(r.act);
    EXPECT_TRUE(test::all_finite(got_dx)) << ops::activation_name(r.act);
    EXPECT_TRUE(test::all_close(got_y.to_floats(), y, kTol)) << ops::activation_name(r.act);
    EXPECT_TRUE(test::all_close(got_dx.to_floats(), dx, kTol)) << ops::activation_name(r.act);
  }
}

// A bf16 activation stays bf16: the f32 result of its values, rounded once (every op and dtype on
// every device: tests/devices/activation_dtype_test.cpp).
TEST(Activation, Bf16InputGivesTheF32ResultOfItsValuesRoundedToBf16) {
  const Tensor xb = test::random_tensor({5, 33}, DType::kBF16, 103);
  const Tensor xf = ops::cast(xb, DType::kF32);
  for (const Reference& r : references()) {
    const Tensor from_bf16 = ops::activation(r.act, xb);
    EXPECT_EQ(from_bf16.dtype(), DType::kBF16);
    EXPECT_TRUE(
        test::bitwise_equal(from_bf16, ops::cast(ops::activation(r.act, xf), DType::kBF16)));
  }
}

TEST(GatedActivation, ForwardAndBackwardMatchF64) {
  const int64_t rows = 15, n = 19;  // x (3, 5, 38): [a | g] halves of 19
  const Tensor x = test::random_tensor({3, 5, 2 * n}, DType::kF32, 104, 2.f);
  const Tensor dy = test::random_tensor({3, 5, n}, DType::kF32, 105);
  const std::vector<double> xv = test::to_doubles(x), dyv = test::to_doubles(dy);
  for (const Reference& r : references()) {
    std::vector<double> y(static_cast<size_t>(rows * n)), dx(xv.size());
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const double a = xv[static_cast<size_t>(i * 2 * n + j)];
        const double g = xv[static_cast<size_t>(i * 2 * n + n + j)];
        const double d = dyv[static_cast<size_t>(i * n + j)];
        y[static_cast<size_t>(i * n + j)] = r.f(a) * g;
        dx[static_cast<size_t>(i * 2 * n + j)] = d * g * r.df(a);
        dx[static_cast<size_t>(i * 2 * n + n + j)] = d * r.f(a);
      }
    }
    const Tensor got_y = ops::gated_activation(r.act, x);
    EXPECT_EQ(got_y.shape(), Shape({3, 5, n}));
    test::recycle_poisoned(x.nbytes());
    const Tensor got_dx = ops::gated_activation_backward(r.act, dy, x);
    EXPECT_EQ(got_dx.shape(), x.shape());
    // The product with g (|g| up to ~8) scales the absolute error.
    EXPECT_TRUE(test::all_close(got_y.to_floats(), y, {2e-5, 4e-6})) << ops::activation_name(r.act);
    EXPECT_TRUE(test::all_close(got_dx.to_floats(), dx, {2e-5, 4e-6}))
        << ops::activation_name(r.act);
  }
}

TEST(GatedActivation, RejectsOddLastDimensionAndWrongGradientShape) {
  const Tensor odd = Tensor::zeros({4, 7}, DType::kF32);
  try {
    ops::gated_activation(Activation::kSilu, odd);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(4, 7)"), std::string::npos) << e.what();
  }
  const Tensor x = Tensor::zeros({4, 8}, DType::kF32);
  EXPECT_THROW(ops::gated_activation_backward(Activation::kGelu, x, x), Error);
  EXPECT_THROW(ops::activation_backward(Activation::kGelu, odd, x), Error);
  EXPECT_THROW(ops::activation(Activation::kRelu, Tensor::zeros({3}, DType::kI32)), Error);
}

}  // namespace
}  // namespace octet
