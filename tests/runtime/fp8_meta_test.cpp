// FP8Meta and the delayed-scaling update rule against values worked out in f64 in the test:
// the edge cases of DESIGN.md (zero, tiny, normal, inf and NaN amax) for both formats, margins,
// and the roll of the history for both amax algorithms.
#include "runtime/fp8_meta.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/error.h"

namespace octet {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

FP8Slot slot_with_history(const std::vector<float>& history) {
  return {Tensor::full({1}, 1.f, DType::kF32), Tensor::full({1}, 1.f, DType::kF32),
          Tensor::from_floats(history, {static_cast<int64_t>(history.size())})};
}

// (fp8_max / amax) / 2^margin in f64, rounded once to f32 (what f32 division then an exact
// power-of-two division give).
float want_scale(double fp8_max, double amax, int margin) {
  return static_cast<float>(static_cast<float>(fp8_max / amax) / std::ldexp(1.0, margin));
}

void expect_history(const FP8Slot& s, const std::vector<float>& want) {
  const std::vector<float> got = s.amax_history.to_floats();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "history[" << i << "]";
    } else {
      EXPECT_EQ(got[i], want[i]) << "history[" << i << "]";
    }
  }
}

class ScaleUpdate : public ::testing::TestWithParam<DType> {};

TEST_P(ScaleUpdate, EdgeCasesFromScaleOne) {
  const DType fp8 = GetParam();
  const double max = fp8 == DType::kE4M3 ? 448.0 : 57344.0;
  for (AmaxComputeAlgo algo : {AmaxComputeAlgo::kMax, AmaxComputeAlgo::kMostRecent}) {
    SCOPED_TRACE(amax_compute_algo_name(algo));
    {  // zero newest amax: no roll, scale unchanged (older entries stay where they are)
      FP8Slot s = slot_with_history({0.f, 5.f, 7.f});
      update_fp8_slot(s, fp8_max(fp8), 0, algo);
      EXPECT_EQ(s.scale.item(), 1.f);
      EXPECT_EQ(s.scale_inv.item(), 1.f);
      expect_history(s, {0.f, 5.f, 7.f});
    }
    {  // a tiny amax: fp8_max / amax overflows f32 -> FLT_MAX
      FP8Slot s = slot_with_history({1e-39f, 0.f, 0.f});
      ASSERT_TRUE(std::isinf(fp8_max(fp8) / 1e-39f));
      update_fp8_slot(s, fp8_max(fp8), 0, algo);
      EXPECT_EQ(s.scale.item(), FLT_MAX);
      EXPECT_EQ(s.scale_inv.item(), 1.f / FLT_MAX);
      expect_history(s, {0.f, 0.f, 1e-39f});
    }
    {  // normal: fp8_max / amax
      FP8Slot s = slot_with_history({3.f, 0.f, 0.f});
      update_fp8_slot(s, fp8_max(fp8), 0, algo);
      EXPECT_EQ(s.scale.item(), want_scale(max, 3.0, 0));
      EXPECT_EQ(s.scale_inv.item(), static_cast<float>(1.0 / want_scale(max, 3.0, 0)));
      expect_history(s, {0.f, 0.f, 3.f});
    }
    {  // inf amax keeps the old scale (1); the history still rolls
      FP8Slot s = slot_with_history({kInf, 0.f, 0.f});
      update_fp8_slot(s, fp8_max(fp8), 0, algo);
      EXPECT_EQ(s.scale.item(), 1.f);
      expect_history(s, {0.f, 0.f, kInf});
    }
    {  // NaN amax keeps the old scale (1)
      FP8Slot s = slot_with_history({kNaN, 0.f, 0.f});
      update_fp8_slot(s, fp8_max(fp8), 0, algo);
      EXPECT_EQ(s.scale.item(), 1.f);
      expect_history(s, {0.f, 0.f, kNaN});
    }
  }
}

TEST_P(ScaleUpdate, MarginDividesByAPowerOfTwo) {
  const DType fp8 = GetParam();
  const double max = fp8 == DType::kE4M3 ? 448.0 : 57344.0;
  for (int margin : {0, 1, 2, 7}) {
    FP8Slot s = slot_with_history({2.75f});
    update_fp8_slot(s, fp8_max(fp8), margin, AmaxComputeAlgo::kMax);
    EXPECT_EQ(s.scale.item(), want_scale(max, 2.75, margin)) << "margin " << margin;
    expect_history(s, {0.f});  // a history of one: the newest wraps onto itself, then zeroed
  }
}

