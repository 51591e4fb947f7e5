// LayerNormMLP and LayerNormLinear: numerics against the composition of the autograd primitives
// (each gradient-checked against f64), recompute, and the memory behaviours with byte counts.
#include "modules/layernorm_mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autograd/context.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/nn.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/optimizer.h"
#include "runtime/float8_tensor.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using ops::Activation;
using test::Tolerance;

struct Result {
  std::vector<float> y, dx, dgamma, dw1, dw2;
};

// The same block from primitives: layer_norm -> linear -> activation -> linear.
Result reference(const LayerNormMLP& m, const Tensor& x_in, const Tensor& g, Activation act,
                 bool gated) {
  Tensor x = x_in.clone();
  autograd::set_requires_grad(x);
  Tensor gamma = m.norm().gamma.clone(), beta = m.norm().beta.clone();
  Tensor w1 = m.fc1_weight().hp.clone(), b1 = m.fc1_bias().clone();
  Tensor w2 = m.fc2_weight().hp.clone(), b2 = m.fc2_bias().clone();
  for (Tensor* t : {&gamma, &beta, &w1, &b1, &w2, &b2}) autograd::set_requires_grad(*t);
  Tensor h = autograd::layer_norm(x, gamma, beta, 1e-5f);
  h = autograd::linear(h, w1, b1);
  h = gated ? autograd::gated_activation(act, h) : autograd::activation(act, h);
  Tensor y = autograd::linear(h, w2, b2);
  autograd::backward(y, g);
  return {y.to_floats(), autograd::grad(x).to_floats(), autograd::grad(gamma).to_floats(),
          autograd::grad(w1).to_floats(), autograd::grad(w2).to_floats()};
}

Result run(LayerNormMLP& m, const Tensor& x_in, const Tensor& g, const Recipe* recipe) {
  Tensor x = x_in.clone();
  autograd::set_requires_grad(x);
  Tensor y = test::with_fp8(recipe, [&] { return m.forward(x); });
  autograd::backward(y, g);
  Result r{y.to_floats(), autograd::grad(x).to_floats(), autograd::grad(m.norm().gamma).to_floats(),
           autograd::grad(m.fc1_weight().leaf()).to_floats(),
           autograd::grad(m.fc2_weight().leaf()).to_floats()};
  for (const Parameter& p : m.parameters()) autograd::zero_grad(*p.tensor);
  return r;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void expect_close(const Result& got, const Result& want, Tolerance tol, const std::string& what) {
  EXPECT_TRUE(test::all_close(got.y, as_double(want.y), tol)) << what << " y";
  EXPECT_TRUE(test::all_close(got.dx, as_double(want.dx), tol)) << what << " dx";
  EXPECT_TRUE(test::all_close(got.dgamma, as_double(want.dgamma), tol)) << what << " dgamma";
  EXPECT_TRUE(test::all_close(got.dw1, as_double(want.dw1), tol)) << what << " dw1";
  EXPECT_TRUE(test::all_close(got.dw2, as_double(want.dw2), tol)) << what << " dw2";
}

TEST(LayerNormMLP, HighPrecisionEqualsPrimitivesForEveryActivation) {
  const struct {
    MLPActivation a;
    Activation act;
    bool gated;
  } cases[] = {{MLPActivation::kGelu, Activation::kGelu, false},
               {MLPActivation::kRelu, Activation::kRelu, false},
               {MLPActivation::kSquaredRelu, Activation::kSquaredRelu, false},
               {MLPActivation::kSilu, Activation::kSilu, false},
               {MLPActivation::kSwiglu, Activation::kSilu, true},
               {MLPActivation::kGeglu, Activation::kGelu, true},
               {MLPActivation::kReglu, Activation::kRelu, true}};
  for (const auto& c : cases) {
    LayerNormMLPOptions o;
    o.activation = c.a;
    o.linear.init_std = 0.2f;
    LayerNormMLP m(32, 48, o);
    const Tensor x = test::random_tensor({2, 8, 32}, DType::kF32, 1);
    const Tensor g = test::random_tensor({2, 8, 32}, DType::kF32, 2);
    expect_close(run(m, x, g, nullptr), reference(m, x, g, c.act, c.gated), {1e-5, 1e-4},
                 ops::activation_name(c.act));
  }
}

TEST(LayerNormMLP, RecomputeIsBitIdenticalWithoutFp8AndWithinTolWithFp8) {
  const Tensor x = test::random_tensor({32, 64}, DType::kF32, 3);
  const Tensor g = test::random_tensor({32, 64}, DType::kF32, 4);
  LayerNormMLPOptions plain, again;
  again.recompute = Recompute::kYes;
  LayerNormMLP a(64, 128, plain), b(64, 128, again);  // same seeds: same weights
  const Result ra = run(a, x, g, nullptr), rb = run(b, x, g, nullptr);
  EXPECT_EQ(ra.y, rb.y);
  EXPECT_EQ(ra.dx, rb.dx);
  EXPECT_EQ(ra.dw1, rb.dw1);
  EXPECT_EQ(ra.dw2, rb.dw2);
  const Recipe delayed = Recipe::delayed();
  // Two FP8 steps each, so the second runs on updated scales (the recompute must reuse the
  // forward's, not the ones the scope exit wrote).
  Result fa, fb;
  for (int step = 0; step < 2; ++step) {
    fa = run(a, x, g, &delayed);
    fb = run(b, x, g, &delayed);
  }
  EXPECT_EQ(fa.y, fb.y);
  EXPECT_EQ(fa.dx, fb.dx) << "recomputed FP8 values differ from the forward's";
  EXPECT_EQ(fa.dw1, fb.dw1);
}

TEST(LayerNormMLP, Fp8RecipesStayWithinTeToleranceOfHighPrecision) {
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::current(), Recipe::mxfp8()}) {
    SCOPED_TRACE(describe(recipe));
    LayerNormMLP m(64, 128, {});
    const Tensor x = test::random_tensor({32, 64}, DType::kF32, 5);
    const Tensor g = test::random_tensor({32, 64}, DType::kF32, 6);
    const Result hp = run(m, x, g, nullptr);
    Result q;
    for (int step = 0; step < 2; ++step) q = run(m, x, g, &recipe);
    EXPECT_TRUE(test::all_close(q.y, as_double(hp.y), {0.0675, 0.125}));
    EXPECT_TRUE(test::all_close(q.dx, as_double(hp.dx), {0.0675, 0.125}));
  }
}

