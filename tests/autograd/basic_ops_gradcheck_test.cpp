// Gradient checks of arithmetic, matrix products and shape operations against f64 references.
#include <gtest/gtest.h>

#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/shape.h"
#include "kernels/ops.h"
#include "tests/autograd/gradcheck.h"

namespace octet {
namespace {

using test::Values;

// Random shapes from a fixed seed: rows in [1, 9], cols in [1, 17].
Shape random_shape(uint64_t seed) {
  Generator g(seed);
  return {1 + static_cast<int64_t>(g.next_u32() % 9), 1 + static_cast<int64_t>(g.next_u32() % 17)};
}

Values elementwise(const std::vector<Values>& in, bool row_broadcast,
                   double (*op)(double, double)) {
  const Values& a = in[0];
  const Values& b = in[1];
  Values out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = op(a[i], b[row_broadcast ? i % b.size() : i]);
  return out;
}

TEST(GradCheck, AddSubMulDivSameShapeAndBiasRow) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const Shape shape = random_shape(seed);
    const Tensor a = test::random_tensor(shape, DType::kF32, seed * 10);
    const Tensor b = test::random_tensor(shape, DType::kF32, seed * 10 + 1);
    const Tensor row = test::random_tensor({shape[1]}, DType::kF32, seed * 10 + 2);
    // Division needs denominators away from zero.
    const Tensor b_div = ops::add(ops::mul(b, b), Tensor::full(shape, 0.5f, DType::kF32));
    const Tensor row_div =
        ops::add(ops::mul(row, row), Tensor::full({shape[1]}, 0.5f, DType::kF32));
    for (bool bcast : {false, true}) {
      const Tensor& rhs = bcast ? row : b;
      const Tensor& rhs_div = bcast ? row_div : b_div;
      const std::string tag = bcast ? " (bias row)" : "";
      test::gradcheck(
          "add" + tag, {a, rhs}, [](auto& in) { return autograd::add(in[0], in[1]); },
          [=](auto& in) {
            return elementwise(in, bcast, [](double x, double y) { return x + y; });
          });
      test::gradcheck(
          "sub" + tag, {a, rhs}, [](auto& in) { return autograd::sub(in[0], in[1]); },
          [=](auto& in) {
            return elementwise(in, bcast, [](double x, double y) { return x - y; });
          });
      test::gradcheck(
          "mul" + tag, {a, rhs}, [](auto& in) { return autograd::mul(in[0], in[1]); },
          [=](auto& in) {
            return elementwise(in, bcast, [](double x, double y) { return x * y; });
          });
      test::gradcheck(
          "div" + tag, {a, rhs_div}, [](auto& in) { return autograd::div(in[0], in[1]); },
          [=](auto& in) {
            return elementwise(in, bcast, [](double x, double y) { return x / y; });
          });
    }
  }
}

TEST(GradCheck, ScaleSumMean) {
  const Tensor x = test::random_tensor({5, 7}, DType::kF32, 4);
  test::gradcheck(
      "scale", {x}, [](auto& in) { return autograd::scale(in[0], -1.75f); },
      [](auto& in) {
        Values out = in[0];
        for (double& v : out) v *= -1.75;
        return out;
      });
  test::gradcheck(
      "sum", {x}, [](auto& in) { return autograd::sum(in[0]); },
      [](auto& in) {
        double s = 0;
        for (double v : in[0]) s += v;
        return Values{s};
      });
  test::gradcheck(
      "mean", {x}, [](auto& in) { return autograd::mean(in[0]); },
      [](auto& in) {
        double s = 0;
        for (double v : in[0]) s += v;
        return Values{s / static_cast<double>(in[0].size())};
      });
}

Values matmul_ref(const Values& a, const Values& b, int64_t m, int64_t k, int64_t n, bool b_t) {
  Values out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) {
        s += a[static_cast<size_t>(i * k + l)] *
             (b_t ? b[static_cast<size_t>(j * k + l)] : b[static_cast<size_t>(l * n + j)]);
      }
      out[static_cast<size_t>(i * n + j)] = s;
    }
  }
  return out;
}

TEST(GradCheck, MatmulAndLinearWithAndWithoutBias) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Generator g(seed);
    const int64_t b = 1 + g.next_u32() % 3, m = 1 + g.next_u32() % 6, k = 1 + g.next_u32() % 9,
                  n = 1 + g.next_u32() % 7;
    const Tensor a = test::random_tensor({b, m, k}, DType::kF32, seed + 100);
    const Tensor w = test::random_tensor({k, n}, DType::kF32, seed + 200);
    test::gradcheck(
        "matmul", {a, w}, [](auto& in) { return autograd::matmul(in[0], in[1]); },
        [=](auto& in) { return matmul_ref(in[0], in[1], b * m, k, n, false); });
    const Tensor wl = test::random_tensor({n, k}, DType::kF32, seed + 300);
    const Tensor bias = test::random_tensor({n}, DType::kF32, seed + 400);
    test::gradcheck(
        "linear", {a, wl, bias}, [](auto& in) { return autograd::linear(in[0], in[1], in[2]); },
        [=](auto& in) {
          Values out = matmul_ref(in[0], in[1], b * m, k, n, true);
          for (size_t i = 0; i < out.size(); ++i) out[i] += in[2][i % static_cast<size_t>(n)];
          return out;
        });
    test::gradcheck(
        "linear without bias", {a, wl}, [](auto& in) { return autograd::linear(in[0], in[1]); },
        [=](auto& in) { return matmul_ref(in[0], in[1], b * m, k, n, true); });
  }
}

TEST(GradCheck, ReshapeTransposeSlice) {
  const Tensor x = test::random_tensor({3, 4, 5}, DType::kF32, 7);
  // reshape then multiply by a fixed ramp so that the layout matters to the gradient.
  std::vector<float> ramp(60);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = 0.1f * static_cast<float>(i);
  const Tensor r = Tensor::from_floats(ramp, {6, 10});
  test::gradcheck(
      "reshape", {x},
      [&](auto& in) {
        return autograd::mul(autograd::reshape(in[0], {6, -1}), r);
      },
      [&](auto& in) {
        Values out(60);
        for (size_t i = 0; i < 60; ++i) out[i] = in[0][i] * ramp[i];
        return out;
      });
  test::gradcheck(
      "transpose", {x}, [](auto& in) { return autograd::transpose(in[0]); },
      [](auto& in) {
        Values out(60);
        for (size_t b = 0; b < 3; ++b) {
          for (size_t i = 0; i < 4; ++i) {
            for (size_t j = 0; j < 5; ++j) out[b * 20 + j * 4 + i] = in[0][b * 20 + i * 5 + j];
          }
        }
        return out;
      });
  test::gradcheck(
      "slice", {x}, [](auto& in) { return autograd::slice(in[0], 1, 3); },
      [](auto& in) { return Values(in[0].begin() + 20, in[0].end()); });
}

}  // namespace
}  // namespace octet
