// The FP8 modules on CUDA against the same modules on the CPU: Linear, LayerNormLinear and
// LayerNormMLP built twice from one seed, one moved with Module::to, run forward and backward
// under each recipe on the same input, and compared (output, input gradient, every parameter's
// gradient); the memory contract on the device (nothing saved after backward, inference-mode FP8
// weights without column-wise data); and a short GPT training run on the GPU that learns and
// tracks the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

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
#include "runtime/memory.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/sort_task.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::on_cpu;
using test::on_gpu;

// Both backends cast the same values with the same rule. Where an input of a cast differs in its
// last f32 bits between them (a norm output, a GEMM summed in another order, a delayed scale
// computed from such an amax), an element can land on the neighbouring FP8 value: one e5m2 step
// (2^-2 relative) at most, which moves each result it feeds by a fraction of one term of its sum.
// A floor of 2^-5 of the tensor's largest magnitude and 2^-3 relative bound that with room, and
// still fail a wrong layout, scale or usage, which move results by their own size.
::testing::AssertionResult fp8_close(const Tensor& got, const Tensor& want) {
  if (!got.defined() || !want.defined()) {
    return ::testing::AssertionFailure()
           << "undefined: got " << got.defined() << ", want " << want.defined();
  }
  if (!got.device().is_cuda()) return ::testing::AssertionFailure() << "got " << got;
  double largest = 0;
  for (float v : on_cpu(want).to_floats()) largest = std::max(largest, std::fabs(double{v}));
  return test::close_to(got, want, {std::ldexp(largest, -5), 0.125});
}

// One forward + backward: the output, the input's gradient and each parameter's gradient (by
// name), left on the module's device; gradients are dropped afterwards.
struct Result {
  Tensor y, dx;
  std::vector<std::pair<std::string, Tensor>> grads;
};

template <typename M>
Result run(M& m, const Tensor& x_in, const Tensor& g, const Recipe& recipe) {
  Tensor x = x_in.clone();
  autograd::set_requires_grad(x);
  Tensor y = test::with_fp8(&recipe, [&] { return m.forward(x); });
  autograd::backward(y, g);
  Result r{y, autograd::grad(x), {}};
  for (const Parameter& p : m.parameters()) {
    r.grads.emplace_back(p.name, autograd::grad(*p.tensor));
    autograd::zero_grad(*p.tensor);
  }
  return r;
}

// How results are compared: fp8_close where an input of a cast may differ in its last bits
// between the backends; kSameBytes where every cast sees the same values (so the FP8 bytes are
// equal) and only how the GEMMs and reductions sum differs: f32 parity where they sum in f32 (the
// emulation build), else the FP8 tensor-core row of the GEMM tolerance (cuda_test_util.h) for
// sums of up to kMaxK terms, taken against the largest magnitude of the result (these random
// products cancel, so an element's own sum of |terms| is several times the element).
enum class Match : uint8_t { kFp8Close, kSameBytes };
constexpr int64_t kMaxK = 96;

::testing::AssertionResult matches(const Tensor& got, const Tensor& want, Match match) {
  if (match == Match::kFp8Close) return fp8_close(got, want);
  if (!test::fp8_tensor_cores()) {
    return test::close_to(got, want, test::parity_tolerance(DType::kF32));
  }
  double largest = 0;
  for (float v : on_cpu(want).to_floats()) largest = std::max(largest, std::fabs(double{v}));
  const double bound = test::gemm_accumulation_bound(true, kMaxK);
  return test::close_to(got, want, {bound * largest, bound});
}

void expect_match(const Result& gpu, const Result& cpu, const std::string& what,
                  Match match = Match::kFp8Close) {
  EXPECT_TRUE(matches(gpu.y, cpu.y, match)) << what << ": y";
  EXPECT_TRUE(matches(gpu.dx, cpu.dx, match)) << what << ": dx";
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size()) << what;
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    EXPECT_EQ(gpu.grads[i].first, cpu.grads[i].first) << what;
    EXPECT_TRUE(matches(gpu.grads[i].second, cpu.grads[i].second, match))
        << what << ": gradient of " << cpu.grads[i].first;
  }
}

const std::vector<Recipe> kRecipes = {Recipe::delayed(), Recipe::current(), Recipe::mxfp8()};
// The block-scaled recipes, whose casts are stateless (NVFP4's stochastic rounding draws from
// each slot's own stream, the same on both modules built from one seed).
const std::vector<Recipe> kBlockRecipes = {Recipe::blockwise(),
                                           Recipe::blockwise(FP8Format::kHybrid), Recipe::nvfp4()};