int64_t saved_bytes() { return memory_stats().current_of(MemTag::kSaved); }

TEST(MemoryBehaviour, SavedBytesAreZeroAfterEachModulesBackward) {
  std::vector<std::unique_ptr<LayerNormMLP>> stack;
  for (int i = 0; i < 4; ++i) {
    LayerNormMLPOptions o;
    o.linear.seed = static_cast<uint64_t>(10 * i);
    stack.push_back(std::make_unique<LayerNormMLP>(64, 256, o));
  }
  const Recipe delayed = Recipe::delayed();
  const int64_t base = saved_bytes();
  Tensor x = test::random_tensor({64, 64}, DType::kF32, 7);
  autograd::set_requires_grad(x);
  Tensor h = x;
  {
    FP8Autocast scope(delayed);
    for (auto& m : stack) h = m->forward(h);
  }
  EXPECT_GT(saved_bytes() - base, 0);
  std::vector<int64_t> after;
  autograd::set_node_observer([&](const char* name) {
    if (std::string(name) == "LayerNormMLP") after.push_back(saved_bytes() - base);
  });
  autograd::backward(autograd::sum(h));
  autograd::set_node_observer(nullptr);
  ASSERT_EQ(after.size(), 4u);
  // Saved bytes drop module by module; what remains belongs to modules not yet run.
  for (size_t i = 1; i < after.size(); ++i) EXPECT_LT(after[i], after[i - 1]);
  EXPECT_EQ(after.back(), 0);
  EXPECT_EQ(saved_bytes(), base);
}

TEST(MemoryBehaviour, PeakIsLowerThanKeepingRestoredObjectsUntilTheGraphDies) {
  auto peak_of_step = [] {
    std::vector<std::unique_ptr<LayerNormMLP>> stack;
    for (int i = 0; i < 4; ++i)
      stack.push_back(std::make_unique<LayerNormMLP>(64, 256, LayerNormMLPOptions{}));
    Tensor x = test::random_tensor({128, 64}, DType::kF32, 8);
    autograd::set_requires_grad(x);
    reset_peak_memory();
    const int64_t start = memory_stats().total_current;
    Tensor h = x;
    {
      FP8Autocast scope(Recipe::delayed());
      for (auto& m : stack) h = m->forward(h);
    }
    autograd::backward(autograd::sum(h));
    return memory_stats().total_peak - start;
  };
  const int64_t released = peak_of_step();
  int64_t kept = 0;
  {
    autograd::KeepSavedUntilGraphDiesForTesting keep;
    kept = peak_of_step();
  }
  EXPECT_LT(released, kept) << "peak " << released << " bytes vs " << kept << " when kept";
}

