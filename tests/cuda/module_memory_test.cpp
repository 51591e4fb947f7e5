// The memory contract of the module layer on cuda:0: every byte-count test of tests/modules (those
// of tests/autograd that the modules rest on, the engine's release of saved state and quantized
// tensors in the save context, are in engine_memory_test.cpp), run with the modules moved by
// Module::to, the inputs copied to the device and the counts read from memory_stats(cuda:0). The
// caching allocator rounds its blocks, but the tracker counts the requested bytes of live storages,
// so where a CPU test compares bytes exactly the GPU test does too. Each test names its CPU
// original; what differs on the device is said where it is done. One test of its own: the cache's
// reuse of freed blocks across training steps leaves every tag's count where the step found it.
#include <gtest/gtest.h>

#include <cmath>
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
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "modules/optimizer.h"
#include "runtime/cuda.h"
#include "runtime/float8_tensor.h"
#include "runtime/memory.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/memory_test_util.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::bytes_of;
using test::gpu;
using test::gpu_bytes;
using test::gpu_leaf;
using test::gpu_random;
using test::saved_bytes;

// ---- helpers (the shared ones are in memory_test_util.h) ----

// Bytes held for backward on the host (where a run on the device must add none).
int64_t host_saved_bytes() { return memory_stats(Device::cpu()).current_of(MemTag::kSaved); }

// The per-tag live bytes of two snapshots are equal, and so is their total.
void expect_same_current(const MemoryStats& got, const MemoryStats& want, const std::string& what) {
  for (size_t t = 0; t < kNumMemTags; ++t) {
    EXPECT_EQ(got.current[t], want.current[t])
        << what << ": " << mem_tag_name(static_cast<MemTag>(t)) << " bytes";
  }
  EXPECT_EQ(got.total_current, want.total_current) << what;
  EXPECT_EQ(got.live_allocations, want.live_allocations) << what;
}

// One forward + backward of a LayerNormMLP; everything read back to the host (layernorm_mlp_test's
// run(), with x and g on the device).
struct Result {
  std::vector<float> y, dx, dgamma, dw1, dw2;
};

Result run(LayerNormMLP& m, const Tensor& x_in, const Tensor& g, const Recipe* recipe) {
  Tensor x = x_in.clone();
  autograd::set_requires_grad(x);
  Tensor y = test::with_fp8(recipe, [&] { return m.forward(x); });
  EXPECT_TRUE(y.device().is_cuda());
  autograd::backward(y, g);
  Result r{y.to_floats(), autograd::grad(x).to_floats(), autograd::grad(m.norm().gamma).to_floats(),
           autograd::grad(m.fc1_weight().leaf()).to_floats(),
           autograd::grad(m.fc2_weight().leaf()).to_floats()};
  for (const Parameter& p : m.parameters()) autograd::zero_grad(*p.tensor);
  return r;
}

LayerNormMLPOptions fp8_primary() {
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::delayed();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  return o;
}

// Four LayerNormMLP blocks on the device; block i's weights from seed `seed_step * i`.
std::vector<std::unique_ptr<LayerNormMLP>> gpu_stack(uint64_t seed_step) {
  std::vector<std::unique_ptr<LayerNormMLP>> stack;
  for (uint64_t i = 0; i < 4; ++i) {
    LayerNormMLPOptions o;
    o.linear.seed = seed_step * i;
    stack.push_back(std::make_unique<LayerNormMLP>(64, 256, o));
    stack.back()->to(gpu());
  }
  return stack;
}

// ---- tests/modules/layernorm_mlp_test.cpp ----

// MemoryBehaviour.SavedBytesAreZeroAfterEachModulesBackward
TEST(CudaMemoryBehaviour, SavedBytesAreZeroAfterEachModulesBackward) {
  OCTET_REQUIRE_CUDA();
  std::vector<std::unique_ptr<LayerNormMLP>> stack = gpu_stack(10);
  const Recipe delayed = Recipe::delayed();
  const int64_t base = saved_bytes(), host_base = host_saved_bytes();
  Tensor x = gpu_leaf({64, 64}, 7);
  Tensor h = x;
  {
    FP8Autocast scope(delayed);
    for (auto& m : stack) h = m->forward(h);
  }
  EXPECT_GT(saved_bytes() - base, 0);
  EXPECT_EQ(host_saved_bytes(), host_base) << "a forward on the device saved host tensors";
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
  EXPECT_TRUE(autograd::grad(x).device().is_cuda());
}

