// What a graph promises between its forward and its backward, tried through the public API as a
// user would: it backwards with the quantizers of the forward that built it (whatever recipe
// runs in between), a weight changed after the forward (a loaded state dict, a write through the
// weight's leaf tensor) is the saved-tensor version error, a retained graph keeps its buffers
// counted as saved, and the FP8 scope's failing update neither terminates nor is lost.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/ops/nn.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "runtime/memory.h"
#include "runtime/parallel.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::same_bits;  // tests/support/test_util.h

LinearOptions seeded(std::optional<Recipe> recipe = std::nullopt,
                     FP8PrimaryWeights primary = FP8PrimaryWeights::kNo) {
  LinearOptions o;
  o.seed = 17;
  o.recipe = std::move(recipe);
  o.fp8_primary_weights = primary;
  return o;
}

// dX of one delayed-scaling forward and backward, optionally with a forward under `between` (a
// different recipe) run after the first forward and before the backward.
Tensor delayed_dx(const Recipe* between) {
  Linear lin(32, 64, seeded());
  Tensor x = test::random_tensor({32, 32}, DType::kF32, 1);
  autograd::set_requires_grad(x);
  Tensor y;
  {
    FP8Autocast scope(Recipe::delayed());
    y = lin.forward(x);
  }
  if (between != nullptr) {
    FP8Autocast scope(*between);
    lin.forward(x);  // rebuilds the module's FP8 state for the other recipe
  }
  autograd::backward(y, test::random_tensor(y.shape(), DType::kF32, 2));
  return autograd::grad(x);
}

TEST(GraphContract, BackwardUsesTheQuantizersOfTheForwardThatBuiltIt) {
  const Tensor want = delayed_dx(nullptr);
  for (const Recipe& other : {Recipe::mxfp8(), Recipe::current()}) {
    Tensor got;
    EXPECT_NO_THROW(got = delayed_dx(&other)) << describe(other);
    EXPECT_TRUE(same_bits(got, want))
        << "dX changed by a " << describe(other) << " forward between the forward and its backward";
  }
}

TEST(GraphContract, AShapeTheRecipeRefusesChangesNothing) {
  Linear lin(32, 48, seeded());  // 48 rows of W: fine per-tensor, not a multiple of 32 (MXFP8)
  Tensor x = test::random_tensor({32, 32}, DType::kF32, 7);
  {
    FP8Autocast scope(Recipe::delayed());
    lin.forward(x);
  }
  const std::vector<float> scale =
      lin.fp8_state().meta()->slot(forward_slot(0, ForwardTensor::kInput)).scale.to_floats();
  const std::string message = test::error_of([&] {
    FP8Autocast scope(Recipe::mxfp8());
    lin.forward(x);
  });
  EXPECT_NE(message.find("Linear weight has shape (48, 32)"), std::string::npos) << message;
  // The delayed state (meta, scales, histories) is untouched by the refused forward.
  EXPECT_EQ(lin.fp8_state().recipe(), Recipe::delayed());
  ASSERT_NE(lin.fp8_state().meta(), nullptr);
  EXPECT_EQ(lin.fp8_state().meta()->slot(forward_slot(0, ForwardTensor::kInput)).scale.to_floats(),
            scale);
}

TEST(GraphContract, LoadingAStateDictBeforeBackwardIsTheVersionError) {
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::mxfp8()}) {
    Linear lin(32, 64, seeded(recipe, FP8PrimaryWeights::kYes));
    LinearOptions other_options = seeded(recipe, FP8PrimaryWeights::kYes);
    other_options.seed = 18;
    Linear other(32, 64, other_options);
    Tensor x = test::random_tensor({32, 32}, DType::kF32, 3);
    autograd::set_requires_grad(x);
    Tensor y;
    {
      FP8Autocast scope(recipe);
      y = lin.forward(x);
    }
    lin.load_state_dict(other.state_dict());
    const std::string message = test::error_of([&] { autograd::backward(autograd::sum(y)); });
    EXPECT_NE(message.find("modified in place after it was saved"), std::string::npos)
        << describe(recipe) << ": " << message;
  }
}

TEST(GraphContract, AWriteThroughTheWeightLeafBeforeBackwardIsTheVersionError) {
  Linear lin(32, 48, seeded(Recipe::delayed(), FP8PrimaryWeights::kYes));
  Tensor x = test::random_tensor({32, 32}, DType::kF32, 4);
  autograd::set_requires_grad(x);
  Tensor y;
  {
    FP8Autocast scope(Recipe::delayed());
    y = lin.forward(x);
  }
  Tensor leaf = lin.weight();  // a handle on the FP8 weight's row-wise data
  Tensor zeros = Tensor::empty(leaf.shape(), leaf.dtype());
  std::memset(zeros.data(), 0, zeros.nbytes());
  leaf.copy_bytes_from(zeros);
  const std::string message = test::error_of([&] { autograd::backward(autograd::sum(y)); });
  EXPECT_NE(message.find("modified in place after it was saved"), std::string::npos) << message;
}