LayerNormMLPOptions fp8_primary() {
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::delayed();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  return o;
}

std::vector<uint8_t> bytes_of(const QuantizedTensor& q) {
  const auto& f = dynamic_cast<const Float8Tensor&>(q);
  std::vector<uint8_t> out(f.rowwise_data().nbytes() + f.columnwise_data().nbytes());
  std::memcpy(out.data(), f.rowwise_data().data(), f.rowwise_data().nbytes());
  std::memcpy(out.data() + f.rowwise_data().nbytes(), f.columnwise_data().data(),
              f.columnwise_data().nbytes());
  return out;
}

TEST(MemoryBehaviour, DroppedForwardLeavesFp8PrimaryWeightsIntactAndChangesNothing) {
  const Tensor x = test::random_tensor({32, 64}, DType::kF32, 9);
  const Tensor g = test::random_tensor({32, 64}, DType::kF32, 10);
  LayerNormMLP a(64, 128, fp8_primary()), b(64, 128, fp8_primary());
  const std::vector<uint8_t> w1 = bytes_of(*a.fc1_weight().fp8), w2 = bytes_of(*a.fc2_weight().fp8);
  const int64_t saved_base = saved_bytes();
  {
    Tensor xx = x.clone();
    autograd::set_requires_grad(xx);
    FP8Autocast scope(Recipe::delayed());
    Tensor dropped = a.forward(xx);  // no backward: the graph dies here
  }
  EXPECT_EQ(saved_bytes(), saved_base);
  EXPECT_EQ(bytes_of(*a.fc1_weight().fp8), w1);
  EXPECT_EQ(bytes_of(*a.fc2_weight().fp8), w2);
  // The dropped forward did record amaxes (it ran with gradients enabled), like a real forward;
  // comparing with a twin that ran the same forward isolates the "never happened" part: the
  // weights, which the graph must not have touched.
  {
    Tensor xx = x.clone();
    autograd::set_requires_grad(xx);
    FP8Autocast scope(Recipe::delayed());
    Tensor y = b.forward(xx);
  }
  const Recipe delayed = Recipe::delayed();
  const Result ra = run(a, x, g, &delayed);
  const Result rb = run(b, x, g, &delayed);
  EXPECT_EQ(ra.y, rb.y);
  EXPECT_EQ(ra.dx, rb.dx);
}

TEST(MemoryBehaviour, InitialWeightCastUsesAScratchAmaxAndTheStepRecordsTheNewWeight) {
  LayerNormMLP m(64, 128, fp8_primary());
  FP8Meta& meta = *m.fp8_state().meta();
  for (int gemm = 0; gemm < 2; ++gemm) {
    const std::vector<float> h =
        meta.slot(forward_slot(gemm, ForwardTensor::kWeight)).amax_history.to_floats();
    for (float v : h) ASSERT_EQ(v, 0.f) << "initial cast wrote the weight slot of GEMM " << gemm;
  }
  Optimizer opt(m.parameters(), {});
  const Tensor x = test::random_tensor({32, 64}, DType::kF32, 11);
  const Tensor g = test::random_tensor({32, 64}, DType::kF32, 12);
  Tensor xx = x.clone();
  Tensor y;
  {
    FP8Autocast scope(Recipe::delayed());
    y = m.forward(xx);
  }
  autograd::backward(y, g);
  // The forward's weight cast (FP8 primary weights are not recast) recorded nothing either.
  opt.step(1e-2f);
  const auto masters = opt.state_dict();
  for (int gemm = 0; gemm < 2; ++gemm) {
    const std::string name = gemm == 0 ? "fc1.weight.master" : "fc2.weight.master";
    Tensor master;
    for (const auto& [n, t] : masters) {
      if (n == name) master = t;
    }
    ASSERT_TRUE(master.defined()) << name;
    const float want = ops::amax(master).item();
    const float got =
        meta.slot(forward_slot(gemm, ForwardTensor::kWeight)).amax_history.to_floats()[0];
    EXPECT_EQ(got, want) << name;
  }
}

