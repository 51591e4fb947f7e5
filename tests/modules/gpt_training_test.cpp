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

namespace octet::modules {
namespace {

constexpr int64_t kBatch = 16, kDigits = 8, kSeq = 2 * kDigits;  // 256 token rows: MXFP8-ready
constexpr int64_t kSeparator = 10, kSteps = 300, kAveraged = 20;

struct Batch {
  Tensor ids, targets;  // (kBatch, kSeq) i32
};

// Sorting: ids = 8 random digits, the separator, the first 7 sorted digits; the targets are the 8
// sorted digits at the separator and after it (-100 on the unsorted half). Fixed per step.
Batch sort_batch(int64_t step) {
  Batch b{Tensor::empty({kBatch, kSeq}, DType::kI32), Tensor::empty({kBatch, kSeq}, DType::kI32)};
  Generator gen(1000 + static_cast<uint64_t>(step));
  auto* ids = b.ids.data_as<int32_t>();
  auto* targets = b.targets.data_as<int32_t>();
  for (int64_t r = 0; r < kBatch; ++r) {
    int32_t digits[kDigits];
    for (int32_t& d : digits) d = static_cast<int32_t>(gen.next_u32() % 10);
    int32_t* row = ids + r * kSeq;
    int32_t* target = targets + r * kSeq;
    std::copy(digits, digits + kDigits, row);
    std::sort(digits, digits + kDigits);
    row[kDigits] = kSeparator;
    std::copy(digits, digits + kDigits - 1, row + kDigits + 1);
    std::fill(target, target + kDigits, -100);
    std::copy(digits, digits + kDigits, target + kDigits);
  }
  return b;
}

// Per-step training losses of one run: AdamW, warm-up then cosine, FP8 scope per forward.
std::vector<float> train(const Recipe* recipe) {
  GPTConfig c;
  c.vocab_size = 16;
  c.max_seq_len = kSeq;
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.seed = 6;
  GPT gpt(c);
  OptimizerOptions o;
  o.weight_decay = 0.01f;
  Optimizer opt(gpt.parameters(), o);
  const LrSchedule lr{1e-3f, 20, kSteps, 0.1f};
  std::vector<float> losses;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Batch b = sort_batch(step);
    Tensor loss = test::with_fp8(recipe, [&] { return gpt.loss(b.ids, b.targets); });
    losses.push_back(loss.item());
    autograd::backward(loss);
    clip_grad_norm(opt.parameters(), 1.0);
    opt.step(lr.at(step));
    opt.zero_grad();
  }
  return losses;
}

// Mean of the first or last kAveraged steps: one batch's loss is noisy.
float mean_of(const std::vector<float>& v, bool last) {
  const auto begin = last ? v.end() - kAveraged : v.begin();
  return std::accumulate(begin, begin + kAveraged, 0.f) / static_cast<float>(kAveraged);
}

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
