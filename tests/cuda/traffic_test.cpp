// Device traffic of a layer training step as the CUDA emulation build records it
// (runtime/device_traffic.h): the GEMM FLOPs are exactly the layer's, the FP8 recipes run their
// GEMMs in FP8 where Hopper has the format, and a step's launches and bytes are the same from one
// step to the next. These are counts, not timings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "kernels/fp8_per_tensor.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/optimizer.h"
#include "runtime/device_traffic.h"
#include "runtime/float8_tensor.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"

namespace octet::modules {
namespace {

constexpr int64_t kD = 128, kHeads = 4, kFfn = 512, kSeq = 64, kBatch = 2;
constexpr int64_t kTokens = kBatch * kSeq;

struct LayerStep {
  GPTConfig config;
  std::unique_ptr<TransformerLayer> layer;
  std::unique_ptr<Optimizer> optimizer;
  Tensor x, grad;
  std::optional<Recipe> recipe;

  explicit LayerStep(std::optional<Recipe> r) : recipe(std::move(r)) {
    config.d_model = kD;
    config.n_head = kHeads;
    config.ffn = kFfn;
    config.max_seq_len = kSeq;
    config.dtype = DType::kBF16;
    config.recipe = recipe;
    config.seed = 3;
    layer = std::make_unique<TransformerLayer>(config, config.seed);
    layer->to(test::gpu());
    optimizer = std::make_unique<Optimizer>(layer->parameters(), OptimizerOptions{});
    Generator gen(13);
    auto random = [&] {
      Tensor t = Tensor::empty({kBatch, kSeq, kD}, DType::kF32);  // (B, T, C)
      gen.fill_normal(t, 0.f, 1.f);
      return ops::cast(t, DType::kBF16).to(test::gpu());
    };
    x = random();
    grad = random();
    autograd::set_requires_grad(x);
  }

  void run() {
    Tensor y;
    {
      std::optional<FP8Autocast> scope;
      if (recipe) scope.emplace(*recipe);
      y = layer->forward(x, FirstMicrobatch::kUnset);
    }
    autograd::backward(y, grad);
    optimizer->step(1e-4f);
    optimizer->zero_grad();
    autograd::zero_grad(x);
  }

