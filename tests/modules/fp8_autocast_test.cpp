// The FP8 scope: recipe and enablement per scope, forward slots updated once when the outermost
// scope exits with gradients enabled, backward slots once at the end of the backward pass; and
// four steps of a small FP8 linear with constant inputs whose histories and scales are worked out
// by hand (DESIGN.md "Recipes").
#include "modules/fp8_autocast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using autograd::Context;
using autograd::Tensors;

const SlotId kInput = forward_slot(0, ForwardTensor::kInput);
const SlotId kWeight = forward_slot(0, ForwardTensor::kWeight);
const SlotId kOutput = forward_slot(0, ForwardTensor::kOutput);
const SlotId kGradOutput = backward_slot(0, BackwardTensor::kGradOutput);
const SlotId kGradInput = backward_slot(0, BackwardTensor::kGradInput);

std::vector<float> history(const FP8Meta& meta, SlotId id) {
  return meta.slot(id).amax_history.to_floats();
}
float scale(const FP8Meta& meta, SlotId id) { return meta.slot(id).scale.item(); }

TEST(FP8Autocast, ScopesSetEnablementAndRecipeAndNest) {
  EXPECT_FALSE(fp8_enabled());
  EXPECT_EQ(fp8_scope_depth(), 0);
  EXPECT_THROW(fp8_recipe(), Error);
  {
    FP8Autocast outer(Recipe::delayed());
    EXPECT_TRUE(fp8_enabled());
    EXPECT_EQ(fp8_recipe(), Recipe::delayed());
    {
      FP8Autocast inner(Recipe::mxfp8());
      EXPECT_EQ(fp8_recipe(), Recipe::mxfp8());
      {
        FP8Autocast off(Recipe::current(), FP8Enabled::kNo);
        EXPECT_FALSE(fp8_enabled());
        EXPECT_EQ(fp8_scope_depth(), 3);
      }
      EXPECT_TRUE(fp8_enabled());
      EXPECT_EQ(fp8_recipe(), Recipe::mxfp8());
    }
    EXPECT_EQ(fp8_recipe(), Recipe::delayed());
  }
  EXPECT_FALSE(fp8_enabled());
  EXPECT_EQ(fp8_amax_recording(), AmaxRecording::kRecord);
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(fp8_amax_recording(), AmaxRecording::kSkip);
}

TEST(FP8Autocast, ForwardSlotsUpdateOnceAtTheOutermostExit) {
  auto meta = std::make_shared<FP8Meta>(Recipe::delayed(FP8Format::kE4M3, 0, 4), 1);
  float* h = meta->slot(kInput).amax_history.data_as<float>();
  {
    FP8Autocast outer(meta->recipe());
    {
      FP8Autocast inner(meta->recipe());
      h[0] = 2.f;
      register_fp8_forward(meta);
      register_fp8_forward(meta);  // a module that ran twice in one step
    }
    EXPECT_EQ(history(*meta, kInput), (std::vector<float>{2, 0, 0, 0})) << "inner exit updated";
    register_fp8_forward(meta);
  }
  EXPECT_EQ(meta->update_count(FP8Direction::kForward), 1);
  EXPECT_EQ(history(*meta, kInput), (std::vector<float>{0, 0, 0, 2}));
  EXPECT_EQ(scale(*meta, kInput), 224.f);
  EXPECT_EQ(scale(*meta, kGradOutput), 1.f);  // backward slots wait for the backward pass
  EXPECT_EQ(meta->update_count(FP8Direction::kBackward), 0);
  EXPECT_THROW(register_fp8_forward(meta), Error);  // outside any scope
}

TEST(FP8Autocast, NoUpdateWhenTheScopeExitsWithGradientsDisabled) {
  auto meta = std::make_shared<FP8Meta>(Recipe::delayed(FP8Format::kE4M3, 0, 4), 1);
  meta->slot(kInput).amax_history.data_as<float>()[0] = 2.f;
  {
    autograd::NoGradGuard no_grad;
    FP8Autocast scope(meta->recipe());
    register_fp8_forward(meta);
  }
  EXPECT_EQ(history(*meta, kInput), (std::vector<float>{2, 0, 0, 0}));
  EXPECT_EQ(scale(*meta, kInput), 1.f);
  EXPECT_EQ(meta->update_count(FP8Direction::kForward), 0);
  {  // nor when it is left by an exception
    try {
      FP8Autocast scope(meta->recipe());
      register_fp8_forward(meta);
      throw std::runtime_error("forward failed");
    } catch (const std::runtime_error&) {
    }
  }
  EXPECT_EQ(scale(*meta, kInput), 1.f);
  {  // the amax is still there for the next step
    FP8Autocast scope(meta->recipe());
    register_fp8_forward(meta);
  }
  EXPECT_EQ(scale(*meta, kInput), 224.f);
  EXPECT_EQ(meta->update_count(FP8Direction::kForward), 1);
}