// Builds the module twice from the same seed, moves one to the GPU and compares two steps (the
// second runs on delayed scaling's updated scales).
template <typename M, typename Make>
void compare_module(Make make, const Shape& in_shape, const Shape& out_shape,
                    const std::vector<Recipe>& recipes = kRecipes, Match match = Match::kFp8Close,
                    DType dtype = DType::kF32) {
  for (const Recipe& recipe : recipes) {
    SCOPED_TRACE(describe(recipe));
    std::unique_ptr<M> cpu = make(), gpu = make();
    gpu->to(test::gpu());
    EXPECT_EQ(gpu->device(), test::gpu());
    for (const Parameter& p : gpu->parameters()) {
      EXPECT_TRUE(p.tensor->device().is_cuda()) << p.name;
    }
    for (int step = 0; step < 2; ++step) {
      const Tensor x = test::random_tensor(in_shape, dtype, 10 + static_cast<uint64_t>(step));
      const Tensor g = test::random_tensor(out_shape, dtype, 20 + static_cast<uint64_t>(step));
      const Result want = run(*cpu, x, g, recipe);
      const Result got = run(*gpu, on_gpu(x), on_gpu(g), recipe);
      // Activations keep the model's dtype on both devices (kernels/nn.h).
      EXPECT_EQ(got.y.dtype(), dtype);
      EXPECT_EQ(got.dx.dtype(), dtype);
      expect_match(got, want, "step " + std::to_string(step), match);
    }
  }
}

TEST(CudaModules, LinearMatchesTheCpuUnderEveryRecipe) {
  OCTET_REQUIRE_CUDA();
  LinearOptions o;
  o.init_std = 0.1f;
  compare_module<Linear>([&] { return std::make_unique<Linear>(64, 96, o); }, {2, 32, 64},
                         {2, 32, 96});
}

TEST(CudaModules, LayerNormLinearMatchesTheCpuUnderEveryRecipe) {
  OCTET_REQUIRE_CUDA();
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRMSNorm}) {
    LayerNormLinearOptions o;
    o.norm.kind = kind;
    o.linear.init_std = 0.1f;
    compare_module<LayerNormLinear>([&] { return std::make_unique<LayerNormLinear>(64, 96, o); },
                                    {2, 32, 64}, {2, 32, 96});
  }
}

TEST(CudaModules, LayerNormMLPMatchesTheCpuUnderEveryRecipe) {
  OCTET_REQUIRE_CUDA();
  for (MLPActivation act : {MLPActivation::kGelu, MLPActivation::kSwiglu}) {
    for (Recompute recompute : {Recompute::kNo, Recompute::kYes}) {
      SCOPED_TRACE(std::string(act == MLPActivation::kGelu ? "gelu" : "swiglu") +
                   (recompute == Recompute::kYes ? ", recompute" : ""));
      LayerNormMLPOptions o;
      o.activation = act;
      o.recompute = recompute;
      o.linear.init_std = 0.1f;
      compare_module<LayerNormMLP>([&] { return std::make_unique<LayerNormMLP>(64, 128, o); },
                                   {2, 32, 64}, {2, 32, 64});
    }
  }
}

// A bf16 block: its norm, activation and GEMM outputs are bf16 on the GPU (the kernels' own bf16
// loads and stores) and on the CPU (f32 rounded once), and every recipe casts those bf16 values.
// The backends' bf16 roundings may differ by an ulp where the f32 results differ in their last
// bits, which fp8_close covers.
TEST(CudaModules, Bf16LayerNormMLPMatchesTheCpuUnderEveryRecipe) {
  OCTET_REQUIRE_CUDA();
  std::vector<Recipe> recipes = kRecipes;
  recipes.insert(recipes.end(), kBlockRecipes.begin(), kBlockRecipes.end());
  LayerNormMLPOptions o;
  o.norm.dtype = DType::kBF16;
  o.linear.dtype = DType::kBF16;
  o.linear.init_std = 0.1f;
  compare_module<LayerNormMLP>([&] { return std::make_unique<LayerNormMLP>(64, 128, o); },
                               {2, 32, 64}, {2, 32, 64}, recipes, Match::kFp8Close, DType::kBF16);
}

// Linear alone: the input and dY are the same on both devices, so every block cast gives the
// CPU's bytes, and the outputs and gradients differ by the f32 sums' order only.
TEST(CudaModules, LinearMatchesTheCpuUnderTheBlockRecipes) {
  OCTET_REQUIRE_CUDA();
  LinearOptions o;
  o.init_std = 0.1f;
  compare_module<Linear>([&] { return std::make_unique<Linear>(64, 96, o); }, {2, 32, 64},
                         {2, 32, 96}, kBlockRecipes, Match::kSameBytes);
}