// MemoryBehaviour.PeakIsLowerThanKeepingRestoredObjectsUntilTheGraphDies
TEST(CudaMemoryBehaviour, PeakIsLowerThanKeepingRestoredObjectsUntilTheGraphDies) {
  OCTET_REQUIRE_CUDA();
  auto peak_of_step = [] {
    std::vector<std::unique_ptr<LayerNormMLP>> stack = gpu_stack(0);  // all from seed 0, as on CPU
    Tensor x = gpu_leaf({128, 64}, 8);
    reset_peak_memory(gpu());
    const int64_t start = memory_stats(gpu()).total_current;
    Tensor h = x;
    {
      FP8Autocast scope(Recipe::delayed());
      for (auto& m : stack) h = m->forward(h);
    }
    EXPECT_GT(saved_bytes(), 0);
    autograd::backward(autograd::sum(h));
    return memory_stats(gpu()).total_peak - start;
  };
  // The first GEMM on a device allocates cuBLASLt's workspace (32 MiB, kept for the process):
  // one unmeasured step first, or the first measured peak would carry it and the other not.
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

// MemoryBehaviour.DroppedForwardLeavesFp8PrimaryWeightsIntactAndChangesNothing
TEST(CudaMemoryBehaviour, DroppedForwardLeavesFp8PrimaryWeightsIntactAndChangesNothing) {
  OCTET_REQUIRE_CUDA();
  const Tensor x = gpu_random({32, 64}, 9);
  const Tensor g = gpu_random({32, 64}, 10);
  LayerNormMLP a(64, 128, fp8_primary()), b(64, 128, fp8_primary());
  a.to(gpu());
  b.to(gpu());
  ASSERT_EQ(a.fc1_weight().fp8->device(), gpu());
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
  const Result ra = run(a, x, g, &delayed);
  const Result rb = run(b, x, g, &delayed);
  EXPECT_EQ(ra.y, rb.y);
  EXPECT_EQ(ra.dx, rb.dx);
}

// MemoryBehaviour.InitialWeightCastUsesAScratchAmaxAndTheStepRecordsTheNewWeight
TEST(CudaMemoryBehaviour, InitialWeightCastUsesAScratchAmaxAndTheStepRecordsTheNewWeight) {
  OCTET_REQUIRE_CUDA();
  LayerNormMLP m(64, 128, fp8_primary());
  m.to(gpu());
  FP8Meta& meta = *m.fp8_state().meta();
  for (int gemm = 0; gemm < 2; ++gemm) {
    const Tensor& history = meta.slot(forward_slot(gemm, ForwardTensor::kWeight)).amax_history;
    ASSERT_TRUE(history.device().is_cuda()) << "the FP8 meta did not move with the module";
    for (float v : history.to_floats()) {
      ASSERT_EQ(v, 0.f) << "initial cast wrote the weight slot of GEMM " << gemm;
    }
  }
  Optimizer opt(m.parameters(), {});  // built after the move: AdamW over the moved masters
  const Tensor x = gpu_random({32, 64}, 11);
  const Tensor g = gpu_random({32, 64}, 12);
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
    EXPECT_TRUE(master.device().is_cuda()) << name;
    const float want = ops::amax(master).item();
    EXPECT_GT(want, 0.f) << name;
    const float got =
        meta.slot(forward_slot(gemm, ForwardTensor::kWeight)).amax_history.to_floats()[0];
    EXPECT_EQ(got, want) << name;
  }
}