INSTANTIATE_TEST_SUITE_P(FP8Meta, ScaleUpdate, ::testing::Values(DType::kE4M3, DType::kE5M2),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Four updates of a length-4 history with decreasing amaxes 8, 4, 2, 1, then 0.5: the window
// max keeps the largest amax until it leaves the window; most_recent follows the newest.
TEST(FP8Meta, HistoryRollsLikeTorchRollAndTheWindowForgets) {
  for (AmaxComputeAlgo algo : {AmaxComputeAlgo::kMax, AmaxComputeAlgo::kMostRecent}) {
    SCOPED_TRACE(amax_compute_algo_name(algo));
    FP8Slot s = slot_with_history({0.f, 0.f, 0.f, 0.f});
    float* h = s.amax_history.data_as<float>();
    const std::vector<float> amaxes = {8.f, 4.f, 2.f, 1.f, 0.5f};
    // History after each update, worked out by hand: entry i+1 moves to i, the newest goes to the
    // end, entry 0 becomes 0 (so the entry at index 1 is the one that is dropped next).
    const std::vector<std::vector<float>> histories = {{0, 0, 0, 8},
                                                       {0, 0, 8, 4},
                                                       {0, 8, 4, 2},
                                                       {0, 4, 2, 1},  // 8 has left the window
                                                       {0, 2, 1, 0.5f}};
    // Window max at each update: {8}, {8,4}, {8,4,2}, {8,4,2,1}, {4,2,1,0.5}.
    const std::vector<float> max_amax = {8, 8, 8, 8, 4};
    for (size_t step = 0; step < amaxes.size(); ++step) {
      h[0] = amaxes[step];
      update_fp8_slot(s, 448.f, 0, algo);
      expect_history(s, histories[step]);
      const float amax = algo == AmaxComputeAlgo::kMax ? max_amax[step] : amaxes[step];
      EXPECT_EQ(s.scale.item(), want_scale(448.0, amax, 0)) << "step " << step;
    }
  }
}

TEST(FP8Meta, SlotsStartAtScaleOneAndZeroHistories) {
  const Recipe recipe = Recipe::delayed(FP8Format::kHybrid, 0, 31);
  FP8Meta meta(recipe, 2);
  EXPECT_EQ(meta.num_slots(FP8Direction::kForward), 6);
  EXPECT_EQ(meta.num_slots(FP8Direction::kBackward), 4);
  EXPECT_EQ(forward_slot(1, ForwardTensor::kInput).index, 3);  // LayerNormMLP's fc2: slots 3-5
  EXPECT_EQ(forward_slot(1, ForwardTensor::kOutput).index, 5);
  EXPECT_EQ(backward_slot(1, BackwardTensor::kGradInput).index, 3);
  for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
    for (int i = 0; i < meta.num_slots(d); ++i) {
      const FP8Slot& s = meta.slot({d, i});
      EXPECT_EQ(s.scale.item(), 1.f);
      EXPECT_EQ(s.scale_inv.item(), 1.f);
      EXPECT_EQ(s.amax_history.shape(), Shape({31}));
      for (float v : s.amax_history.to_floats()) EXPECT_EQ(v, 0.f);
    }
  }
  EXPECT_EQ(meta.dtype(forward_slot(0, ForwardTensor::kWeight)), DType::kE4M3);
  EXPECT_EQ(meta.dtype(backward_slot(0, BackwardTensor::kGradOutput)), DType::kE5M2);
}

TEST(FP8Meta, UpdateTouchesOnlyItsDirectionWithThatDirectionsFormat) {
  FP8Meta meta(Recipe::delayed(FP8Format::kHybrid, 1, 4), 1);
  const SlotId x = forward_slot(0, ForwardTensor::kInput);
  const SlotId dy = backward_slot(0, BackwardTensor::kGradOutput);
  meta.slot(x).amax_history.data_as<float>()[0] = 2.f;
  meta.slot(dy).amax_history.data_as<float>()[0] = 2.f;
  meta.update(FP8Direction::kForward);
  EXPECT_EQ(meta.slot(x).scale.item(), want_scale(448.0, 2.0, 1));
  EXPECT_EQ(meta.slot(dy).scale.item(), 1.f);
  EXPECT_EQ(meta.slot(dy).amax_history.to_floats()[0], 2.f);
  meta.update(FP8Direction::kBackward);
  EXPECT_EQ(meta.slot(dy).scale.item(), want_scale(57344.0, 2.0, 1));  // e5m2 under hybrid
  EXPECT_EQ(meta.slot(x).amax_history.to_floats()[3], 2.f);            // forward not rolled again
}

TEST(FP8Meta, ClearErrors) {
  EXPECT_THROW(FP8Meta(Recipe::current(), 1), Error);
  EXPECT_THROW(FP8Meta(Recipe::delayed(), 0), Error);
  FP8Meta meta(Recipe::delayed(), 1);
  try {
    meta.slot(forward_slot(1, ForwardTensor::kInput));
    FAIL() << "slot 3 of a one-GEMM meta";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward slot 3 out of range"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace octet