  DeviceTraffic recorded() {
    TrafficRecording recording;
    run();
    return recording.stop();
  }
};

struct Case {
  std::string name;
  std::optional<Recipe> recipe;
  bool fp8_gemms;  // every GEMM with FP8 operands (else the recipe expands to bf16 on Hopper)
};

std::vector<Case> cases() {
  return {{"bf16", std::nullopt, false},        {"delayed", Recipe::delayed(), true},
          {"current", Recipe::current(), true}, {"blockwise", Recipe::blockwise(), true},
          {"mxfp8", Recipe::mxfp8(), false},    {"nvfp4", Recipe::nvfp4(), false},
          {"rowwise", Recipe::rowwise(), false}};
}

int64_t launches_of(const DeviceTraffic& t, const std::string& kernel) {
  for (const KernelTraffic& k : t.kernels) {
    if (k.kernel == kernel) return k.launches;
  }
  return 0;
}

std::string summary(const DeviceTraffic& t) {
  std::string s = std::to_string(t.launches) + " launches, " + std::to_string(t.gemm_calls) +
                  " GEMMs, " + std::to_string(t.non_gemm_bytes()) + " non-GEMM bytes:";
  for (const KernelTraffic& k : t.kernels) {
    s += " " + k.kernel + " x" + std::to_string(k.launches) + " (" + std::to_string(k.bytes_read) +
         " r, " + std::to_string(k.bytes_written) + " w)";
  }
  return s;
}

TEST(CudaTraffic, LayerStepCountsAreTheLayersAndRepeat) {
  OCTET_REQUIRE_CUDA();
  if (!device_traffic_available()) GTEST_SKIP() << "device traffic: the CUDA emulation build only";
  // QKV, projection, fc1 and fc2: forward, dgrad and wgrad, 2 m n k each (attention is not a
  // cuBLASLt GEMM).
  const int64_t forward = 2 * kTokens * (3 * kD * kD + kD * kD + 2 * kD * kFfn);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    LayerStep step(c.recipe);
    for (int i = 0; i < 4; ++i) step.run();  // FP8 state, caches and workspaces settled
    const DeviceTraffic first = step.recorded();
    const DeviceTraffic second = step.recorded();
    EXPECT_EQ(first.gemm_flops, 3 * forward);
    EXPECT_EQ(first.gemm_fp8_flops, c.fp8_gemms ? 3 * forward : 0);
    EXPECT_GT(first.launches, 0);
    EXPECT_GT(first.non_gemm_bytes(), 0);
    EXPECT_EQ(first.copy_host_bytes, second.copy_host_bytes);
    // The same work from one step to the next: the same launches and pages read; the pages
    // written differ only where a cast's saturation and flush counters are added to, which
    // happens when a count is not zero (one page a launch at most).
    EXPECT_EQ(first.gemm_bytes, second.gemm_bytes);
    EXPECT_EQ(first.launches, second.launches);
    ASSERT_EQ(first.kernels.size(), second.kernels.size()) << summary(first) << "\n"
                                                           << summary(second);
    for (size_t i = 0; i < first.kernels.size(); ++i) {
      const KernelTraffic &a = first.kernels[i], &b = second.kernels[i];
      SCOPED_TRACE(a.kernel);
      EXPECT_EQ(a.kernel, b.kernel);
      EXPECT_EQ(a.launches, b.launches);
      EXPECT_EQ(a.bytes_read, b.bytes_read);
      EXPECT_LE(std::abs(a.bytes_written - b.bytes_written), a.launches * 4096);
    }
    // Each per-tensor cast writes its tensor's scale_inv itself; the one-thread reciprocal runs
    // only for the two LayerNorms' fused casts of delayed scaling.
    EXPECT_EQ(launches_of(first, "reciprocal_kernel"), c.name == "delayed" ? 2 : 0)
        << summary(first);
    if (c.name == "blockwise") {
      // Every 1x128 cast (the four GEMMs' inputs and output gradients) writes both directions
      // from one read of its tensor; only the four 128x128 weights' column-wise casts transpose.
      EXPECT_EQ(launches_of(first, "blockwise_both_kernel<In, kE4M3>"), 8) << summary(first);
      EXPECT_EQ(launches_of(first, "blockwise_1d_kernel<In, kE4M3>"), 0) << summary(first);
      EXPECT_EQ(launches_of(first, "transpose_kernel<T>"), 4) << summary(first);
    }
    RecordProperty(c.name, summary(first));
  }
}

// Each recipe's step against the fused design's floor (layer_step_floor_bytes) and its launches.
// The bounds are today's multiples of the floor at this shape, rounded up: a change that moves
// more bytes fails here. The target is 1.15x for every recipe; what is left is in docs/cuda.md.
TEST(CudaTraffic, LayerStepBytesStayWithinTheirMultipleOfTheFusedFloor) {
  OCTET_REQUIRE_CUDA();
  if (!device_traffic_available()) GTEST_SKIP() << "device traffic: the CUDA emulation build only";
  struct Bound {
    double floor_multiple;
    int64_t launches;
  };
  const std::map<std::string, Bound> bounds = {{"bf16", {1.24, 39}},    {"delayed", {1.32, 53}},
                                               {"current", {1.44, 87}}, {"blockwise", {1.45, 83}},
                                               {"mxfp8", {1.59, 111}},  {"nvfp4", {2.95, 231}},
                                               {"rowwise", {1.78, 123}}};
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    LayerStep step(c.recipe);
    for (int i = 0; i < 2; ++i) step.run();
    const DeviceTraffic t = step.recorded();
    const double floor =
        layer_step_floor_bytes({kTokens, kD, kFfn, kHeads, 2}, operand_format_on_hopper(c.name));
    const Bound& b = bounds.at(c.name);
    const double multiple = static_cast<double>(t.non_gemm_bytes()) / floor;
    EXPECT_LE(multiple, b.floor_multiple) << summary(t);
    EXPECT_GT(multiple, 1.0) << "below the floor: the floor model misses a pass";
    EXPECT_EQ(t.launches, b.launches) << summary(t);
    RecordProperty(c.name + "_floor_multiple", std::to_string(multiple));
  }
}