// MemoryBehaviour.InferenceModelHoldsNoColumnwiseWeightsAndMatchesTraining
TEST(CudaMemoryBehaviour, InferenceModelHoldsNoColumnwiseWeightsAndMatchesTraining) {
  OCTET_REQUIRE_CUDA();
  const int64_t base = gpu_bytes(MemTag::kWeights);
  auto fp8_bytes = [](LayerNormMLP& m) {
    return static_cast<int64_t>(m.fc1_weight().fp8->nbytes() + m.fc2_weight().fp8->nbytes());
  };
  LayerNormMLP train(64, 128, fp8_primary());
  train.to(gpu());
  const int64_t train_weights = gpu_bytes(MemTag::kWeights) - base;
  const int64_t training_fp8 = fp8_bytes(train);
  std::unique_ptr<LayerNormMLP> infer;
  {
    autograd::InferenceModeGuard guard;
    infer = std::make_unique<LayerNormMLP>(64, 128, fp8_primary());
  }
  infer->to(gpu());  // moving adds no usage
  const int64_t infer_weights = gpu_bytes(MemTag::kWeights) - base - train_weights;
  const int64_t inference_fp8 = fp8_bytes(*infer);
  // Per-tensor FP8: data is half (no column-wise copy); each holds one 4-byte scale_inv.
  EXPECT_EQ(inference_fp8 - 2 * 4, (training_fp8 - 2 * 4) / 2);
  EXPECT_FALSE(infer->fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_FALSE(infer->fc2_weight().fp8->has(Usage::kColumnwise));
  EXPECT_EQ(infer->fc1_weight().fp8->device(), gpu());
  EXPECT_GT(gpu_bytes(MemTag::kWeights), base);
  // The same on the device's counter: per weight (128 x 64 values) the training model also
  // holds the column-wise copy (1 byte a value) and the f32 value it was cast from (its initial
  // master, a weight until an optimizer adopts it); norm and biases are the same in both.
  EXPECT_EQ(train_weights - infer_weights, 2 * 128 * 64 * (1 + 4));

  const Tensor x = gpu_random({32, 64}, 13);
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
  EXPECT_TRUE(yi.device().is_cuda());
  EXPECT_EQ(yi.to_floats(), yt.to_floats()) << "same weights, same scales: same bits";
}

// MemoryBehaviour.ValidationUnderNoGradKeepsColumnwiseAndMissingColumnwiseIsMadeOnDemand
TEST(CudaMemoryBehaviour, ValidationUnderNoGradKeepsColumnwiseAndMissingColumnwiseIsMadeOnDemand) {
  OCTET_REQUIRE_CUDA();
  LayerNormMLP m(64, 128, fp8_primary());
  m.to(gpu());
  const Tensor x = gpu_random({32, 64}, 14);
  ASSERT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  const auto& f = dynamic_cast<const Float8Tensor&>(*m.fc1_weight().fp8);
  ASSERT_TRUE(f.columnwise_data().device().is_cuda());
  // A handle on the column-wise storage: the caching allocator would hand a freed block of the
  // same size straight back to a rebuild, so without it a free-then-rebuild could keep the
  // pointer. Held here, a rebuilt copy must live elsewhere.
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
  built_for_inference->to(gpu());
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
  EXPECT_TRUE(made.columnwise_data().device().is_cuda());
  EXPECT_TRUE(autograd::grad(xx).defined());
}

// MemoryBehaviour.LinearAndLayerNormLinearHoldNoSavedBytesAfterTheirBackward
TEST(CudaMemoryBehaviour, LinearAndLayerNormLinearHoldNoSavedBytesAfterTheirBackward) {
  OCTET_REQUIRE_CUDA();
  Linear lin(64, 64, {});
  LayerNormLinear lnl(64, 64, {});
  lin.to(gpu());
  lnl.to(gpu());
  const int64_t base = saved_bytes();
  Tensor x = gpu_leaf({32, 64}, 20);
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

// Saved bytes of one FP8 forward of m (the graph alive), freed on return.
int64_t saved_by_forward(LayerNormMLP& m, const Tensor& x_in, const Recipe& recipe) {
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

// LayerNormMLP.RecomputeIsBitIdenticalWithoutFp8AndWithinTolWithFp8 (recompute is the memory
// option of the block; added here: under FP8 it does save fewer bytes than the plain block)
TEST(CudaMemoryBehaviour, RecomputeIsBitIdenticalWithoutFp8AndWithinTolWithFp8) {
  OCTET_REQUIRE_CUDA();
  const Tensor x = gpu_random({32, 64}, 3);
  const Tensor g = gpu_random({32, 64}, 4);
  LayerNormMLPOptions plain, again;
  again.recompute = Recompute::kYes;
  LayerNormMLP a(64, 128, plain), b(64, 128, again);  // same seeds: same weights
  a.to(gpu());
  b.to(gpu());
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
  // The plain block keeps fc1's f32 output and the FP8 norm output and activation; the
  // recomputing one keeps only its inputs and the weights (fc1's with both usages).
  const int64_t plain_saved = saved_by_forward(a, x, delayed);
  const int64_t recompute_saved = saved_by_forward(b, x, delayed);
  EXPECT_GT(recompute_saved, 0);
  EXPECT_LT(recompute_saved, plain_saved);
}

// ---- tests/modules/regression_test.cpp ----

// Regression.RecomputeBackwardTwiceWithRetainedGraph: the second backward recomputes again and
// needs the weight's row-wise data, so the first must not drop it.
TEST(CudaMemoryBehaviour, RecomputeBackwardTwiceWithRetainedGraph) {
  OCTET_REQUIRE_CUDA();
  LayerNormMLPOptions o;
  o.recompute = Recompute::kYes;
  LayerNormMLP m(64, 128, o);
  m.to(gpu());
  Tensor x = gpu_leaf({32, 64}, 2);
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

// Regression.Mxfp8PrimaryWeightsTrainFromRowwiseOnly: built without gradients (row-wise only),
// then trained: the column-wise data is requantized on demand, the step requantizes the weight.
TEST(CudaMemoryBehaviour, Mxfp8PrimaryWeightsTrainFromRowwiseOnly) {
  OCTET_REQUIRE_CUDA();
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::mxfp8();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  std::unique_ptr<LayerNormMLP> built;
  {
    autograd::NoGradGuard no_grad;  // built for inference: row-wise data only, no f32 copy
    built = std::make_unique<LayerNormMLP>(64, 128, o);
  }
  LayerNormMLP& m = *built;
  m.to(gpu());
  ASSERT_FALSE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  Optimizer opt(m.parameters(), {});  // built after the move
  const std::vector<float> before = ops::dequantize(*m.fc1_weight().fp8, DType::kF32).to_floats();
  Tensor x = gpu_leaf({32, 64}, 5);
  Tensor y;
  {
    FP8Autocast scope(Recipe::mxfp8());
    y = m.forward(x);
  }
  autograd::backward(autograd::sum(y));
  EXPECT_TRUE(m.fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_EQ(m.fc1_weight().fp8->device(), gpu());
  EXPECT_TRUE(autograd::grad(x).defined());
  opt.step(1e-2f);
  EXPECT_NE(ops::dequantize(*m.fc1_weight().fp8, DType::kF32).to_floats(), before);
}

// ---- the caching allocator under training ----

// (rows, cols) i32 ids in [0, vocab), on the device.
Tensor gpu_ids(int64_t rows, int64_t cols, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::kI32);
  Generator gen(seed);
  auto* p = t.data_as<int32_t>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    p[i] = static_cast<int32_t>(gen.next_u32() % static_cast<uint32_t>(vocab));
  }
  return t.to(gpu());
}

// Freed blocks go to the cache and the next step's tensors get them back (no new cudaMalloc once
// the steps repeat); the tracker follows the tensors, not the blocks, so after every step each
// tag holds what it held after the previous one, and a repeated step reaches the same peaks.
TEST(CudaMemoryBehaviour, CachedBlockReuseLeavesEveryTagWhereTheStepFoundIt) {
  OCTET_REQUIRE_CUDA();
  GPTConfig c;
  c.vocab_size = 16;
  c.max_seq_len = 16;
  c.n_layer = 1;
  c.d_model = 32;
  c.n_head = 4;
  c.seed = 3;
  c.recipe = Recipe::delayed();  // FP8 metas from construction, moved with the model
  GPT gpt(c);
  gpt.to(gpu());
  Optimizer opt(gpt.parameters(), {});
  // One training step; everything it makes but the new parameter values and the optimizer's
  // state dies before it returns.
  auto step = [&](uint64_t seed) {
    const Tensor ids = gpu_ids(2, 16, c.vocab_size, seed);
    const Tensor targets = gpu_ids(2, 16, c.vocab_size, seed + 100);
    Tensor loss;
    {
      FP8Autocast scope(*c.recipe);
      loss = gpt.loss(ids, targets);
    }
    autograd::backward(loss);
    opt.step(1e-3f);
    opt.zero_grad();
    return loss.item();
  };
  std::vector<MemoryStats> after;
  std::vector<cuda::CacheStats> cache;
  for (uint64_t s = 0; s < 3; ++s) {
    reset_peak_memory(gpu());
    const MemoryStats start = memory_stats(gpu());
    EXPECT_TRUE(std::isfinite(step(50 + s))) << "step " << s + 1;
    after.push_back(memory_stats(gpu()));
    cache.push_back(cuda::cache_stats(gpu()));
    // The step made and freed activations and saved state: blocks for the next one to reuse.
    EXPECT_GT(after.back().peak_of(MemTag::kActivations), start.current_of(MemTag::kActivations));
    EXPECT_GT(after.back().peak_of(MemTag::kSaved), start.current_of(MemTag::kSaved));
    EXPECT_GT(cache.back().cached_bytes, 0u) << "step " << s + 1;
  }
  // Step 1 may allocate what lives on (the GEMM workspace, optimizer moments); from then on
  // nothing accumulates under any tag.
  expect_same_current(after[1], after[0], "step 2 vs step 1");
  expect_same_current(after[2], after[1], "step 3 vs step 2");
  // Steps 2 and 3 start from the same live tensors and make the same requests in the same order:
  // step 3 is served from the blocks step 2 left in the cache, and peaks where step 2 did.
  EXPECT_EQ(cache[2].cuda_mallocs, cache[1].cuda_mallocs) << "step 3 needed the driver";
  EXPECT_EQ(cache[2].reserved_bytes, cache[1].reserved_bytes);
  for (size_t t = 0; t < kNumMemTags; ++t) {
    EXPECT_EQ(after[2].peak[t], after[1].peak[t])
        << mem_tag_name(static_cast<MemTag>(t)) << " peak, step 3 vs step 2";
  }
  EXPECT_EQ(after[2].total_peak, after[1].total_peak);
}

}  // namespace
}  // namespace octet::modules
