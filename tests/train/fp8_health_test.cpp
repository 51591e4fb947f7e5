// FP8 health found through the modules' FP8 states: the weight forecast counts exactly what the
// next cast saturates and flushes, and slot health names slots by module, direction and index.
#include "train/fp8_health.h"

#include <gtest/gtest.h>

#include <cstring>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "tests/support/test_util.h"

namespace octet::train {
namespace {

TEST(FP8Health, WeightHealthCountsSaturatedAndFlushedValues) {
  // A weight slot scale of 1000 on e4m3: 0.5 -> 500 saturates (max 448); 1e-7 -> 1e-4 is below
  // half the smallest subnormal (2^-10 ~ 9.8e-4) and flushes; 0 is not counted as flushed.
  modules::LinearOptions options;
  options.recipe = Recipe::delayed();
  options.bias = modules::Bias::kNo;
  modules::Linear linear(16, 16, options);
  std::vector<float> w(256, 0.01f);
  w[0] = 0.5f;
  w[1] = -0.6f;
  w[2] = 1e-7f;
  w[3] = 0.f;
  std::memcpy(const_cast<Tensor&>(linear.weight()).data(), w.data(), w.size() * sizeof(float));
  linear.fp8_state()
      .meta()
      ->slot(forward_slot(0, ForwardTensor::kWeight))
      .scale.data_as<float>()[0] = 1000.f;
  const auto health = fp8_weight_health(linear);
  ASSERT_EQ(health.size(), 1u);
  EXPECT_EQ(health[0].name, "weight");
  EXPECT_DOUBLE_EQ(health[0].saturated, 2.0 / 256);
  EXPECT_DOUBLE_EQ(health[0].flushed_to_zero, 1.0 / 256);
}

TEST(FP8Health, SlotsAreNamedByModuleAndCountWhatTheirCastsDid) {
  modules::LayerNormMLPOptions o;
  o.linear.recipe = Recipe::delayed();
  modules::LayerNormMLP mlp(32, 64, o);
  Tensor x = test::random_tensor({16, 32}, DType::kF32, 1);
  {
    modules::FP8Autocast scope(Recipe::delayed());
    autograd::backward(autograd::sum(mlp.forward(x)));
  }
  const std::vector<SlotHealth> slots = fp8_slot_health(mlp);
  ASSERT_EQ(slots.size(), 6u + 4u);  // 2 GEMMs: 3 forward and 2 backward slots each
  EXPECT_EQ(slots[0].name, "forward.0");
  EXPECT_EQ(slots[6].name, "backward.0");
  // fc1's input: the 16 x 32 norm output, cast once (column-wise and row-wise in one pass).
  EXPECT_EQ(slots[0].counts.total, 16 * 32);
  ASSERT_TRUE(slots[0].saturated_fraction.has_value());
  EXPECT_FALSE(slots[2].saturated_fraction.has_value());  // the output slot casts nothing
  // Taking the counts resets them.
  EXPECT_EQ(fp8_slot_health(mlp)[0].counts.total, 0);
  // The weights name their GEMM's slot: fc1 and fc2 are GEMMs 0 and 1.
  const std::vector<WeightHealth> weights = fp8_weight_health(mlp);
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_EQ(weights[0].name, "fc1.weight");
  EXPECT_EQ(weights[1].name, "fc2.weight");
}

}  // namespace
}  // namespace octet::train