// A per-tensor cast is one launch, scale_inv included: the cast kernel writes it (no
// reciprocal_kernel), for a new FP8 tensor and for a requantization in place.
TEST(CudaTraffic, PerTensorCastIsOneLaunchThatWritesScaleInv) {
  OCTET_REQUIRE_CUDA();
  if (!device_traffic_available()) GTEST_SKIP() << "device traffic: the CUDA emulation build only";
  Generator gen(17);
  Tensor host = Tensor::empty({kTokens, kD}, DType::kF32);
  gen.fill_normal(host, 0.f, 1.f);
  const Tensor x = ops::cast(host, DType::kBF16).to(test::gpu());
  const auto q = std::make_shared<DelayedScalingQuantizer>(
      Tensor::full({1}, 4.f, DType::kF32, test::gpu()),
      Tensor::zeros({4}, DType::kF32, test::gpu()), DType::kE4M3);
  for (Usage usage : {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth}) {
    SCOPED_TRACE(std::string(usage_name(usage)));
    TrafficRecording fresh;
    const auto t = q->quantize(x, usage, Ownership::kOwned, AmaxRecording::kRecord);
    const DeviceTraffic made = fresh.stop();
    ASSERT_EQ(made.kernels.size(), 1u) << summary(made);
    EXPECT_EQ(made.launches, 1);
    EXPECT_EQ(made.kernels[0].kernel.rfind("quantize_", 0), 0u) << summary(made);
    TrafficRecording in_place;
    ops::quantize_into(*t, x, AmaxRecording::kRecord);
    const DeviceTraffic requantized = in_place.stop();
    EXPECT_EQ(requantized.launches, 1) << summary(requantized);
    EXPECT_EQ(launches_of(requantized, "reciprocal_kernel"), 0);
    const auto& f = dynamic_cast<const Float8Tensor&>(*t);
    EXPECT_EQ(test::on_cpu(f.scale_inv()).item(), 0.25f);
  }
}

// An optimizer step over bf16 parameters is one launch: the multi-tensor AdamW kernel, which
// writes the bf16 weights beside the f32 masters and moments (no second pass over the masters).
TEST(CudaTraffic, AdamWStepIsOneLaunchThatWritesTheModelWeights) {
  OCTET_REQUIRE_CUDA();
  if (!device_traffic_available()) GTEST_SKIP() << "device traffic: the CUDA emulation build only";
  LayerStep step(std::nullopt);
  Tensor y = step.layer->forward(step.x, FirstMicrobatch::kUnset);
  autograd::backward(y, step.grad);
  const Tensor before = test::on_cpu(step.layer->parameters().front().tensor->clone());
  TrafficRecording recording;
  step.optimizer->step(1e-2f);
  const DeviceTraffic t = recording.stop();
  ASSERT_EQ(t.kernels.size(), 1u) << summary(t);
  EXPECT_EQ(t.kernels[0].kernel, "adamw_kernel");
  EXPECT_EQ(t.launches, 1);
  EXPECT_EQ(t.copy_device_bytes + t.memset_bytes, 0);
  // The bf16 weight moved.
  EXPECT_FALSE(test::same_bits(test::on_cpu(*step.layer->parameters().front().tensor), before));
}

}  // namespace
}  // namespace octet::modules
