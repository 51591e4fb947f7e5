// FP8 health counted on the GPU: every CUDA cast that records counts what
// saturated and flushed on the device, and the stateless recipes' block-scale spread too
// (runtime/fp8_stats.h, DeviceCastStats), read back only when the counts are taken. For the same
// inputs the counts and the spread must equal the CPU's exactly, for every recipe that reports
// health, and a cast must not copy anything back.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/quantizer.h"
#include "runtime/cuda.h"
#include "runtime/fp8_meta.h"
#include "runtime/fp8_stats.h"
#include "runtime/recipe.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// (128, 256) values a cast both saturates and flushes under every recipe: a normal spread, a
// few huge and tiny magnitudes side by side in one block, zeros and a NaN.
Tensor health_input(uint64_t seed) {
  Tensor x = test::random_tensor({128, 256}, DType::kF32, seed);
  float* p = x.data_as<float>();
  for (int64_t i = 0; i < x.numel(); i += 97) p[i] = (i % 2 == 0 ? 1.f : -1.f) * 3e4f;
  for (int64_t i = 5; i < x.numel(); i += 89) p[i] = 1e-30f;
  for (int64_t i = 7; i < x.numel(); i += 211) p[i] = 0.f;
  p[11] = kNaN;
  return x;
}

struct Health {
  FP8CastCounts counts;
  BlockScaleSpread spread;
};

// One slot's quantizer on `device`, its casts of x (both usages, recorded), and what it counted.
Health cast_and_take(const Recipe& recipe, SlotId slot, const Tensor& x, Device device) {
  SlotContext context;
  std::shared_ptr<FP8Meta> meta;
  if (recipe.uses_fp8_meta()) {
    meta = std::make_shared<FP8Meta>(recipe, 1);
    // A large scale: the delayed casts saturate as well as flush.
    meta->slot(slot).scale.data_as<float>()[0] = 300.f;
    for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
      for (FP8Slot& s : meta->slots(d)) {
        for (Tensor* t : {&s.scale, &s.scale_inv, &s.amax_history}) t->move_storage_to(device);
      }
    }
    context.meta = meta.get();
  } else {
    context.stats = std::make_shared<SlotStats>();
  }
  const std::shared_ptr<Quantizer> q = make_quantizer(recipe, context, slot);
  const Tensor input = x.to(device);
  const cuda::HostSyncCounts before =
      device.is_cuda() ? cuda::host_sync_counts() : cuda::HostSyncCounts{};
  for (int i = 0; i < 2; ++i) {
    (void)q->quantize(input, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
  }
  if (device.is_cuda()) {
    EXPECT_EQ(cuda::host_sync_counts().device_to_host, before.device_to_host)
        << "a counting cast copied back";
  }
  Health h;
  if (meta != nullptr) {
    h.counts = meta->take_cast_counts(slot);
  } else {
    settle_device_stats(context.stats->counts, &context.stats->scales);
    h.counts = context.stats->counts;
    h.spread = context.stats->scales;
  }
  return h;
}

TEST(CudaFp8Health, CountsAndScaleSpreadEqualTheCpusForEveryRecipe) {
  OCTET_REQUIRE_CUDA();
  const std::vector<Recipe> recipes = {Recipe::delayed(), Recipe::current(), Recipe::mxfp8(),
                                       Recipe::blockwise(), Recipe::nvfp4()};
  const std::vector<SlotId> slots = {forward_slot(0, ForwardTensor::kInput),
                                     forward_slot(0, ForwardTensor::kWeight),
                                     backward_slot(0, BackwardTensor::kGradOutput)};
  int64_t saturated = 0, flushed = 0;
  for (const Recipe& recipe : recipes) {
    for (const SlotId slot : slots) {
      SCOPED_TRACE(
          describe(recipe) +
          (slot.direction == FP8Direction::kForward ? " forward slot " : " backward slot ") +
          std::to_string(slot.index));
      const Tensor x = health_input(700 + static_cast<uint64_t>(slot.index));
      const Health want = cast_and_take(recipe, slot, x, Device::cpu());
      const Health got = cast_and_take(recipe, slot, x, test::gpu());
      EXPECT_GT(want.counts.total, 0);
      EXPECT_EQ(got.counts.total, want.counts.total);
      EXPECT_EQ(got.counts.saturated, want.counts.saturated);
      EXPECT_EQ(got.counts.flushed, want.counts.flushed);
      saturated += want.counts.saturated;
      flushed += want.counts.flushed;
      EXPECT_EQ(got.spread.blocks(), want.spread.blocks());
      if (want.spread.blocks() > 0) {
        EXPECT_EQ(got.spread.min_log2(), want.spread.min_log2());
        EXPECT_EQ(got.spread.max_log2(), want.spread.max_log2());
        EXPECT_EQ(got.spread.median_log2(), want.spread.median_log2());
      }
      if (!recipe.uses_fp8_meta()) {
        EXPECT_GT(want.spread.blocks(), 0);
      }
    }
  }
  // The inputs did exercise both counts.
  EXPECT_GT(saturated, 0);
  EXPECT_GT(flushed, 0);
}

// Taking the counts zeroes the device's words in place: a second take without casts adds nothing.
TEST(CudaFp8Health, TakingTheCountsStartsTheDeviceAgainFromZero) {
  OCTET_REQUIRE_CUDA();
  SlotContext context;
  context.stats = std::make_shared<SlotStats>();
  const SlotId slot = forward_slot(0, ForwardTensor::kInput);
  const auto q = make_quantizer(Recipe::mxfp8(), context, slot);
  (void)q->quantize(health_input(9).to(test::gpu()), Usage::kRowwise, Ownership::kInternal,
                    AmaxRecording::kRecord);
  (void)q->quantize(health_input(9).to(test::gpu()), Usage::kRowwise, Ownership::kInternal,
                    AmaxRecording::kSkip);  // a skipping cast counts nothing
  SlotStats& s = *context.stats;
  settle_device_stats(s.counts, &s.scales);
  EXPECT_EQ(s.counts.total, 128 * 256);
  EXPECT_GT(s.counts.flushed, 0);
  EXPECT_EQ(s.scales.blocks(), 128 * 256 / 32);
  // The device words stay (a replayed CUDA graph keeps counting into them), zeroed.
  ASSERT_NE(s.counts.device, nullptr);
  const Tensor words = s.counts.device->words.to(Device::cpu());
  for (int64_t i = 0; i < words.numel(); ++i) EXPECT_EQ(words.data_as<int64_t>()[i], 0) << i;
  const FP8CastCounts before = s.counts;
  settle_device_stats(s.counts, &s.scales);
  EXPECT_EQ(s.counts.flushed, before.flushed);
  EXPECT_EQ(s.scales.blocks(), 128 * 256 / 32);
}

}  // namespace
}  // namespace octet
