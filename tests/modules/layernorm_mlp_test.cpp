// LayerNormMLP and LayerNormLinear: numerics against the composition of the autograd primitives
// (each gradient-checked against f64) and the fused norm + FP8 cast's counts. Recompute and the
// memory behaviours with byte counts run on every device: tests/devices/module_memory_test.cpp.
#include "modules/layernorm_mlp.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/nn.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using ops::Activation;
using test::Tolerance;

using test::run_mlp;
using Result = test::MLPResult;

// The same block from primitives: layer_norm -> linear -> activation -> linear.
Result reference(const LayerNormMLP& m, const Tensor& x_in, const Tensor& g, Activation act,
                 bool gated) {
  Tensor x = x_in.clone();
  autograd::set_requires_grad(x);
  Tensor gamma = m.norm().gamma.clone(), beta = m.norm().beta.clone();
  Tensor w1 = m.fc1_weight().hp.clone(), b1 = m.fc1_bias().clone();
  Tensor w2 = m.fc2_weight().hp.clone(), b2 = m.fc2_bias().clone();
  for (Tensor* t : {&gamma, &beta, &w1, &b1, &w2, &b2}) autograd::set_requires_grad(*t);
  Tensor h = autograd::layer_norm(x, gamma, beta, 1e-5f);
  h = autograd::linear(h, w1, b1);
  h = gated ? autograd::gated_activation(act, h) : autograd::activation(act, h);
  Tensor y = autograd::linear(h, w2, b2);
  autograd::backward(y, g);
  return {y.to_floats(), autograd::grad(x).to_floats(), autograd::grad(gamma).to_floats(),
          autograd::grad(w1).to_floats(), autograd::grad(w2).to_floats()};
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void expect_close(const Result& got, const Result& want, Tolerance tol, const std::string& what) {
  EXPECT_TRUE(test::all_close(got.y, as_double(want.y), tol)) << what << " y";
  EXPECT_TRUE(test::all_close(got.dx, as_double(want.dx), tol)) << what << " dx";
  EXPECT_TRUE(test::all_close(got.dgamma, as_double(want.dgamma), tol)) << what << " dgamma";
  EXPECT_TRUE(test::all_close(got.dw1, as_double(want.dw1), tol)) << what << " dw1";
  EXPECT_TRUE(test::all_close(got.dw2, as_double(want.dw2), tol)) << what << " dw2";
}

TEST(LayerNormMLP, HighPrecisionEqualsPrimitivesForEveryActivation) {
  const struct {
    MLPActivation a;
    Activation act;
    bool gated;
  } cases[] = {{MLPActivation::kGelu, Activation::kGelu, false},
               {MLPActivation::kRelu, Activation::kRelu, false},
               {MLPActivation::kSquaredRelu, Activation::kSquaredRelu, false},
               {MLPActivation::kSilu, Activation::kSilu, false},
               {MLPActivation::kSwiglu, Activation::kSilu, true},
               {MLPActivation::kGeglu, Activation::kGelu, true},
               {MLPActivation::kReglu, Activation::kRelu, true}};
  for (const auto& c : cases) {
    LayerNormMLPOptions o;
    o.activation = c.a;
    o.linear.init_std = 0.2f;
    LayerNormMLP m(32, 48, o);
    const Tensor x = test::random_tensor({2, 8, 32}, DType::kF32, 1);
    const Tensor g = test::random_tensor({2, 8, 32}, DType::kF32, 2);
    expect_close(run_mlp(m, x, g, nullptr), reference(m, x, g, c.act, c.gated), {1e-5, 1e-4},
                 ops::activation_name(c.act));
  }
}

TEST(LayerNormMLP, Fp8RecipesStayWithinTeToleranceOfHighPrecision) {
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::current(), Recipe::mxfp8(),
                               Recipe::blockwise(), Recipe::nvfp4(), Recipe::rowwise()}) {
    SCOPED_TRACE(describe(recipe));
    LayerNormMLP m(64, 128, {});
    const Tensor x = test::random_tensor({32, 64}, DType::kF32, 5);
    const Tensor g = test::random_tensor({32, 64}, DType::kF32, 6);
    const Result hp = run_mlp(m, x, g, nullptr);
    Result q;
    for (int step = 0; step < 2; ++step) q = run_mlp(m, x, g, &recipe);
    EXPECT_TRUE(test::all_close(q.y, as_double(hp.y), test::recipe_tolerance(recipe)));
    EXPECT_TRUE(test::all_close(q.dx, as_double(hp.dx), test::recipe_tolerance(recipe)));
  }
}

