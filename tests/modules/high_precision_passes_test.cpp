// The high-precision passes of an FP8 module. FP8HighPrecisionForward (fp8.high_precision_after):
// the forward is the high-precision module's, bit for bit, and the backward the recipe's, bit for
// bit the gradients of a normal FP8 step (the same casts of the same input and weight, made in the
// backward); LayerNormMLP's recompute agrees. FP8HighPrecisionBackward
// (fp8.high_precision_backward): the forward is the FP8 module's, bit for bit, and the backward
// multiplies dY by the high-precision input and weight, bit for bit the high-precision module's
// gradients where the forward's values do not enter them (Linear, LayerNormLinear). The two
// together, FP8 primary weights, and a recomputed MLP under the backward pass are refused.

#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::HighPrecisionPass;
using test::step_with_pass;
using Step = test::PassStep;

// Every gradient of `got` is `want`'s, bit for bit.
void expect_same_grads(const Step& got, const Step& want) {
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    EXPECT_EQ(got.grads[i], want.grads[i]) << "gradient " << i;
  }
}

TEST(HighPrecisionPasses, LinearTakesEachPassFromTheHighPrecisionOrTheFp8Linear) {
  const Tensor x = test::random_tensor({128, 128}, DType::kF32, 91);
  const Tensor g = test::random_tensor({128, 256}, DType::kF32, 92);
  const std::vector<Recipe> forward_recipes = {Recipe::delayed(), Recipe::current(),
                                               Recipe::blockwise(), Recipe::nvfp4_quartet2()};
  const std::vector<Recipe> backward_recipes = {Recipe::delayed(),   Recipe::current(),
                                                Recipe::blockwise(), Recipe::mxfp8(),
                                                Recipe::nvfp4(),     Recipe::nvfp4_quartet2()};
  for (const HighPrecisionPass pass : {HighPrecisionPass::kForward, HighPrecisionPass::kBackward}) {
    const bool forward = pass == HighPrecisionPass::kForward;
    for (const Recipe& recipe : forward ? forward_recipes : backward_recipes) {
      SCOPED_TRACE(describe(recipe) + (forward ? ", forward" : ", backward"));
      LinearOptions o;
      o.seed = 9;
      Linear hp(128, 256, o), fp8(128, 256, o), mixed(128, 256, o);
      const Step high = step_with_pass(hp, x, g, std::nullopt, HighPrecisionPass::kNone);
      const Step low = step_with_pass(fp8, x, g, recipe, HighPrecisionPass::kNone);
      const Step got = step_with_pass(mixed, x, g, recipe, pass);
      const Step& y_from = forward ? high : low;
      const Step& grads_from = forward ? low : high;
      EXPECT_EQ(got.y, y_from.y);
      EXPECT_NE(got.y, grads_from.y);
      // A high-precision forward's backward makes the FP8 step's casts of dY, the weight and the
      // input; a high-precision backward multiplies the uncast ones (the bias's gradient is dY's
      // column sums either way).
      expect_same_grads(got, grads_from);
      EXPECT_NE(got.grads, y_from.grads);
    }
  }
}

TEST(HighPrecisionPasses, ForwardLayerNormMlpWithAndWithoutRecompute) {
  const Tensor x = test::random_tensor({2, 64, 128}, DType::kF32, 93);
  const Tensor g = test::random_tensor({2, 64, 128}, DType::kF32, 94);
  std::vector<Step> runs;
  for (Recompute recompute : {Recompute::kNo, Recompute::kYes}) {
    LayerNormMLPOptions o;
    o.recompute = recompute;
    o.linear.seed = 4;
    LayerNormMLP hp(128, 256, o), mixed(128, 256, o);
    const Step want = step_with_pass(hp, x, g, std::nullopt, HighPrecisionPass::kNone);
    runs.push_back(step_with_pass(mixed, x, g, Recipe::blockwise(), HighPrecisionPass::kForward));
    EXPECT_EQ(runs.back().y, want.y) << (recompute == Recompute::kYes ? "recompute" : "");
    EXPECT_NE(runs.back().grads, want.grads) << "the backward casts";
  }
  EXPECT_EQ(runs[0].grads, runs[1].grads) << "recompute gives the same gradients";
}

TEST(HighPrecisionPasses, BackwardLayerNormLinearForwardIsTheRecipesAndBackwardHighPrecision) {
  const Tensor x = test::random_tensor({2, 64, 128}, DType::kF32, 73);
  const Tensor g = test::random_tensor({2, 64, 128}, DType::kF32, 74);
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::nvfp4()}) {
    SCOPED_TRACE(describe(recipe));
    LayerNormLinearOptions o;
    o.linear.seed = 5;
    LayerNormLinear hp(128, 128, o), fp8(128, 128, o), mixed(128, 128, o);
    const Step want_grads = step_with_pass(hp, x, g, std::nullopt, HighPrecisionPass::kNone);
    const Step want_y = step_with_pass(fp8, x, g, recipe, HighPrecisionPass::kNone);
    const Step got = step_with_pass(mixed, x, g, recipe, HighPrecisionPass::kBackward);
    EXPECT_EQ(got.y, want_y.y) << "the norm and its cast fused or not, the same FP8 forward";
    expect_same_grads(got, want_grads);
  }
}

TEST(HighPrecisionPasses, BackwardLayerNormMlpForwardIsTheRecipesAndRecomputeIsRefused) {
  const Tensor x = test::random_tensor({2, 64, 128}, DType::kF32, 75);
  const Tensor g = test::random_tensor({2, 64, 128}, DType::kF32, 76);
  LayerNormMLPOptions o;
  o.linear.seed = 4;
  LayerNormMLP hp(128, 256, o), fp8(128, 256, o), mixed(128, 256, o);
  const Step high = step_with_pass(hp, x, g, std::nullopt, HighPrecisionPass::kNone);
  const Step want_y = step_with_pass(fp8, x, g, Recipe::blockwise(), HighPrecisionPass::kNone);
  const Step got = step_with_pass(mixed, x, g, Recipe::blockwise(), HighPrecisionPass::kBackward);
  EXPECT_EQ(got.y, want_y.y);
  // The gradients flow through the FP8 forward's activations, in high precision: neither run's.
  EXPECT_NE(got.grads, want_y.grads);
  EXPECT_NE(got.grads, high.grads);
  // fc2's bias gradient is dY's column sums in every run.
  EXPECT_EQ(got.grads.back(), high.grads.back());

  o.recompute = Recompute::kYes;
  LayerNormMLP recomputed(128, 256, o);
  const std::string message = test::error_of(
      [&] { step_with_pass(recomputed, x, g, Recipe::blockwise(), HighPrecisionPass::kBackward); });
  EXPECT_NE(message.find("fp8.high_precision_backward"), std::string::npos) << message;
  EXPECT_NE(message.find("recompute"), std::string::npos) << message;
}

TEST(HighPrecisionPasses, BothPassesTogetherAndFp8PrimaryWeightsAreRefused) {
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
  for (const bool forward : {true, false}) {
    const std::string message = test::error_of([&] {
      FP8Autocast scope(Recipe::blockwise());
      const FP8HighPrecisionForward high_forward(forward);
      const FP8HighPrecisionBackward high_backward(!forward);
      lin.forward(x);
    });
    const char* key = forward ? "fp8.high_precision_after" : "fp8.high_precision_backward";
    EXPECT_NE(message.find(key), std::string::npos) << message;
    EXPECT_NE(message.find("FP8 primary weights"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace octet::modules
