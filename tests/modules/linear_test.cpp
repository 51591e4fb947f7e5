// Linear in high precision and under each FP8 recipe, against independent references.
#include "modules/linear.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::Tolerance;

// f64 y = x·Wᵀ + b and its gradients for cotangent g.
struct Ref {
  std::vector<double> y, dx, dw, db;
  std::vector<double> dw_mag;  // sum_i |g_ij x_il|: the scale of FP8 rounding error in dW
};

// Each FP8 product carries the rounding of both operands (e5m2 gradient: 2^-3, e4m3: 2^-4, and
// current/MXFP8 scales), so a dot product's error is bounded by a fraction of sum |terms|: 0.2
// of it. E2M1 rounds each operand by up to 1/4 and its E4M3 block scale by 1/16 more: 0.6.
::testing::AssertionResult within_fp8_bound(const std::vector<float>& got,
                                            const std::vector<double>& want,
                                            const std::vector<double>& mag, const Recipe& recipe) {
  const Tolerance tol = test::recipe_tolerance(recipe);
  const double share = recipe.kind == RecipeKind::kNVFP4 ? 0.6 : 0.2;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol.abs + share * mag[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want "
                                           << want[i] << ", |terms| " << mag[i];
    }
  }
  return ::testing::AssertionSuccess();
}

Ref reference(const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<double>& b, const std::vector<double>& g, int64_t m, int64_t k,
              int64_t n) {
  Ref r;
  r.y.assign(static_cast<size_t>(m * n), 0);
  r.dx.assign(static_cast<size_t>(m * k), 0);
  r.dw.assign(static_cast<size_t>(n * k), 0);
  r.dw_mag.assign(static_cast<size_t>(n * k), 0);
  r.db.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = b.empty() ? 0 : b[static_cast<size_t>(j)];
      for (int64_t l = 0; l < k; ++l)
        s += x[static_cast<size_t>(i * k + l)] * w[static_cast<size_t>(j * k + l)];
      r.y[static_cast<size_t>(i * n + j)] = s;
      const double gij = g[static_cast<size_t>(i * n + j)];
      r.db[static_cast<size_t>(j)] += gij;
      for (int64_t l = 0; l < k; ++l) {
        r.dx[static_cast<size_t>(i * k + l)] += gij * w[static_cast<size_t>(j * k + l)];
        r.dw[static_cast<size_t>(j * k + l)] += gij * x[static_cast<size_t>(i * k + l)];
        r.dw_mag[static_cast<size_t>(j * k + l)] +=
            std::fabs(gij * x[static_cast<size_t>(i * k + l)]);
      }
    }
  }
  return r;
}

TEST(Linear, HighPrecisionMatchesF64) {
  const int64_t m = 24, k = 32, n = 48;
  Linear lin(k, n, {});
  Tensor x = test::random_tensor({2, 12, k}, DType::kF32, 1);
  autograd::set_requires_grad(x);
  const Tensor g = test::random_tensor({2, 12, n}, DType::kF32, 2);
  Tensor y = lin.forward(x);
  autograd::backward(y, g);
  const Ref r = reference(test::to_doubles(x), test::to_doubles(lin.weight()),
                          test::to_doubles(lin.bias()), test::to_doubles(g), m, k, n);
  const Tolerance tol{1e-5, 1e-4};
  EXPECT_TRUE(test::all_close(y.to_floats(), r.y, tol));
  EXPECT_TRUE(test::all_close(autograd::grad(x).to_floats(), r.dx, tol));
  EXPECT_TRUE(test::all_close(autograd::grad(lin.weight()).to_floats(), r.dw, tol));
  EXPECT_TRUE(test::all_close(autograd::grad(lin.bias()).to_floats(), r.db, tol));
}

TEST(Linear, Fp8RecipesMatchF64WithinTeTolerance) {
  const int64_t m = 32, k = 64, n = 32;
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::current(), Recipe::mxfp8(),
                               Recipe::blockwise(), Recipe::nvfp4(), Recipe::rowwise()}) {
    SCOPED_TRACE(describe(recipe));
    Linear lin(k, n, {});
    // Two steps: delayed scaling's first step runs with scale 1.
    for (int step = 0; step < 2; ++step) {
      Tensor x = test::random_tensor({m, k}, DType::kF32, 10 + static_cast<uint64_t>(step));
      autograd::set_requires_grad(x);
      const Tensor g = test::random_tensor({m, n}, DType::kF32, 20 + static_cast<uint64_t>(step));
      autograd::zero_grad(const_cast<Tensor&>(lin.weight()));
      Tensor y;
      {
        FP8Autocast scope(recipe);
        y = lin.forward(x);
      }
      autograd::backward(y, g);
      const Ref r = reference(test::to_doubles(x), test::to_doubles(lin.weight()),
                              test::to_doubles(lin.bias()), test::to_doubles(g), m, k, n);
      const Tolerance tol = test::recipe_tolerance(recipe);
      EXPECT_TRUE(test::all_close(y.to_floats(), r.y, tol)) << "step " << step;
      EXPECT_TRUE(test::all_close(autograd::grad(x).to_floats(), r.dx, tol)) << "step " << step;
      EXPECT_TRUE(
          within_fp8_bound(autograd::grad(lin.weight()).to_floats(), r.dw, r.dw_mag, recipe))
          << "step " << step;
    }
  }
}

TEST(Linear, Fp8ShapeRuleIsAClearError) {
  Linear lin(24, 16, {});  // in = 24 is not a multiple of 16
  FP8Autocast scope(Recipe::delayed());
  try {
    lin.forward(Tensor::zeros({8, 24}, DType::kF32));
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Linear input"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace octet::modules
