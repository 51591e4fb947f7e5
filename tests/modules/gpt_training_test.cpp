// The training check: a 2-layer GPT (d=64, 4 heads) trained for 300 steps on a fixed
// synthetic task in f32 and under each FP8 recipe learns, and FP8 ends within 10% of f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "autograd/engine.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/optimizer.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/sort_task.h"

namespace octet::modules {
namespace {

constexpr int64_t kSteps = 300, kAveraged = 20;

// Per-step training losses of one run: AdamW, warm-up then cosine, FP8 scope per forward.
std::vector<float> train(const Recipe* recipe) {
  return test::train_sort_task(recipe, LrSchedule{1e-3f, 20, kSteps, 0.1f}, kSteps, Device::cpu());
}

float mean_of(const std::vector<float>& v, bool last) { return test::mean_of(v, last, kAveraged); }

TEST(GPTTraining, LossFallsAndFp8EndsWithinTenPercentOfF32) {
  const std::vector<float> f32 = train(nullptr);
  const float f32_start = mean_of(f32, false), f32_end = mean_of(f32, true);
  std::printf("f32: loss %.4f -> %.4f\n", f32_start, f32_end);
  EXPECT_LT(f32_end, 0.5f * f32_start);
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::current(), Recipe::mxfp8(),
                               Recipe::blockwise(), Recipe::nvfp4(), Recipe::rowwise()}) {
    SCOPED_TRACE(describe(recipe));
    const std::vector<float> fp8 = train(&recipe);
    const float start = mean_of(fp8, false), end = mean_of(fp8, true);
    std::printf("%s: loss %.4f -> %.4f\n", std::string(recipe_kind_name(recipe.kind)).c_str(),
                start, end);
    EXPECT_LT(end, 0.5f * start);
    // FP8 within 10% of f32; NVFP4's 4-bit values (one mantissa bit) within 25%.
    EXPECT_NEAR(end, f32_end, (recipe.kind == RecipeKind::kNVFP4 ? 0.25f : 0.1f) * f32_end);
  }
}

}  // namespace
}  // namespace octet::modules