int64_t weight_bytes() { return memory_stats().current_of(MemTag::kWeights); }

TEST(MemoryBehaviour, InferenceModelHoldsNoColumnwiseWeightsAndMatchesTraining) {
  const int64_t base = weight_bytes();
  int64_t training_fp8 = 0, inference_fp8 = 0;
  auto fp8_bytes = [](LayerNormMLP& m) {
    return static_cast<int64_t>(m.fc1_weight().fp8->nbytes() + m.fc2_weight().fp8->nbytes());
  };
  LayerNormMLP train(64, 128, fp8_primary());
  training_fp8 = fp8_bytes(train);
  std::unique_ptr<LayerNormMLP> infer;
  {
    autograd::InferenceModeGuard guard;
    infer = std::make_unique<LayerNormMLP>(64, 128, fp8_primary());
  }
  inference_fp8 = fp8_bytes(*infer);
  // Per-tensor FP8: data is half (no column-wise copy); each holds one 4-byte scale_inv.
  EXPECT_EQ(inference_fp8 - 2 * 4, (training_fp8 - 2 * 4) / 2);
  EXPECT_FALSE(infer->fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_GT(weight_bytes(), base);

  const Tensor x = test::random_tensor({32, 64}, DType::kF32, 13);
  const int64_t saved_base = saved_bytes();
  Tensor yi, yt;
  {
    autograd::InferenceModeGuard guard;
    FP8Autocast scope(Recipe::delayed());
    yi = infer->forward(x);
    EXPECT_EQ(saved_bytes(), saved_base);
    EXPECT_FALSE(infer->fc1_weight().fp8->has(Usage::kColumnwise));
  }
  {
    FP8Autocast scope(Recipe::delayed());
    yt = train.forward(x);
  }
  EXPECT_EQ(yi.to_floats(), yt.to_floats()) << "same weights, same scales: same bits";
}

TEST(MemoryBehaviour, ValidationUnderNoGradKeepsColumnwiseAndMissingColumnwiseIsMadeOnDemand) {
  LayerNormMLP m(64, 128, fp8_primary());
  const Tensor x = test::random_tensor({32, 64}, DType::kF32, 14);
  ASSERT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  const auto& f = dynamic_cast<const Float8Tensor&>(*m.fc1_weight().fp8);
  const void* col_before = f.columnwise_data().data();
  {
    autograd::NoGradGuard no_grad;
    FP8Autocast scope(Recipe::delayed());
    m.forward(x);
  }
  EXPECT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_EQ(f.columnwise_data().data(), col_before) << "column-wise data was freed and rebuilt";

  std::unique_ptr<LayerNormMLP> built_for_inference;
  {
    autograd::NoGradGuard no_grad;
    built_for_inference = std::make_unique<LayerNormMLP>(64, 128, fp8_primary());
  }
  ASSERT_FALSE(built_for_inference->fc1_weight().fp8->has(Usage::kColumnwise));
  Tensor xx = x.clone();
  autograd::set_requires_grad(xx);
  Tensor y;
  {
    FP8Autocast scope(Recipe::delayed());
    y = built_for_inference->forward(xx);
  }
  autograd::backward(autograd::sum(y));
  EXPECT_TRUE(built_for_inference->fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_TRUE(autograd::grad(xx).defined());
}

TEST(LayerNormLinear, HighPrecisionEqualsPrimitivesAndReturnsTheNormOutput) {
  LayerNormLinearOptions o;
  o.return_norm_output = ReturnNormOutput::kYes;
  LayerNormLinear m(32, 48, o);
  Tensor x = test::random_tensor({16, 32}, DType::kF32, 15);
  autograd::set_requires_grad(x);
  auto [y, ln] = m.forward_with_norm_output(x);
  const Tensor g = test::random_tensor({16, 48}, DType::kF32, 16);
  autograd::backward({y, ln}, {g, Tensor::full({16, 32}, 0.5f, DType::kF32)});
  Tensor x2 = x.clone(), gamma = m.norm().gamma.clone(), beta = m.norm().beta.clone();
  Tensor w = m.weight().hp.clone(), b = m.bias().clone();
  for (Tensor* t : {&x2, &gamma, &beta, &w, &b}) autograd::set_requires_grad(*t);
  Tensor ln2 = autograd::layer_norm(x2, gamma, beta, 1e-5f);
  Tensor y2 = autograd::linear(ln2, w, b);
  autograd::backward({y2, ln2}, {g, Tensor::full({16, 32}, 0.5f, DType::kF32)});
  const Tolerance tol{1e-5, 1e-4};
  EXPECT_TRUE(test::all_close(y.to_floats(), test::to_doubles(y2), tol));
  EXPECT_TRUE(test::all_close(ln.to_floats(), test::to_doubles(ln2), tol));
  EXPECT_TRUE(
      test::all_close(autograd::grad(x).to_floats(), test::to_doubles(autograd::grad(x2)), tol));
  EXPECT_TRUE(test::all_close(autograd::grad(m.weight().leaf()).to_floats(),
                              test::to_doubles(autograd::grad(w)), tol));
}

}  // namespace
}  // namespace octet::modules

