// Tests for bugs found in review: each fails on the code before its fix.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
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

// Recompute under FP8 with a retained graph: the second backward recomputes again and needs the
// weight's row-wise data, so the first backward must not drop it. Current scaling keeps no state
// between the passes, so both give the same gradient bit for bit (under delayed scaling the first
// pass's end updates the gradient scales the second uses).
TEST(Regression, RecomputeBackwardTwiceWithRetainedGraph) {
  LayerNormMLPOptions o;
  o.recompute = Recompute::kYes;
  LayerNormMLP m(64, 128, o);
  Tensor x = test::random_tensor({32, 64}, DType::kF32, 2);
  autograd::set_requires_grad(x);
  Tensor y;
  {
    FP8Autocast scope(Recipe::current());
    y = m.forward(x);
  }
  const Tensor loss = autograd::sum(y);
  autograd::backward(loss, Tensor(), autograd::RetainGraph::kYes);
  const std::vector<float> first = autograd::grad(x).to_floats();
  autograd::zero_grad(x);
  autograd::backward(loss);
  EXPECT_EQ(autograd::grad(x).to_floats(), first);
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

namespace octet::modules {
namespace {

// MXFP8 primary weights: built without gradients (row-wise only), then trained: the column-wise
// data is requantized from the f32 master, and the optimizer step requantizes the weight.
TEST(Regression, Mxfp8PrimaryWeightsTrainFromRowwiseOnly) {
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::mxfp8();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  std::unique_ptr<LayerNormMLP> built;
  {
    autograd::NoGradGuard no_grad;  // built for inference: row-wise data only, no f32 copy
    built = std::make_unique<LayerNormMLP>(64, 128, o);
  }
  LayerNormMLP& m = *built;
  ASSERT_FALSE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  Optimizer opt(m.parameters(), {});
  const std::vector<float> before = ops::dequantize(*m.fc1_weight().fp8, DType::kF32).to_floats();
  Tensor x = test::random_tensor({32, 64}, DType::kF32, 5);
  autograd::set_requires_grad(x);
  Tensor y;
  {
    FP8Autocast scope(Recipe::mxfp8());
    y = m.forward(x);
  }
  autograd::backward(autograd::sum(y));
  EXPECT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_TRUE(autograd::grad(x).defined());
  opt.step(1e-2f);
  EXPECT_NE(ops::dequantize(*m.fc1_weight().fp8, DType::kF32).to_floats(), before);
}

}  // namespace
}  // namespace octet::modules
