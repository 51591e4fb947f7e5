// The memory contract of the module layer on every device (tests/support/devices.h): the three
// behaviours of DESIGN.md proven with the byte counts of the test's device, with modules built on
// the host and moved by Module::to (a no-op on the CPU) and their inputs made there. The tracker
// counts the requested bytes of live storages on both backends (the GPU's caching allocator
// rounds its blocks, not the counts), so the byte counts compare exactly on each.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/context.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "modules/optimizer.h"
#include "runtime/float8_tensor.h"
#include "runtime/memory.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/devices.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::bytes_of;

using test::run_mlp;
using Result = test::MLPResult;

LayerNormMLPOptions fp8_primary() {
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::delayed();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  return o;
}

class MemoryBehaviour : public test::DeviceTest {
 protected:
  // Four LayerNormMLP blocks on the test's device; block i's weights from seed `seed_step * i`.
  std::vector<std::unique_ptr<LayerNormMLP>> stack(uint64_t seed_step) const {
    std::vector<std::unique_ptr<LayerNormMLP>> blocks;
    for (uint64_t i = 0; i < 4; ++i) {
      LayerNormMLPOptions o;
      o.linear.seed = seed_step * i;
      blocks.push_back(std::make_unique<LayerNormMLP>(64, 256, o));
      blocks.back()->to(device());
    }
    return blocks;
  }
  // Bytes held for backward on the host, where a run on another device must add none.
  static int64_t host_saved_bytes() {
    return memory_stats(Device::cpu()).current_of(MemTag::kSaved);
  }
  // Saved bytes of one FP8 forward of m (the graph alive), freed on return.
  int64_t saved_by_forward(LayerNormMLP& m, const Tensor& x_in, const Recipe& recipe) const {
    const int64_t base = saved_bytes();
    Tensor x = x_in.clone();
    autograd::set_requires_grad(x);
    Tensor y;
    {
      FP8Autocast scope(recipe);
      y = m.forward(x);
    }
    return saved_bytes() - base;
  }
};
OCTET_DEVICE_TESTS(MemoryBehaviour);

TEST_P(MemoryBehaviour, SavedBytesAreZeroAfterEachModulesBackward) {
  std::vector<std::unique_ptr<LayerNormMLP>> blocks = stack(10);
  const Recipe delayed = Recipe::delayed();
  const int64_t base = saved_bytes(), host_base = host_saved_bytes();
  Tensor x = leaf({64, 64}, 7);
  Tensor h = x;
  {
    FP8Autocast scope(delayed);
    for (auto& m : blocks) h = m->forward(h);
  }
  EXPECT_GT(saved_bytes() - base, 0);
  if (!device().is_cpu()) {
    EXPECT_EQ(host_saved_bytes(), host_base) << "a forward on the device saved host tensors";
  }
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
  EXPECT_EQ(host_saved_bytes(), host_base);
  EXPECT_EQ(autograd::grad(x).device(), device());
}

TEST_P(MemoryBehaviour, PeakIsLowerThanKeepingRestoredObjectsUntilTheGraphDies) {
  auto peak_of_step = [&] {
    std::vector<std::unique_ptr<LayerNormMLP>> blocks = stack(0);  // all from seed 0
    Tensor x = leaf({128, 64}, 8);
    reset_peak_memory(device());
    const int64_t start = memory_stats(device()).total_current;
    Tensor h = x;
    {
      FP8Autocast scope(Recipe::delayed());
      for (auto& m : blocks) h = m->forward(h);
    }
    EXPECT_GT(saved_bytes(), 0);
    autograd::backward(autograd::sum(h));
    return memory_stats(device()).total_peak - start;
  };
  // A GEMM workspace kept for the process (cuBLASLt's 32 MiB comes with the first GEMM on a
  // device): one unmeasured step first, or the first measured peak would carry it and not the
  // other.
  peak_of_step();
  const int64_t released = peak_of_step();
  int64_t kept = 0;
  {
    autograd::KeepSavedUntilGraphDiesForTesting keep;
    kept = peak_of_step();
  }
  EXPECT_GT(released, 0);
  EXPECT_LT(released, kept) << "peak " << released << " bytes vs " << kept << " when kept";
}