namespace octet::modules {
namespace {

// Behaviour 1 for the other FP8 modules: after each one's backward, nothing it saved is held.
TEST(MemoryBehaviour, LinearAndLayerNormLinearHoldNoSavedBytesAfterTheirBackward) {
  Linear lin(64, 64, {});
  LayerNormLinear lnl(64, 64, {});
  const int64_t base = memory_stats().current_of(MemTag::kSaved);
  Tensor x = test::random_tensor({32, 64}, DType::kF32, 20);
  autograd::set_requires_grad(x);
  Tensor y;
  int64_t lnl_held = 0;
  {
    FP8Autocast scope(Recipe::delayed());
    Tensor h = lnl.forward(x);
    lnl_held = memory_stats().current_of(MemTag::kSaved) - base;
    y = lin.forward(h);
  }
  const int64_t held = memory_stats().current_of(MemTag::kSaved) - base;
  EXPECT_GT(held, lnl_held);
  EXPECT_GT(held, 0);
  std::vector<std::pair<std::string, int64_t>> after;
  autograd::set_node_observer([&](const char* name) {
    after.emplace_back(name, memory_stats().current_of(MemTag::kSaved) - base);
  });
  autograd::backward(autograd::sum(y));
  autograd::set_node_observer(nullptr);
  bool saw_linear = false, saw_lnl = false;
  for (const auto& [name, bytes] : after) {
    if (name == "Linear") {
      saw_linear = true;
      EXPECT_EQ(bytes, lnl_held) << "Linear's saved buffers still held after its backward";
    }
    if (name == "LayerNormLinear") {
      saw_lnl = true;
      EXPECT_EQ(bytes, 0) << "LayerNormLinear ran last: nothing may be held";
    }
  }
  EXPECT_TRUE(saw_linear && saw_lnl);
  EXPECT_EQ(memory_stats().current_of(MemTag::kSaved), base);
}

// The fused norm + FP8 cast adds its counts to the slot's when it records amax (a training
// forward), and not when it skips (a recompute or a validation forward): same rule as the
// quantizer's own casts.
TEST(LayerNormFp8, FusedNormCastCountsOnlyWhenItRecordsAmax) {
  FP8State state(1, Recipe::delayed());
  const SlotId in = forward_slot(0, ForwardTensor::kInput);
  state.meta()->slot(in).scale.data_as<float>()[0] = 1000.f;  // |xhat| > 0.448 saturates
  const Tensor x = test::random_tensor({16, 32}, DType::kF32, 5);
  const Tensor gamma = Tensor::full({32}, 1.f, DType::kF32);
  const Tensor beta = Tensor::zeros({32}, DType::kF32);
  const NormSpec norm{gamma, beta, ops::NormKind::kLayerNorm, 1e-5f, ops::ZeroCenteredGamma::kNo};
  ops::NormForward stats;
  norm_operand(x, norm, state.quantizer(in), Usage::kBoth, AmaxRecording::kSkip, stats);
  FP8CastCounts c = state.meta()->take_cast_counts(in);
  EXPECT_EQ(c.total, 0);
  norm_operand(x, norm, state.quantizer(in), Usage::kBoth, AmaxRecording::kRecord, stats);
  c = state.meta()->take_cast_counts(in);
  EXPECT_EQ(c.total, 16 * 32);
  EXPECT_GT(c.saturated, 0);
  EXPECT_LT(c.saturated, c.total);
}

}  // namespace
}  // namespace octet::modules