TEST(LayerNormLinear, HighPrecisionEqualsPrimitivesAndReturnsTheNormOutput) {
  LayerNormLinearOptions o;
  o.return_norm_output = ReturnNormOutput::kYes;
  LayerNormLinear m(32, 48, o);
  Tensor x = test::random_tensor({16, 32}, DType::kF32, 15);
  autograd::set_requires_grad(x);
  auto [y, ln] = m.forward_with_norm_output(x);
  const Tensor g = test::random_tensor({16, 48}, DType::kF32, 16);
  autograd::backward({y, ln}, {g, Tensor::full({16, 32}, 0.5f, DType::kF32)});
  Tensor x2 = x.clone(), gamma = m.norm().gamma.clone(), beta = m.norm().beta.clone();
  Tensor w = m.weight().hp.clone(), b = m.bias().clone();
  for (Tensor* t : {&x2, &gamma, &beta, &w, &b}) autograd::set_requires_grad(*t);
  Tensor ln2 = autograd::layer_norm(x2, gamma, beta, 1e-5f);
  Tensor y2 = autograd::linear(ln2, w, b);
  autograd::backward({y2, ln2}, {g, Tensor::full({16, 32}, 0.5f, DType::kF32)});
  const Tolerance tol{1e-5, 1e-4};
  EXPECT_TRUE(test::all_close(y.to_floats(), test::to_doubles(y2), tol));
  EXPECT_TRUE(test::all_close(ln.to_floats(), test::to_doubles(ln2), tol));
  EXPECT_TRUE(
      test::all_close(autograd::grad(x).to_floats(), test::to_doubles(autograd::grad(x2)), tol));
  EXPECT_TRUE(test::all_close(autograd::grad(m.weight().leaf()).to_floats(),
                              test::to_doubles(autograd::grad(w)), tol));
}

// The fused norm + FP8 cast adds its counts to the slot's when it records amax (a training
// forward), and not when it skips (a recompute or a validation forward): same rule as the
// quantizer's own casts.
TEST(LayerNormFp8, FusedNormCastCountsOnlyWhenItRecordsAmax) {
  FP8State state(1, Recipe::delayed());
  const SlotId in = forward_slot(0, ForwardTensor::kInput);
  state.meta()->slot(in).scale.data_as<float>()[0] = 1000.f;  // |xhat| > 0.448 saturates
  const Tensor x = test::random_tensor({16, 32}, DType::kF32, 5);
  const Tensor gamma = Tensor::full({32}, 1.f, DType::kF32);
  const Tensor beta = Tensor::zeros({32}, DType::kF32);
  const NormSpec norm{gamma, beta, ops::NormKind::kLayerNorm, 1e-5f, ops::ZeroCenteredGamma::kNo};
  ops::NormForward stats;
  norm_operand(x, norm, state.quantizer(in), Usage::kBoth, AmaxRecording::kSkip, stats);
  FP8CastCounts c = state.meta()->take_cast_counts(in);
  EXPECT_EQ(c.total, 0);
  norm_operand(x, norm, state.quantizer(in), Usage::kBoth, AmaxRecording::kRecord, stats);
  c = state.meta()->take_cast_counts(in);
  EXPECT_EQ(c.total, 16 * 32);
  EXPECT_GT(c.saturated, 0);
  EXPECT_LT(c.saturated, c.total);
}

}  // namespace
}  // namespace octet::modules