TEST_P(MemoryBehaviour, DroppedForwardLeavesFp8PrimaryWeightsIntactAndChangesNothing) {
  const Tensor x = random({32, 64}, 9);
  const Tensor g = random({32, 64}, 10);
  LayerNormMLP a(64, 128, fp8_primary()), b(64, 128, fp8_primary());
  a.to(device());
  b.to(device());
  ASSERT_EQ(a.fc1_weight().fp8->device(), device());
  // Both usages are there, so the bytes compared below include the column-wise copy.
  ASSERT_TRUE(a.fc1_weight().fp8->has(Usage::kColumnwise));
  const std::vector<uint8_t> w1 = bytes_of(*a.fc1_weight().fp8), w2 = bytes_of(*a.fc2_weight().fp8);
  const int64_t saved_base = saved_bytes();
  {
    Tensor xx = x.clone();
    autograd::set_requires_grad(xx);
    FP8Autocast scope(Recipe::delayed());
    Tensor dropped = a.forward(xx);  // no backward: the graph dies here
    EXPECT_GT(saved_bytes(), saved_base) << "the forward saved nothing: nothing to free";
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
  const Result ra = run_mlp(a, x, g, &delayed);
  const Result rb = run_mlp(b, x, g, &delayed);
  EXPECT_EQ(ra.y, rb.y);
  EXPECT_EQ(ra.dx, rb.dx);
}

TEST_P(MemoryBehaviour, InitialWeightCastUsesAScratchAmaxAndTheStepRecordsTheNewWeight) {
  LayerNormMLP m(64, 128, fp8_primary());
  m.to(device());
  FP8Meta& meta = *m.fp8_state().meta();
  for (int gemm = 0; gemm < 2; ++gemm) {
    const Tensor& history = meta.slot(forward_slot(gemm, ForwardTensor::kWeight)).amax_history;
    ASSERT_EQ(history.device(), device()) << "the FP8 meta did not move with the module";
    for (float v : history.to_floats()) {
      ASSERT_EQ(v, 0.f) << "initial cast wrote the weight slot of GEMM " << gemm;
    }
  }
  Optimizer opt(m.parameters(), {});  // built after the move: AdamW over the moved masters
  const Tensor x = random({32, 64}, 11);
  const Tensor g = random({32, 64}, 12);
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
    EXPECT_EQ(master.device(), device()) << name;
    const float want = ops::amax(master).item();
    EXPECT_GT(want, 0.f) << name;
    const float got =
        meta.slot(forward_slot(gemm, ForwardTensor::kWeight)).amax_history.to_floats()[0];
    EXPECT_EQ(got, want) << name;
  }
}

