// FP8 health found through the modules' FP8 states: the weight forecast counts exactly what the
// next cast saturates and flushes, and slot health names slots by module, direction and index.
#include "train/fp8_health.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
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

// The stateless recipes count in the casts too, and report the spread of the scales they chose.
// Input: 32 x 32 ones but for x[0] = 1e-30, which every format flushes under the scale an amax
// of 1 gets (nothing saturates: each scale comes from the amax of what it covers).
TEST(FP8Health, StatelessRecipesCountAndSpreadTheScalesTheirCastsChose) {
  struct Case {
    Recipe recipe;
    int64_t blocks;     // forward.0's scales: one per tensor or per block of the input
    double scale_log2;  // each one's log2 (all equal: every block has amax 1)
  };
  const Case cases[] = {
      {Recipe::current(), 1, std::log2(1.0 / 448)},  // 448 / amax, not a power of two
      {Recipe::mxfp8(), 32, -8.0},                   // per row of 32: 2^ceil(log2(1 / 448))
      {Recipe::blockwise(), 32, -8.0},  // per row's 1x128 block: 1 / 2^floor(log2(448))
      // per 16 values: e4m3(amax / 6 * 2688 / 1) / 2688 = 448 / 2688, times the tensor scale
      {Recipe::nvfp4(), 64, std::log2(1.0 / 6)},
  };
  std::vector<float> x(32 * 32, 1.f);
  x[0] = 1e-30f;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.recipe));
    modules::LinearOptions options;
    options.bias = modules::Bias::kNo;
    options.recipe = c.recipe;
    modules::Linear linear(32, 32, options);
    // A frozen weight and an input without grad: no wgrad, so the input is cast once, row-wise
    // (and the cast records: grad mode is on).
    Tensor w = linear.weight();
    autograd::set_requires_grad(w, false);
    {
      modules::FP8Autocast scope(c.recipe);
      linear.forward(Tensor::from_floats(x, {32, 32}));
    }
    const std::vector<SlotHealth> slots = fp8_slot_health(linear);
    ASSERT_EQ(slots.size(), 3u + 2u);
    const SlotHealth& input = slots[0];
    EXPECT_EQ(input.name, "forward.0");
    EXPECT_FALSE(input.delayed.has_value());
    EXPECT_EQ(input.counts.total, 32 * 32);
    EXPECT_EQ(input.counts.flushed, 1);
    EXPECT_EQ(input.counts.saturated, 0);
    ASSERT_TRUE(input.flushed_fraction.has_value());
    EXPECT_DOUBLE_EQ(*input.flushed_fraction, 1.0 / (32 * 32));
    EXPECT_EQ(input.scales.blocks(), c.blocks);
    // The extremes are exact; the median is its 1/8-octave bucket's lower edge.
    EXPECT_NEAR(input.scales.min_log2(), c.scale_log2, 1e-6);
    EXPECT_NEAR(input.scales.max_log2(), c.scale_log2, 1e-6);
    EXPECT_LE(input.scales.median_log2(), c.scale_log2 + 1e-9);
    EXPECT_GT(input.scales.median_log2(), c.scale_log2 - 1.0 / 8);
    EXPECT_EQ(slots[3].name, "backward.0");
    EXPECT_EQ(slots[3].counts.total, 0);  // no backward ran
    // Taking them resets them.
    EXPECT_EQ(fp8_slot_health(linear)[0].counts.total, 0);
    EXPECT_EQ(fp8_slot_health(linear)[0].scales.blocks(), 0);
  }
}

}  // namespace
}  // namespace octet::train