// LayerNormMLP: the norm's and the activation's outputs may differ in their last bits (the GPU's
// own reductions and math), so an element can take the neighbouring FP8/FP4 value: fp8_close.
TEST(CudaModules, LayerNormMLPMatchesTheCpuUnderTheBlockRecipes) {
  OCTET_REQUIRE_CUDA();
  for (Recompute recompute : {Recompute::kNo, Recompute::kYes}) {
    SCOPED_TRACE(recompute == Recompute::kYes ? "recompute" : "no recompute");
    LayerNormMLPOptions o;
    o.recompute = recompute;
    o.linear.init_std = 0.1f;
    compare_module<LayerNormMLP>([&] { return std::make_unique<LayerNormMLP>(64, 128, o); },
                                 {2, 32, 64}, {2, 32, 64}, kBlockRecipes);
  }
}

// NVFP4's quartet2 method (every GEMM dimension a multiple of 128): the casts and re-casts draw
// from each slot's stream on both devices alike.
TEST(CudaModules, Quartet2MatchesTheCpu) {
  OCTET_REQUIRE_CUDA();
  const std::vector<Recipe> quartet2 = {Recipe::nvfp4_quartet2()};
  LinearOptions o;
  o.init_std = 0.1f;
  compare_module<Linear>([&] { return std::make_unique<Linear>(128, 256, o); }, {2, 64, 128},
                         {2, 64, 256}, quartet2);
  for (Recompute recompute : {Recompute::kNo, Recompute::kYes}) {
    SCOPED_TRACE(recompute == Recompute::kYes ? "recompute" : "no recompute");
    LayerNormMLPOptions m;
    m.recompute = recompute;
    m.activation = MLPActivation::kSwiglu;
    m.linear.init_std = 0.1f;
    compare_module<LayerNormMLP>([&] { return std::make_unique<LayerNormMLP>(128, 256, m); },
                                 {2, 64, 128}, {2, 64, 128}, quartet2);
  }
}

TEST(CudaModules, Fp8PrimaryWeightsMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (const Recipe& recipe : kRecipes) {
    SCOPED_TRACE(describe(recipe));
    LayerNormMLPOptions o;
    o.linear.recipe = recipe;
    o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
    o.linear.init_std = 0.1f;
    LayerNormMLP cpu(64, 128, o), gpu(64, 128, o);
    gpu.to(test::gpu());
    EXPECT_EQ(gpu.fc1_weight().fp8->device(), test::gpu());
    EXPECT_TRUE(test::same_quantized(*gpu.fc1_weight().fp8, *cpu.fc1_weight().fp8));
    const Tensor x = test::random_tensor({64, 64}, DType::kF32, 30);
    const Tensor g = test::random_tensor({64, 64}, DType::kF32, 31);
    expect_match(run(gpu, on_gpu(x), on_gpu(g), recipe), run(cpu, x, g, recipe), "primary");
  }
}

// ---- the memory contract on the device ----

int64_t saved_on(Device device) { return memory_stats(device).current_of(MemTag::kSaved); }

TEST(CudaModuleMemory, NothingIsSavedAfterBackward) {
  OCTET_REQUIRE_CUDA();
  for (const Recipe& recipe : kRecipes) {
    SCOPED_TRACE(describe(recipe));
    LayerNormLinear qkv(64, 64, {});
    Linear proj(64, 64, {});
    LayerNormMLP mlp(64, 256, {});
    qkv.to(test::gpu());
    proj.to(test::gpu());
    mlp.to(test::gpu());
    const int64_t base = saved_on(test::gpu()), host_base = saved_on(Device::cpu());
    Tensor x = on_gpu(test::random_tensor({64, 64}, DType::kF32, 40));
    autograd::set_requires_grad(x);
    Tensor y;
    {
      FP8Autocast scope(recipe);
      y = mlp.forward(proj.forward(qkv.forward(x)));
    }
    EXPECT_GT(saved_on(test::gpu()), base) << "the forward saved nothing on the device";
    EXPECT_EQ(saved_on(Device::cpu()), host_base) << "a GPU forward saved host tensors";
    autograd::backward(autograd::sum(y));
    EXPECT_EQ(saved_on(test::gpu()), base);
    EXPECT_EQ(saved_on(Device::cpu()), host_base);
    EXPECT_TRUE(autograd::grad(x).device().is_cuda());
  }
}

LayerNormMLPOptions fp8_primary() {
  LayerNormMLPOptions o;
  o.linear.recipe = Recipe::delayed();
  o.linear.fp8_primary_weights = FP8PrimaryWeights::kYes;
  return o;
}