TEST(GraphContract, ARetainedGraphKeepsItsBuffersCountedAsSaved) {
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::mxfp8()}) {
    LayerNormMLPOptions o;
    o.linear.seed = 5;
    LayerNormMLP mlp(64, 128, o);
    Tensor x = test::random_tensor({32, 64}, DType::kF32, 6);
    autograd::set_requires_grad(x);
    const int64_t base = memory_stats().current_of(MemTag::kSaved);
    Tensor y;
    {
      FP8Autocast scope(recipe);
      y = mlp.forward(x);
    }
    const Tensor loss = autograd::sum(y);
    const int64_t saved = memory_stats().current_of(MemTag::kSaved) - base;
    EXPECT_GT(saved, 0);
    autograd::backward(loss, Tensor(), autograd::RetainGraph::kYes);
    EXPECT_EQ(memory_stats().current_of(MemTag::kSaved) - base, saved)
        << describe(recipe) << ": the retained graph still holds every saved buffer";
    autograd::backward(loss);
    EXPECT_EQ(memory_stats().current_of(MemTag::kSaved) - base, 0) << describe(recipe);
  }
}

// A meta whose update throws (a slot tensor of the wrong dtype).
std::shared_ptr<FP8Meta> broken_meta() {
  auto meta = std::make_shared<FP8Meta>(Recipe::delayed(), 1);
  meta->slot(forward_slot(0, ForwardTensor::kInput)).amax_history = Tensor::zeros({4}, DType::kI32);
  return meta;
}

// Grouped-query attention keeps its key and value heads unrepeated for the backward: the node
// holds qkv (B, T, H + 2G, D), the output (B, T, H D) and the log-sum-exps (B, H, T), and no
// repeated (B, T, 3 H D) copy (which the heads repeated before the attention would hold).
TEST(GraphContract, GroupedAttentionSavesItsHeadsUnrepeated) {
  const int64_t B = 2, T = 8, H = 4, G = 1, D = 8;
  Tensor qkv = test::random_tensor({B, T, (H + 2 * G) * D}, DType::kF32, 7);
  autograd::set_requires_grad(qkv);
  const int64_t base = memory_stats().current_of(MemTag::kSaved);
  const Tensor y = autograd::causal_attention(qkv, H, G, 0.35f);
  const int64_t want = 4 * (B * T * (H + 2 * G) * D + B * T * H * D + B * H * T);
  EXPECT_EQ(memory_stats().current_of(MemTag::kSaved) - base, want);
  autograd::backward(autograd::sum(y));
  EXPECT_EQ(memory_stats().current_of(MemTag::kSaved) - base, 0);
}

TEST(GraphContract, AFailingScopeUpdateIsThrownByCloseOrByTheNextScope) {
  auto meta = broken_meta();
  {
    FP8Autocast scope(Recipe::delayed());
    register_fp8_forward(meta);
    EXPECT_NE(test::error_of([&] { scope.close(); }).find("f32"), std::string::npos);
  }  // closed: the destructor does nothing
  EXPECT_EQ(fp8_scope_depth(), 0);
  {
    FP8Autocast scope(Recipe::delayed());
    register_fp8_forward(meta);
  }  // the destructor catches the update's error: no std::terminate
  EXPECT_EQ(fp8_scope_depth(), 0);
  EXPECT_FALSE(fp8_enabled());
  const std::string message = test::error_of([] { FP8Autocast next(Recipe::delayed()); });
  EXPECT_NE(message.find("f32"), std::string::npos) << message;
  EXPECT_NO_THROW(FP8Autocast again(Recipe::delayed()));  // thrown once, not forever
}

TEST(GraphContract, AnErrorInsideAParallelRegionIsThrownToTheCaller) {
  const int threads = num_threads();
  set_num_threads(2);
  int ran = 0;
  const std::string message = test::error_of([&] {
    parallel_for(0, 1000, 1, [&](int64_t lo, int64_t hi) {
      OCTET_CHECK(lo != 0, "chunk [", lo, ", ", hi, ") fails on purpose");
#pragma omp atomic
      ++ran;
    });
  });
  set_num_threads(threads);
  EXPECT_NE(message.find("fails on purpose"), std::string::npos) << message;
  EXPECT_EQ(ran, 1);  // the other chunk finished; the error came back on this thread
}

}  // namespace
}  // namespace octet::modules
