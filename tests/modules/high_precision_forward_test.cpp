// FP8HighPrecisionForward (fp8.high_precision_after): inside it an FP8 module's forward is the
// high-precision module's, bit for bit, and its backward is the recipe's, bit for bit the
// gradients of a normal FP8 step (the same casts of the same input and weight, made in the
// backward); LayerNormMLP's recompute agrees; FP8 primary weights are refused.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

struct Step {
  std::vector<float> y;
  std::vector<std::vector<float>> grads;  // the input's, then each parameter's
};

// One forward and backward of `m` on x with output gradient g: under `recipe` (none: high
// precision), with the forward in high precision when `hp_forward`.
template <typename M>
Step step(M& m, const Tensor& x_value, const Tensor& g, const std::optional<Recipe>& recipe,
          bool hp_forward) {
  Tensor x = x_value.clone();
  autograd::set_requires_grad(x);
  for (Parameter& p : m.parameters()) autograd::zero_grad(*p.tensor);
  Tensor y;
  {
    std::optional<FP8Autocast> scope;
    if (recipe) scope.emplace(*recipe);
    const FP8HighPrecisionForward high_precision(hp_forward);
    y = m.forward(x);
  }
  autograd::backward(y, g);
  Step s{y.to_floats(), {autograd::grad(x).to_floats()}};
  for (Parameter& p : m.parameters()) s.grads.push_back(autograd::grad(*p.tensor).to_floats());
  return s;
}

TEST(HighPrecisionForward, LinearForwardIsHighPrecisionAndBackwardTheRecipes) {
  const Tensor x = test::random_tensor({128, 128}, DType::kF32, 91);
  const Tensor g = test::random_tensor({128, 256}, DType::kF32, 92);
  for (const Recipe& recipe :
       {Recipe::delayed(), Recipe::current(), Recipe::blockwise(), Recipe::nvfp4_quartet2()}) {
    SCOPED_TRACE(describe(recipe));
    LinearOptions o;
    o.seed = 9;
    Linear hp(128, 256, o), fp8(128, 256, o), mixed(128, 256, o);
    const Step want_y = step(hp, x, g, std::nullopt, false);
    const Step want_grads = step(fp8, x, g, recipe, false);
    const Step got = step(mixed, x, g, recipe, true);
    EXPECT_EQ(got.y, want_y.y) << "the forward is the high-precision Linear's";
    EXPECT_NE(got.y, want_grads.y);
    // dX and dW: the same casts of dY, the weight and the input (the bias's gradient is dY's
    // column sums either way).
    ASSERT_EQ(got.grads.size(), want_grads.grads.size());
    for (size_t i = 0; i < got.grads.size(); ++i) {
      EXPECT_EQ(got.grads[i], want_grads.grads[i]) << "gradient " << i;
    }
  }
}

TEST(HighPrecisionForward, LayerNormMlpWithAndWithoutRecompute) {
  const Tensor x = test::random_tensor({2, 64, 128}, DType::kF32, 93);
  const Tensor g = test::random_tensor({2, 64, 128}, DType::kF32, 94);
  std::vector<Step> runs;
  for (Recompute recompute : {Recompute::kNo, Recompute::kYes}) {
    LayerNormMLPOptions o;
    o.recompute = recompute;
    o.linear.seed = 4;
    LayerNormMLP hp(128, 256, o), mixed(128, 256, o);
    const Step want = step(hp, x, g, std::nullopt, false);
    runs.push_back(step(mixed, x, g, Recipe::blockwise(), true));
    EXPECT_EQ(runs.back().y, want.y) << (recompute == Recompute::kYes ? "recompute" : "");
    EXPECT_NE(runs.back().grads, want.grads) << "the backward casts";
  }
  EXPECT_EQ(runs[0].grads, runs[1].grads) << "recompute gives the same gradients";
}

TEST(HighPrecisionForward, Fp8PrimaryWeightsAreRefused) {
  LinearOptions o;
  o.recipe = Recipe::blockwise();
  o.fp8_primary_weights = FP8PrimaryWeights::kYes;
  Linear lin(128, 128, o);
  const std::string message = test::error_of([&] {
    FP8Autocast scope(Recipe::blockwise());
    const FP8HighPrecisionForward high_precision;
    lin.forward(test::random_tensor({128, 128}, DType::kF32, 95));
  });
  EXPECT_NE(message.find("fp8.high_precision_after"), std::string::npos) << message;
  EXPECT_NE(message.find("FP8 primary weights"), std::string::npos) << message;
}

}  // namespace
}  // namespace octet::modules