TEST(CudaModuleMemory, InferenceModelHoldsNoColumnwiseWeightsOnTheDevice) {
  OCTET_REQUIRE_CUDA();
  auto fp8_bytes = [](LayerNormMLP& m) {
    return static_cast<int64_t>(m.fc1_weight().fp8->nbytes() + m.fc2_weight().fp8->nbytes());
  };
  LayerNormMLP train(64, 128, fp8_primary());
  train.to(test::gpu());
  std::unique_ptr<LayerNormMLP> infer, infer_cpu;
  {
    autograd::InferenceModeGuard guard;
    infer = std::make_unique<LayerNormMLP>(64, 128, fp8_primary());
    infer_cpu = std::make_unique<LayerNormMLP>(64, 128, fp8_primary());
  }
  infer->to(test::gpu());  // moving adds no usage
  EXPECT_FALSE(infer->fc1_weight().fp8->has(Usage::kColumnwise));
  EXPECT_FALSE(infer->fc2_weight().fp8->has(Usage::kColumnwise));
  EXPECT_EQ(infer->fc1_weight().fp8->device(), test::gpu());
  // Per-tensor FP8: the data is half of a training model's (no column-wise copy), plus one
  // 4-byte scale_inv per weight.
  EXPECT_EQ(fp8_bytes(*infer) - 2 * 4, (fp8_bytes(train) - 2 * 4) / 2);

  const Tensor x = test::random_tensor({32, 64}, DType::kF32, 41);
  const int64_t saved = saved_on(test::gpu());
  Tensor y, y_cpu;
  {
    autograd::InferenceModeGuard guard;
    FP8Autocast scope(Recipe::delayed());
    y = infer->forward(on_gpu(x));
    EXPECT_EQ(saved_on(test::gpu()), saved);
    EXPECT_FALSE(infer->fc1_weight().fp8->has(Usage::kColumnwise));
    y_cpu = infer_cpu->forward(x);
  }
  EXPECT_TRUE(fp8_close(y, y_cpu));
}

// ---- a short training run ----

constexpr int64_t kSteps = 40, kAveraged = 8;

// Per-step losses of one run on `device`: AdamW, a short warm-up, an FP8 scope per forward.
std::vector<float> train(const Recipe* recipe, Device device) {
  return test::train_sort_task(recipe, LrSchedule{3e-3f, 5, kSteps, 0.1f}, kSteps, device,
                               [&](const Tensor& loss) { EXPECT_EQ(loss.device(), device); });
}

float mean_of(const std::vector<float>& v, bool last) { return test::mean_of(v, last, kAveraged); }

// Trains on the GPU and on the CPU under `recipe` (nullptr: f32) and compares. One test per
// recipe, so that ctest runs them side by side: in the emulation build each takes about 20 s.
void expect_gpu_training_tracks_the_cpu(const Recipe* recipe) {
  const std::vector<float> gpu = train(recipe, test::gpu());
  const std::vector<float> cpu = train(recipe, Device::cpu());
  ASSERT_EQ(gpu.size(), cpu.size());
  for (float l : gpu) ASSERT_TRUE(std::isfinite(l));
  // The first step: the same weights and batch, only the backends' rounding apart.
  EXPECT_NEAR(gpu[0], cpu[0], 1e-2 * cpu[0]);
  const float start = mean_of(gpu, false), end = mean_of(gpu, true);
  EXPECT_LT(end, 0.8f * start) << "loss " << start << " -> " << end;
  // Training is chaotic in its last bits; the averaged loss still follows the CPU's.
  EXPECT_NEAR(end, mean_of(cpu, true), 0.1f * mean_of(cpu, true));
}

TEST(CudaTraining, GptLossFallsOnTheGpuAndTracksTheCpuInF32) {
  OCTET_REQUIRE_CUDA();
  expect_gpu_training_tracks_the_cpu(nullptr);
}

TEST(CudaTraining, GptLossFallsOnTheGpuAndTracksTheCpuUnderDelayedScaling) {
  OCTET_REQUIRE_CUDA();
  const Recipe recipe = Recipe::delayed();
  expect_gpu_training_tracks_the_cpu(&recipe);
}

TEST(CudaTraining, GptLossFallsOnTheGpuAndTracksTheCpuUnderCurrentScaling) {
  OCTET_REQUIRE_CUDA();
  const Recipe recipe = Recipe::current();
  expect_gpu_training_tracks_the_cpu(&recipe);
}

TEST(CudaTraining, GptLossFallsOnTheGpuAndTracksTheCpuUnderMxfp8) {
  OCTET_REQUIRE_CUDA();
  const Recipe recipe = Recipe::mxfp8();
  expect_gpu_training_tracks_the_cpu(&recipe);
}

}  // namespace
}  // namespace octet::modules