TEST_P(MemoryBehaviour, InferenceModelHoldsNoColumnwiseWeightsAndMatchesTraining) {
  const int64_t base = bytes(MemTag::kWeights);
  auto fp8_bytes = [](LayerNormMLP& m) {
    return static_cast<int64_t>(m.fc1_weight().fp8->nbytes() + m.fc2_weight().fp8->nbytes());
  };
  LayerNormMLP train(64, 128, fp8_primary());
  train.to(device());
  const int64_t train_weights = bytes(MemTag::kWeights) - base;
  const int64_t training_fp8 = fp8_bytes(train);
  std::unique_ptr<LayerNormMLP> infer;
  {
    autograd::InferenceModeGuard guard;
    infer = std::make_unique<LayerNormMLP>(64, 128, fp8_primary());
  }
  infer->to(device());  // moving adds no usage
  const int64_t infer_weights = bytes(MemTag::kWeights) - base - train_weights;
  const int64_t inference_fp8 = fp8_bytes(*infer);
  // Per-tensor FP8: data is half (no column-wise copy); each holds one 4-byte scale_inv.
  EXPECT_EQ(inference_fp8 - 2 * 4, (training_fp8 - 2 * 4) / 2);
  EXPECT_FALSE(infer->fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_FALSE(infer->fc2_weight().fp8->has(Usage::kColumnwise));
  EXPECT_EQ(infer->fc1_weight().fp8->device(), device());
  EXPECT_GT(bytes(MemTag::kWeights), base);
  // Per weight (128 x 64 values) the training model also holds the column-wise copy (1 byte a
  // value) and the f32 value it was cast from (its initial master, a weight until an optimizer
  // adopts it); norm and biases are the same in both.
  EXPECT_EQ(train_weights - infer_weights, 2 * 128 * 64 * (1 + 4));

  const Tensor x = random({32, 64}, 13);
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
  // The same forward with gradients does save: the zero above is not for want of anything.
  EXPECT_GT(saved_bytes(), saved_base);
  EXPECT_EQ(yi.device(), device());
  EXPECT_EQ(yi.to_floats(), yt.to_floats()) << "same weights, same scales: same bits";
}

TEST_P(MemoryBehaviour, ValidationUnderNoGradKeepsColumnwiseAndMissingColumnwiseIsMadeOnDemand) {
  LayerNormMLP m(64, 128, fp8_primary());
  m.to(device());
  const Tensor x = random({32, 64}, 14);
  ASSERT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  const auto& f = dynamic_cast<const Float8Tensor&>(*m.fc1_weight().fp8);
  ASSERT_EQ(f.columnwise_data().device(), device());
  // A handle on the column-wise storage: an allocator may hand a freed block of the same size
  // straight back to a rebuild (the GPU's cache does), so without it a free-then-rebuild could
  // keep the pointer. Held here, a rebuilt copy must live elsewhere.
  const Tensor col_before = f.columnwise_data();
  {
    autograd::NoGradGuard no_grad;
    FP8Autocast scope(Recipe::delayed());
    m.forward(x);
  }
  EXPECT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_EQ(f.columnwise_data().data(), col_before.data())
      << "column-wise data was freed and rebuilt";
  EXPECT_TRUE(f.columnwise_data().shares_storage(col_before));

  std::unique_ptr<LayerNormMLP> built_for_inference;
  {
    autograd::NoGradGuard no_grad;
    built_for_inference = std::make_unique<LayerNormMLP>(64, 128, fp8_primary());
  }
  built_for_inference->to(device());
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
  const auto& made = dynamic_cast<const Float8Tensor&>(*built_for_inference->fc1_weight().fp8);
  EXPECT_EQ(made.columnwise_data().device(), device());
  EXPECT_TRUE(autograd::grad(xx).defined());
}

// Behaviour 1 for the other FP8 modules: after each one's backward, nothing it saved is held.
TEST_P(MemoryBehaviour, LinearAndLayerNormLinearHoldNoSavedBytesAfterTheirBackward) {
  Linear lin(64, 64, {});
  LayerNormLinear lnl(64, 64, {});
  lin.to(device());
  lnl.to(device());
  const int64_t base = saved_bytes();
  Tensor x = leaf({32, 64}, 20);
  Tensor y;
  int64_t lnl_held = 0;
  {
    FP8Autocast scope(Recipe::delayed());
    Tensor h = lnl.forward(x);
    lnl_held = saved_bytes() - base;
    y = lin.forward(h);
  }
  const int64_t held = saved_bytes() - base;
  EXPECT_GT(held, lnl_held);
  EXPECT_GT(held, 0);
  std::vector<std::pair<std::string, int64_t>> after;
  autograd::set_node_observer(
      [&](const char* name) { after.emplace_back(name, saved_bytes() - base); });
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
  EXPECT_EQ(saved_bytes(), base);
}

// Recompute is the block's memory option: bit-identical without FP8, the same FP8 values as the
// forward's with it, and under FP8 fewer saved bytes than the plain block.
TEST_P(MemoryBehaviour, RecomputeIsBitIdenticalWithoutFp8AndWithinTolWithFp8) {
  const Tensor x = random({32, 64}, 3);
  const Tensor g = random({32, 64}, 4);
  LayerNormMLPOptions plain, again;
  again.recompute = Recompute::kYes;
  LayerNormMLP a(64, 128, plain), b(64, 128, again);  // same seeds: same weights
  a.to(device());
  b.to(device());
  const Result ra = run_mlp(a, x, g, nullptr), rb = run_mlp(b, x, g, nullptr);
  EXPECT_EQ(ra.y, rb.y);
  EXPECT_EQ(ra.dx, rb.dx);
  EXPECT_EQ(ra.dw1, rb.dw1);
  EXPECT_EQ(ra.dw2, rb.dw2);
  const Recipe delayed = Recipe::delayed();
  // Two FP8 steps each, so the second runs on updated scales (the recompute must reuse the
  // forward's, not the ones the scope exit wrote).
  Result fa, fb;
  for (int step = 0; step < 2; ++step) {
    fa = run_mlp(a, x, g, &delayed);
    fb = run_mlp(b, x, g, &delayed);
  }
  EXPECT_EQ(fa.y, fb.y);
  EXPECT_EQ(fa.dx, fb.dx) << "recomputed FP8 values differ from the forward's";
  EXPECT_EQ(fa.dw1, fb.dw1);
  // The plain block keeps fc1's f32 output and the FP8 norm output and activation; the
  // recomputing one keeps only its inputs and the weights (fc1's with both usages).
  const int64_t plain_saved = saved_by_forward(a, x, delayed);
  const int64_t recompute_saved = saved_by_forward(b, x, delayed);
  EXPECT_GT(recompute_saved, 0);
  EXPECT_LT(recompute_saved, plain_saved);
}

// ---- bugs found in review, each failing on the code before its fix ----

class Regression : public test::DeviceTest {};
OCTET_DEVICE_TESTS(Regression);

// Recompute under FP8 with a retained graph: the second backward recomputes again and needs the
// weight's row-wise data, so the first backward must not drop it. Current scaling keeps no state
// between the passes, so both give the same gradient bit for bit (under delayed scaling the first
// pass's end updates the gradient scales the second uses).
TEST_P(Regression, RecomputeBackwardTwiceWithRetainedGraph) {
  LayerNormMLPOptions o;
  o.recompute = Recompute::kYes;
  LayerNormMLP m(64, 128, o);
  m.to(device());
  Tensor x = leaf({32, 64}, 2);
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

// MXFP8 primary weights: built without gradients (row-wise only), then trained: the column-wise
// data is requantized from the f32 master, and the optimizer step requantizes the weight.
TEST_P(Regression, Mxfp8PrimaryWeightsTrainFromRowwiseOnly) {
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::mxfp8();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  std::unique_ptr<LayerNormMLP> built;
  {
    autograd::NoGradGuard no_grad;  // built for inference: row-wise data only, no f32 copy
    built = std::make_unique<LayerNormMLP>(64, 128, o);
  }
  LayerNormMLP& m = *built;
  m.to(device());
  ASSERT_FALSE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  Optimizer opt(m.parameters(), {});  // built after the move
  const std::vector<float> before = ops::dequantize(*m.fc1_weight().fp8, DType::kF32).to_floats();
  Tensor x = leaf({32, 64}, 5);
  Tensor y;
  {
    FP8Autocast scope(Recipe::mxfp8());
    y = m.forward(x);
  }
  autograd::backward(autograd::sum(y));
  EXPECT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_EQ(m.fc1_weight().fp8->device(), device());
  EXPECT_TRUE(autograd::grad(x).defined());
  opt.step(1e-2f);
  EXPECT_NE(ops::dequantize(*m.fc1_weight().fp8, DType::kF32).to_floats(), before);
}

// The Llama architecture's new parts (rotary positions, grouped-query heads, an untied head) keep
// the contract: a dropped forward frees all it saved and touches no weight, a backward leaves
// nothing saved, and a model made in inference mode holds row-wise FP8 weights only and saves
// nothing in its forward.
GPTConfig llama_gpt() { return test::small_llama(Recipe::delayed(), FP8PrimaryWeights::kYes); }

TEST_P(MemoryBehaviour, LlamaGptFreesWhatItSavedAndItsInferenceFormSavesNothing) {
  GPT model(llama_gpt());
  model.to(device());
  Tensor ids = Tensor::empty({4, 16}, DType::kI32), targets = Tensor::empty({4, 16}, DType::kI32);
  for (int64_t i = 0; i < 64; ++i) {
    ids.data_as<int32_t>()[i] = static_cast<int32_t>(i * 5 % 16);
    targets.data_as<int32_t>()[i] = static_cast<int32_t>((i * 5 + 1) % 16);
  }
  std::vector<std::vector<float>> before;
  for (const auto& [name, t] : model.state_dict()) before.push_back(t.to_floats());
  const int64_t base = saved_bytes();
  {
    Tensor loss;
    {
      FP8Autocast scope(Recipe::delayed(), FP8Enabled::kYes);
      loss = model.loss(ids, targets);
    }
    EXPECT_GT(saved_bytes(), base);
  }  // dropped unused
  EXPECT_EQ(saved_bytes(), base);
  size_t i = 0;
  for (const auto& [name, t] : model.state_dict()) {
    if (name.find("fp8_meta") == std::string::npos) {
      EXPECT_EQ(t.to_floats(), before[i]) << name;
    }
    ++i;
  }
  Tensor loss;
  {
    FP8Autocast scope(Recipe::delayed());
    loss = model.loss(ids, targets);
  }
  autograd::backward(loss);
  EXPECT_EQ(saved_bytes(), base);

  std::unique_ptr<GPT> infer;
  {
    autograd::InferenceModeGuard guard;
    infer = std::make_unique<GPT>(llama_gpt());
  }
  infer->to(device());
  int fp8_weights = 0;
  for (const Parameter& p : infer->parameters()) {
    if (!p.is_fp8()) continue;
    ++fp8_weights;
    EXPECT_FALSE((*p.fp8)->has(Usage::kColumnwise)) << p.name;
  }
  EXPECT_EQ(fp8_weights, 4);  // qkv, proj, fc1, fc2 of the one layer
  {
    autograd::InferenceModeGuard guard;
    FP8Autocast scope(Recipe::delayed());
    infer->forward(ids);
    EXPECT_EQ(saved_bytes(), base);
  }
}

}  // namespace
}  // namespace octet::modules
