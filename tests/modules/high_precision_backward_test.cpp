// FP8HighPrecisionBackward (fp8.high_precision_backward): inside it an FP8 module's forward is
// the FP8 module's, bit for bit, and its backward multiplies dY by the high-precision input and
// weight, bit for bit the high-precision module's gradients where the forward's values do not
// enter them (Linear, LayerNormLinear); the high-precision forward cannot join it; FP8 primary
// weights and a recomputed MLP are refused.
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
// precision), with the backward in high precision when `hp_backward`.
template <typename M>
Step step(M& m, const Tensor& x_value, const Tensor& g, const std::optional<Recipe>& recipe,
          bool hp_backward) {
  Tensor x = x_value.clone();
  autograd::set_requires_grad(x);
  for (Parameter& p : m.parameters()) autograd::zero_grad(*p.tensor);
  Tensor y;
  {
    std::optional<FP8Autocast> scope;
    if (recipe) scope.emplace(*recipe);
    const FP8HighPrecisionBackward high_precision(hp_backward);
    y = m.forward(x);
  }
  autograd::backward(y, g);
  Step s{y.to_floats(), {autograd::grad(x).to_floats()}};
  for (Parameter& p : m.parameters()) s.grads.push_back(autograd::grad(*p.tensor).to_floats());
  return s;
}

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> all = {Recipe::delayed(),   Recipe::current(),
                                          Recipe::blockwise(), Recipe::mxfp8(),
                                          Recipe::nvfp4(),     Recipe::nvfp4_quartet2()};
  return all;
}

// Every gradient of `got` is `want`'s, bit for bit.
void expect_same_grads(const Step& got, const Step& want) {
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    EXPECT_EQ(got.grads[i], want.grads[i]) << "gradient " << i;
  }
}

TEST(HighPrecisionBackward, LinearForwardIsTheRecipesAndBackwardHighPrecision) {
  const Tensor x = test::random_tensor({128, 128}, DType::kF32, 71);
  const Tensor g = test::random_tensor({128, 256}, DType::kF32, 72);
  for (const Recipe& recipe : recipes()) {
    SCOPED_TRACE(describe(recipe));
    LinearOptions o;
    o.seed = 7;
    Linear hp(128, 256, o), fp8(128, 256, o), mixed(128, 256, o);
    const Step want_grads = step(hp, x, g, std::nullopt, false);
    const Step want_y = step(fp8, x, g, recipe, false);
    const Step got = step(mixed, x, g, recipe, true);
    EXPECT_EQ(got.y, want_y.y) << "the forward is the FP8 Linear's";
    EXPECT_NE(got.y, want_grads.y);
    expect_same_grads(got, want_grads);
    EXPECT_NE(got.grads, want_y.grads) << "the FP8 backward casts";
  }
}

TEST(HighPrecisionBackward, LayerNormLinearForwardIsTheRecipesAndBackwardHighPrecision) {
  const Tensor x = test::random_tensor({2, 64, 128}, DType::kF32, 73);
  const Tensor g = test::random_tensor({2, 64, 128}, DType::kF32, 74);
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::nvfp4()}) {
    SCOPED_TRACE(describe(recipe));
    LayerNormLinearOptions o;
    o.linear.seed = 5;
    LayerNormLinear hp(128, 128, o), fp8(128, 128, o), mixed(128, 128, o);
    const Step want_grads = step(hp, x, g, std::nullopt, false);
    const Step want_y = step(fp8, x, g, recipe, false);
    const Step got = step(mixed, x, g, recipe, true);
    EXPECT_EQ(got.y, want_y.y) << "the norm and its cast fused or not, the same FP8 forward";
    expect_same_grads(got, want_grads);
  }
}

TEST(HighPrecisionBackward, LayerNormMlpForwardIsTheRecipesAndRecomputeIsRefused) {
  const Tensor x = test::random_tensor({2, 64, 128}, DType::kF32, 75);
  const Tensor g = test::random_tensor({2, 64, 128}, DType::kF32, 76);
  LayerNormMLPOptions o;
  o.linear.seed = 4;
  LayerNormMLP hp(128, 256, o), fp8(128, 256, o), mixed(128, 256, o);
  const Step high = step(hp, x, g, std::nullopt, false);
  const Step want_y = step(fp8, x, g, Recipe::blockwise(), false);
  const Step got = step(mixed, x, g, Recipe::blockwise(), true);
  EXPECT_EQ(got.y, want_y.y);
  // The gradients flow through the FP8 forward's activations, in high precision: neither run's.
  EXPECT_NE(got.grads, want_y.grads);
  EXPECT_NE(got.grads, high.grads);
  // fc2's bias gradient is dY's column sums in every run.
  EXPECT_EQ(got.grads.back(), high.grads.back());

  o.recompute = Recompute::kYes;
  LayerNormMLP recomputed(128, 256, o);
  const std::string message =
      test::error_of([&] { step(recomputed, x, g, Recipe::blockwise(), true); });
  EXPECT_NE(message.find("fp8.high_precision_backward"), std::string::npos) << message;
  EXPECT_NE(message.find("recompute"), std::string::npos) << message;
}

TEST(HighPrecisionBackward, BothPassesInHighPrecisionAndFp8PrimaryWeightsAreRefused) {
  const Tensor x = test::random_tensor({128, 128}, DType::kF32, 77);
  {
    Linear lin(128, 128);
    const std::string message = test::error_of([&] {
      FP8Autocast scope(Recipe::current());
      const FP8HighPrecisionForward forward;
      const FP8HighPrecisionBackward backward;
      lin.forward(x);
    });
    EXPECT_NE(message.find("fp8.high_precision_backward"), std::string::npos) << message;
    EXPECT_NE(message.find("fp8.high_precision_after"), std::string::npos) << message;
  }
  LinearOptions o;
  o.recipe = Recipe::blockwise();
  o.fp8_primary_weights = FP8PrimaryWeights::kYes;
  Linear lin(128, 128, o);
  const std::string message = test::error_of([&] {
    FP8Autocast scope(Recipe::blockwise());
    const FP8HighPrecisionBackward high_precision;
    lin.forward(x);
  });
  EXPECT_NE(message.find("fp8.high_precision_backward"), std::string::npos) << message;
  EXPECT_NE(message.find("FP8 primary weights"), std::string::npos) << message;
}

}  // namespace
}  // namespace octet::modules
