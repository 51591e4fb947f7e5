// Tests for bugs found in review: each fails on the code before its fix.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/optimizer.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

// Only the norm output of a LayerNormLinear is used: its backward gets no gradient for y.
TEST(Regression, LayerNormLinearWithOnlyTheNormOutputUsed) {
  LayerNormLinearOptions o;
  o.return_norm_output = ReturnNormOutput::kYes;
  LayerNormLinear m(32, 32, o);
  Tensor x = test::random_tensor({16, 32}, DType::kF32, 1);
  autograd::set_requires_grad(x);
  auto [y, ln] = m.forward_with_norm_output(x);
  autograd::backward(autograd::sum(ln));
  EXPECT_TRUE(autograd::grad(x).defined());
  EXPECT_FALSE(autograd::grad(m.weight().leaf()).defined());  // y did not take part
}

LayerNormMLPOptions fp8_primary(uint64_t seed) {
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::delayed();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  o.linear.seed = seed;
  return o;
}

// Loading FP8 primary weights brings the f32 master the optimizer adopts in line with them.
TEST(Regression, LoadedFp8PrimaryWeightsAreTheOptimizersMaster) {
  LayerNormMLP source(64, 128, fp8_primary(1)), target(64, 128, fp8_primary(2));
  target.load_state_dict(source.state_dict());
  Optimizer opt(target.parameters(), {});
  for (const auto& [name, t] : opt.state_dict()) {
    if (name != "fc1.weight.master") continue;
    const Tensor want = ops::dequantize(*source.fc1_weight().fp8, DType::kF32);
    EXPECT_EQ(t.to_floats(), want.to_floats());
    return;
  }
  FAIL() << "no master for fc1.weight";
}

// FP8 primary weights are tied to the recipe they were made for.
TEST(Regression, Fp8PrimaryWeightsRefuseAnotherRecipe) {
  LayerNormMLP m(64, 128, fp8_primary(3));
  FP8Autocast scope(Recipe::current());
  const std::string e = test::error_of([&] {
    m.forward(test::random_tensor({32, 64}, DType::kF32, 4));
  });
  EXPECT_NE(e.find("FP8 primary weights were made for recipe"), std::string::npos) << e;
}

}  // namespace
}  // namespace octet::modules