// A node that records a gradient amax in its backward and schedules the meta's update; it checks
// that the backward slot's scale has not moved yet while the pass is still running.
struct GradAmaxFn {
  static constexpr const char* kName = "grad_amax";
  std::shared_ptr<FP8Meta> meta;
  float amax;
  bool fail = false;
  Tensor forward(Context&, const Tensor& x) { return x.clone(); }
  Tensors backward(Context&, const Tensors& dy) {
    EXPECT_EQ(meta->slot(kGradOutput).scale.item(), 1.f) << "updated before the pass ended";
    float* h = meta->slot(kGradOutput).amax_history.data_as<float>();
    h[0] = std::max(h[0], amax);
    schedule_fp8_backward_update(meta);
    if (fail) throw std::runtime_error("backward failed");
    return {dy[0]};
  }
};

TEST(FP8Autocast, BackwardSlotsUpdateOnceAtTheEndOfThePass) {
  auto meta = std::make_shared<FP8Meta>(Recipe::delayed(FP8Format::kHybrid, 0, 4), 1);
  Tensor x = test::random_tensor({4}, DType::kF32, 91);
  autograd::set_requires_grad(x);
  Tensor y = autograd::apply(
      GradAmaxFn{meta, 3.f},
      autograd::apply(GradAmaxFn{meta, 5.f}, autograd::apply(GradAmaxFn{meta, 1.f}, x)));
  autograd::backward(autograd::sum(y));
  // Three nodes scheduled it: one update, with the max of their amaxes; e5m2 under hybrid.
  EXPECT_EQ(meta->update_count(FP8Direction::kBackward), 1);
  EXPECT_EQ(meta->update_count(FP8Direction::kForward), 0);
  EXPECT_EQ(history(*meta, kGradOutput), (std::vector<float>{0, 0, 0, 5}));
  EXPECT_EQ(scale(*meta, kGradOutput), static_cast<float>(57344.0 / 5.0));
  EXPECT_EQ(history(*meta, kGradInput), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(scale(*meta, kInput), 1.f);  // forward slots are the scope's business
  EXPECT_THROW(schedule_fp8_backward_update(meta), Error);  // outside a backward pass
}

TEST(FP8Autocast, APassThatFailsDoesNotStopTheNextPassFromUpdating) {
  auto meta = std::make_shared<FP8Meta>(Recipe::delayed(FP8Format::kE4M3, 0, 4), 1);
  Tensor x = test::random_tensor({4}, DType::kF32, 92);
  autograd::set_requires_grad(x);
  GradAmaxFn failing{meta, 2.f};
  failing.fail = true;
  EXPECT_THROW(autograd::backward(autograd::sum(autograd::apply(failing, x))), std::runtime_error);
  EXPECT_EQ(scale(*meta, kGradOutput), 1.f);
  autograd::backward(autograd::sum(autograd::apply(GradAmaxFn{meta, 2.f}, x)));
  EXPECT_EQ(scale(*meta, kGradOutput), 224.f);
  EXPECT_EQ(meta->update_count(FP8Direction::kBackward), 1);
}

// A small FP8 linear, Y = X·Wᵀ, the way an FP8 module uses this pieces: quantizers from
// the recipe and the meta's slots, usages per DESIGN.md, the input saved column-wise only,
// forward registration and backward scheduling.
struct FP8LinearFn {
  static constexpr const char* kName = "fp8_linear_test";
  std::shared_ptr<FP8Meta> meta;
  Tensor weight;                        // high precision (out, in)
  std::vector<float>* input_scale_inv;  // what each forward's input cast used
  std::vector<float>* grad_scale_inv;   // what each backward's grad_output cast used
  Tensor forward(Context& ctx, const Tensor& x) {
    const Recipe& recipe = fp8_recipe();
    register_fp8_forward(meta);
    auto qx = make_quantizer(recipe, meta.get(), kInput)
                  ->quantize(x, Usage::kBoth, Ownership::kInternal, fp8_amax_recording());
    auto qw = make_quantizer(recipe, meta.get(), kWeight)
                  ->quantize(weight, Usage::kBoth, Ownership::kInternal, fp8_amax_recording());
    input_scale_inv->push_back(static_cast<const Float8Tensor&>(*qx).scale_inv().item());
    Tensor y = ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, DType::kF32);
    ops::update_usage(*qx, Usage::kColumnwise);  // wgrad needs only this
    ctx.save_object(qx);
    ctx.save_object(qw);
    return y;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto objects = ctx.restore_objects();
    const QuantizedTensor& qx = *std::static_pointer_cast<QuantizedTensor>(objects[0]);
    const QuantizedTensor& qw = *std::static_pointer_cast<QuantizedTensor>(objects[1]);
    auto qdy = make_quantizer(meta->recipe(), meta.get(), kGradOutput)
                   ->quantize(dy[0], Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
    grad_scale_inv->push_back(static_cast<const Float8Tensor&>(*qdy).scale_inv().item());
    schedule_fp8_backward_update(meta);
    EXPECT_EQ(ops::fp8_gemm(*qdy, qx, ops::GemmLayout::kWgrad, DType::kF32).shape(),
              weight.shape());
    return {ops::fp8_gemm(*qdy, qw, ops::GemmLayout::kDgrad, DType::kF32)};
  }
};

using ConstantParam = std::tuple<FP8Format, int64_t>;
class ConstantInputs : public ::testing::TestWithParam<ConstantParam> {};

// Steps k = 0..3 with x = k + 0.25, w = k + 0.5, dy = k + 0.75 (16 x 16), margin 2: after step k
// the history holds the amaxes of steps 0..k at its end (newest last) and 0 elsewhere, and the
// scale is (fp8_max / amax) / 4 with amax = k + c (the newest is the largest). Step k's casts use
// the scales of step k - 1 (1 at step 0).
TEST_P(ConstantInputs, HistoriesAndScalesOverFourSteps) {
  // Plain variables, not a structured binding: the lambdas below capture them, which clang 14
  // refuses for bindings (C++20 allows it; clang supports it from 16).
  const FP8Format format = std::get<0>(GetParam());
  const int64_t len = std::get<1>(GetParam());
  const Recipe recipe = Recipe::delayed(format, 2, len, AmaxComputeAlgo::kMax);
  auto meta = std::make_shared<FP8Meta>(recipe, 1);
  const double fwd_max = 448.0;
  const double bwd_max = format == FP8Format::kHybrid ? 57344.0 : 448.0;
  auto want_scale = [](double max, double amax) {
    return static_cast<float>(static_cast<float>(max / amax) / 4.0);
  };
  std::vector<float> x_inv, dy_inv;
  for (int k = 0; k < 4; ++k) {
    Tensor x = Tensor::full({16, 16}, k + 0.25f, DType::kF32);
    autograd::set_requires_grad(x);
    const Tensor w = Tensor::full({16, 16}, k + 0.5f, DType::kF32);
    Tensor y;
    {
      FP8Autocast scope(recipe);
      y = autograd::apply(FP8LinearFn{meta, w, &x_inv, &dy_inv}, x);
    }
    autograd::backward(y, Tensor::full({16, 16}, k + 0.75f, DType::kF32));
    ASSERT_TRUE(autograd::grad(x).defined());

    const auto expect_slot = [&](SlotId id, double c, double max) {
      std::vector<float> want(static_cast<size_t>(len), 0.f);
      for (int j = 0; j <= k; ++j) want[static_cast<size_t>(len - 1 - (k - j))] = j + c;
      EXPECT_EQ(history(*meta, id), want) << "step " << k;
      EXPECT_EQ(scale(*meta, id), want_scale(max, k + c)) << "step " << k;
      EXPECT_EQ(meta->slot(id).scale_inv.item(), 1.f / want_scale(max, k + c));
    };
    EXPECT_EQ(meta->update_count(FP8Direction::kForward), k + 1);
    EXPECT_EQ(meta->update_count(FP8Direction::kBackward), k + 1);
    expect_slot(kInput, 0.25, fwd_max);
    expect_slot(kWeight, 0.5, fwd_max);
    expect_slot(kGradOutput, 0.75, bwd_max);
    // Nothing was cast through the output and grad_input slots: no roll, scale 1.
    for (SlotId id : {kOutput, kGradInput}) {
      EXPECT_EQ(history(*meta, id), std::vector<float>(static_cast<size_t>(len), 0.f));
      EXPECT_EQ(scale(*meta, id), 1.f);
    }
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(x_inv[k], k == 0 ? 1.f : 1.f / want_scale(fwd_max, k - 1 + 0.25)) << "step " << k;
    EXPECT_EQ(dy_inv[k], k == 0 ? 1.f : 1.f / want_scale(bwd_max, k - 1 + 0.75)) << "step " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Delayed, ConstantInputs,
                         ::testing::Combine(::testing::Values(FP8Format::kE4M3, FP8Format::kHybrid),
                                            ::testing::Values(int64_t{31}, int64_t{1024})),
                         [](const auto& info) {
                           return std::string(fp8_format_name(std::get<0>(info.param))) + "_len" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(FP8Autocast, ValidationForwardUnderNoGradMovesNoScale) {
  const Recipe recipe = Recipe::delayed(FP8Format::kHybrid, 0, 8);
  auto meta = std::make_shared<FP8Meta>(recipe, 1);
  std::vector<float> x_inv, dy_inv;
  autograd::NoGradGuard no_grad;
  FP8Autocast scope(recipe);
  const Tensor y =
      autograd::apply(FP8LinearFn{meta, Tensor::full({16, 16}, 3.f, DType::kF32), &x_inv, &dy_inv},
                      Tensor::full({16, 16}, 2.f, DType::kF32));
  EXPECT_EQ(y.shape(), Shape({16, 16}));
  EXPECT_EQ(history(*meta, kInput), std::vector<float>(8, 0.f)) << "no-grad cast recorded amax";
  EXPECT_EQ(history(*meta, kWeight), std::vector<float>(8, 0.f));
}

}  // namespace
}  // namespace octet::modules
