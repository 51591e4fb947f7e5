// The memory contract of the autograd engine on cuda:0, as the module layer rests on it (see
// module_memory_test.cpp): the tests of tests/autograd/engine_test.cpp and quantized_save_test.cpp
// that count bytes, with device tensors and device quantizers, the counts read from
// memory_stats(cuda:0). Each test names its CPU original; what differs on the device is said
// where it is done.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/context.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/quantizer.h"
#include "runtime/memory.h"
#include "runtime/storage.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/memory_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::bytes_of;
using test::gpu;
using test::gpu_bytes;
using test::gpu_leaf;
using test::gpu_random;
using test::host_bytes;
using test::on_gpu;
using test::saved_bytes;

// ---- tests/autograd/engine_test.cpp (the engine under the modules, with device tensors) ----

// A chain of 8 recorded ops, each saving its input: x -> mul -> ... -> sum.
Tensor chain_of_8(const Tensor& x, const Tensor& w) {
  Tensor h = x;
  for (int i = 0; i < 7; ++i) h = autograd::mul(h, w);
  return autograd::sum(h);
}

// Engine.SavedBytesDropAfterEachNodeAndReachZero
TEST(CudaEngineMemory, SavedBytesDropAfterEachNodeAndReachZero) {
  OCTET_REQUIRE_CUDA();
  const int64_t base = saved_bytes();
  {
    Tensor x = gpu_leaf({256, 64}, 1), w = gpu_leaf({256, 64}, 2);
    Tensor loss = chain_of_8(x, w);
    const int64_t after_forward = saved_bytes() - base;
    // Each mul saves its two inputs; w is a leaf the test holds (counted under its tag, kOther,
    // while held), and the 6 intermediate products are computed activations.
    EXPECT_GE(after_forward, 7 * 256 * 64 * 4);
    std::vector<int64_t> during;
    autograd::set_node_observer([&](const char*) { during.push_back(saved_bytes() - base); });
    autograd::backward(loss);
    autograd::set_node_observer(nullptr);
    ASSERT_GE(during.size(), 8u);
    // Strictly decreasing across the 7 muls: memory goes back while backward goes on.
    for (size_t i = 2; i < 8; ++i) EXPECT_LT(during[i], during[i - 1]) << "after node " << i;
    EXPECT_EQ(saved_bytes() - base, 0);
    EXPECT_TRUE(autograd::grad(x).defined());
    EXPECT_TRUE(autograd::grad(w).defined());
  }
  EXPECT_EQ(saved_bytes(), base);
}

// Engine.PeakIsLowerThanKeepingSavedStateUntilTheGraphDies
TEST(CudaEngineMemory, PeakIsLowerThanKeepingSavedStateUntilTheGraphDies) {
  OCTET_REQUIRE_CUDA();
  // Eight layers with their own weights, as in a network: while backward goes on, weight
  // gradients appear node by node, so the peak comes late in backward when saved state is kept,
  // and at its start when each node's saved state goes right after it runs.
  auto run_chain = [] {
    Tensor x = gpu_leaf({512, 128}, 3);
    std::vector<Tensor> w;
    for (uint64_t i = 0; i < 8; ++i) w.push_back(gpu_leaf({128, 128}, 4 + i));
    reset_peak_memory(gpu());
    const int64_t start = memory_stats(gpu()).total_current;
    Tensor h = x;
    for (int i = 0; i < 8; ++i) h = autograd::matmul(h, w[static_cast<size_t>(i)]);
    Tensor loss = autograd::sum(h);
    autograd::backward(loss);
    return memory_stats(gpu()).total_peak - start;
  };
  // cuBLASLt's workspace comes with the first GEMM on the device: allocated by an unmeasured
  // run, so that it is in neither peak.
  run_chain();
  const int64_t released = run_chain();
  int64_t kept = 0;
  {
    autograd::KeepSavedUntilGraphDiesForTesting keep;
    kept = run_chain();
  }
  EXPECT_GT(released, 0);
  EXPECT_LT(released, kept) << "released-after-node peak " << released << " vs kept " << kept;
}

// A saveable with one buffer, for the ownership contract.
class Blob final : public Saveable {
 public:
  Blob(Tensor data, Ownership ownership) : data_(std::move(data)), ownership_(ownership) {}
  Ownership ownership() const override { return ownership_; }
  std::vector<Tensor> take_buffers() override { return {std::exchange(data_, Tensor())}; }
  void give_buffers(std::vector<Tensor> buffers) override { data_ = std::move(buffers.at(0)); }
  const Tensor& data() const { return data_; }

 private:
  Tensor data_;
  Ownership ownership_;
};

// y = x * blob (blob is saved as an object); backward restores it and reads its bytes back.
struct BlobMulFn {
  static constexpr const char* kName = "blob_mul";
  std::shared_ptr<Blob> blob;
  std::vector<uint8_t>* restored_bytes = nullptr;
  Tensor forward(autograd::Context& ctx, const Tensor& x) {
    Tensor y = ops::mul(x, blob->data());
    ctx.save_object(blob);
    blob.reset();  // the node keeps nothing but the context
    return y;
  }
  autograd::Tensors backward(autograd::Context& ctx, const autograd::Tensors& dy) {
    auto b = ctx.restore_object<Blob>(0);
    if (restored_bytes != nullptr) *restored_bytes = host_bytes(b->data());
    return {ops::mul(dy[0], b->data())};
  }
};

// Engine.InternalObjectHandsItsBuffersAndGetsThemBackIdentical
TEST(CudaEngineMemory, InternalObjectHandsItsBuffersAndGetsThemBackIdentical) {
  OCTET_REQUIRE_CUDA();
  const int64_t base = saved_bytes();
  Tensor x = gpu_leaf({32, 32}, 5);
  std::vector<uint8_t> original, restored;
  Tensor loss;
  {
    MemTagScope activations(MemTag::kActivations);
    auto blob = std::make_shared<Blob>(gpu_random({32, 32}, 6), Ownership::kInternal);
    ASSERT_TRUE(blob->data().device().is_cuda());
    original = host_bytes(blob->data());
    loss = autograd::sum(autograd::apply(BlobMulFn{blob, &restored}, x));
    EXPECT_FALSE(blob->data().defined()) << "internal object kept its buffer";
  }
  // Only the blob's buffer is saved (blob_mul saves nothing else, sum saves nothing).
  EXPECT_EQ(saved_bytes() - base, 32 * 32 * 4);
  autograd::backward(loss);
  EXPECT_EQ(restored, original);
  EXPECT_EQ(saved_bytes() - base, 0);
}

// Engine.DroppedGraphFreesInternalBuffersAndLeavesOwnedIntact
TEST(CudaEngineMemory, DroppedGraphFreesInternalBuffersAndLeavesOwnedIntact) {
  OCTET_REQUIRE_CUDA();
  const int64_t base = saved_bytes();
  const int64_t act_base = gpu_bytes(MemTag::kActivations);
  Tensor x = gpu_leaf({16, 16}, 7);
  Tensor owned_data;
  {
    MemTagScope weights(MemTag::kWeights);
    owned_data = gpu_random({16, 16}, 8);
  }
  auto owned = std::make_shared<Blob>(owned_data, Ownership::kOwned);
  const std::vector<uint8_t> before = host_bytes(owned_data);
  {
    Tensor internal_data;
    {
      MemTagScope activations(MemTag::kActivations);
      internal_data = gpu_random({16, 16}, 9);
    }
    auto internal = std::make_shared<Blob>(internal_data, Ownership::kInternal);
    internal_data = Tensor();
    Tensor y1 = autograd::apply(BlobMulFn{owned, nullptr}, x);
    Tensor y2 = autograd::apply(BlobMulFn{internal, nullptr}, y1);
    EXPECT_GT(saved_bytes() - base, 0);
    // y2 goes out of scope here without backward.
  }
  EXPECT_EQ(saved_bytes() - base, 0);
  EXPECT_EQ(gpu_bytes(MemTag::kActivations) - act_base, 0) << "leaked activations";
  ASSERT_TRUE(owned->data().defined());
  EXPECT_EQ(host_bytes(owned->data()), before);
  EXPECT_TRUE(owned->data().shares_storage(owned_data));
}

// Engine.NoGradAndInferenceModeRecordNothing
TEST(CudaEngineMemory, NoGradAndInferenceModeRecordNothing) {
  OCTET_REQUIRE_CUDA();
  Tensor x = gpu_leaf({64, 64}, 14), w = gpu_leaf({64, 64}, 15);
  const int64_t base = saved_bytes();
  {
    autograd::NoGradGuard no_grad;
    EXPECT_FALSE(autograd::grad_enabled());
    Tensor y = autograd::matmul(x, w);
    EXPECT_TRUE(y.device().is_cuda());
    EXPECT_EQ(autograd::grad_fn(y), nullptr);
    EXPECT_EQ(y.storage()->tag(), MemTag::kActivations);  // counted as what it is, not "other"
    EXPECT_FALSE(autograd::requires_grad(y));
    EXPECT_EQ(saved_bytes(), base);
    {
      autograd::EnableGradGuard enable;  // nests
      EXPECT_NE(autograd::grad_fn(autograd::matmul(x, w)), nullptr);
    }
    EXPECT_FALSE(autograd::grad_enabled());
  }
  {
    autograd::InferenceModeGuard inference;
    EXPECT_TRUE(autograd::inference_mode());
    Tensor y = autograd::mul(autograd::matmul(x, w), w);
    EXPECT_EQ(autograd::grad_fn(y), nullptr);
    EXPECT_EQ(saved_bytes(), base);
  }
  // With gradients the same product does save: the zeros above are not for want of anything.
  {
    Tensor y = autograd::mul(autograd::matmul(x, w), w);
    EXPECT_GT(saved_bytes(), base);
  }
  EXPECT_EQ(saved_bytes(), base);
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_FALSE(autograd::inference_mode());
}

// Engine.GradientsAccumulateAcrossBackwardsUntilZeroGrad (the gradient's tag on the device)
TEST(CudaEngineMemory, GradientsAccumulateAcrossBackwardsUntilZeroGrad) {
  OCTET_REQUIRE_CUDA();
  Tensor x = gpu_leaf({3, 5}, 16);
  const Tensor w = gpu_random({3, 5}, 17);
  autograd::backward(autograd::sum(autograd::mul(x, w)));
  autograd::backward(autograd::sum(autograd::mul(x, w)));
  const std::vector<float> g = autograd::grad(x).to_floats(), wv = w.to_floats();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], 2 * wv[i]);
  EXPECT_TRUE(autograd::grad(x).device().is_cuda());
  EXPECT_EQ(autograd::grad(x).storage()->tag(), MemTag::kGrads);
  const int64_t grads = gpu_bytes(MemTag::kGrads);
  autograd::zero_grad(x);
  EXPECT_FALSE(autograd::grad(x).defined());
  EXPECT_EQ(gpu_bytes(MemTag::kGrads), grads - 3 * 5 * 4) << "zero_grad did not free the gradient";
}

// ---- tests/autograd/quantized_save_test.cpp (device quantizers and buffers) ----

// y = 2x; saves a quantized tensor as an object and, in backward, reads its restored bytes back.
struct SaveQuantizedFn {
  static constexpr const char* kName = "save_quantized";
  std::shared_ptr<QuantizedTensor> q;
  std::vector<uint8_t>* restored = nullptr;
  Tensor forward(autograd::Context& ctx, const Tensor& x) {
    ctx.save_object(q);
    q.reset();  // the node keeps nothing but its context
    return ops::scale(x, 2.f);
  }
  autograd::Tensors backward(autograd::Context& ctx, const autograd::Tensors& dy) {
    auto restored_q = ctx.restore_object<QuantizedTensor>(0);
    if (restored != nullptr) *restored = bytes_of(*restored_q);
    return {ops::scale(dy[0], 2.f)};
  }
};

// The CPU test's (64, 48) values (std 3), quantized on the device under `tag`.
std::shared_ptr<QuantizedTensor> quantized(const Quantizer& q, Ownership ownership, MemTag tag) {
  MemTagScope scope(tag);
  auto t = q.quantize(on_gpu(test::random_tensor({64, 48}, DType::kF32, 81, 3.f)), Usage::kBoth,
                      ownership, AmaxRecording::kSkip);
  EXPECT_EQ(t->device(), gpu());
  return t;
}

// A delayed-scaling quantizer whose scale and history live on the device.
DelayedScalingQuantizer gpu_delayed(float scale, DType dtype) {
  return DelayedScalingQuantizer(test::scalar(scale, gpu()), Tensor::zeros({1}, DType::kF32, gpu()),
                                 dtype);
}

class CudaInternalQuantizedSave : public ::testing::TestWithParam<std::string> {};

// InternalQuantizedSave.BuffersGoToTheContextAndComeBackIdentical
TEST_P(CudaInternalQuantizedSave, BuffersGoToTheContextAndComeBackIdentical) {
  OCTET_REQUIRE_CUDA();
  const DelayedScalingQuantizer per_tensor = gpu_delayed(5.f, DType::kE4M3);
  const MXFP8Quantizer mxfp8(DType::kE4M3);
  const Quantizer& quantizer = GetParam() == kPerTensorFormat
                                   ? static_cast<const Quantizer&>(per_tensor)
                                   : static_cast<const Quantizer&>(mxfp8);
  const int64_t base = saved_bytes();
  const int64_t act_base = gpu_bytes(MemTag::kActivations);
  Tensor x = gpu_leaf({8, 8}, 82);
  auto q = quantized(quantizer, Ownership::kInternal, MemTag::kActivations);
  const std::vector<uint8_t> original = bytes_of(*q);
  const int64_t q_bytes = static_cast<int64_t>(q->nbytes());
  ASSERT_GT(q_bytes, 0);
  std::weak_ptr<QuantizedTensor> watch = q;

  std::vector<uint8_t> restored;
  auto loss =
      std::make_unique<Tensor>(autograd::sum(autograd::apply(SaveQuantizedFn{q, &restored}, x)));
  // The context holds every buffer (data and scales), counted as saved; the object has none.
  EXPECT_TRUE(q->buffers_taken());
  EXPECT_EQ(q->nbytes(), 0u);
  EXPECT_EQ(saved_bytes() - base, q_bytes);
  q.reset();  // the graph is now the only holder of the buffers and of the object

  int64_t after_node = -1;
  autograd::set_node_observer([&](const char* name) {
    if (std::string(name) == SaveQuantizedFn::kName) after_node = saved_bytes() - base;
  });
  autograd::backward(*loss);
  autograd::set_node_observer(nullptr);
  EXPECT_EQ(restored, original);
  EXPECT_EQ(after_node, 0) << "saved bytes still held right after the node's backward";
  EXPECT_EQ(saved_bytes(), base);
  // The restored object went away with the node's released state, though the graph lives on.
  EXPECT_TRUE(watch.expired());
  loss.reset();
  EXPECT_EQ(gpu_bytes(MemTag::kActivations), act_base);
}

// InternalQuantizedSave.DroppedGraphFreesTheBuffers
TEST_P(CudaInternalQuantizedSave, DroppedGraphFreesTheBuffers) {
  OCTET_REQUIRE_CUDA();
  const MXFP8Quantizer mxfp8(DType::kE4M3);
  const DelayedScalingQuantizer per_tensor = gpu_delayed(1.f, DType::kE5M2);
  const Quantizer& quantizer = GetParam() == kPerTensorFormat
                                   ? static_cast<const Quantizer&>(per_tensor)
                                   : static_cast<const Quantizer&>(mxfp8);
  const int64_t base = saved_bytes();
  const int64_t act_base = gpu_bytes(MemTag::kActivations);
  Tensor x = gpu_leaf({8, 8}, 83);
  {
    Tensor y = autograd::apply(
        SaveQuantizedFn{quantized(quantizer, Ownership::kInternal, MemTag::kActivations)}, x);
    EXPECT_GT(saved_bytes(), base);
  }
  EXPECT_EQ(saved_bytes(), base);
  EXPECT_EQ(gpu_bytes(MemTag::kActivations), act_base);
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaInternalQuantizedSave,
                         ::testing::Values(std::string(kPerTensorFormat),
                                           std::string(kMXFP8Format)),
                         [](const auto& info) {
                           return info.param == kPerTensorFormat ? "per_tensor" : "mxfp8";
                         });

// OwnedQuantizedSave.IsSavedByReferenceAndNeverEmptied
TEST(CudaOwnedQuantizedSave, IsSavedByReferenceAndNeverEmptied) {
  OCTET_REQUIRE_CUDA();
  const DelayedScalingQuantizer quantizer = gpu_delayed(2.f, DType::kE4M3);
  auto weight = quantized(quantizer, Ownership::kOwned, MemTag::kWeights);
  const std::vector<uint8_t> original = bytes_of(*weight);
  const int64_t weight_bytes = gpu_bytes(MemTag::kWeights);
  const int64_t base = saved_bytes();
  Tensor x = gpu_leaf({8, 8}, 84);
  {  // a forward whose backward never runs
    Tensor y = autograd::apply(SaveQuantizedFn{weight}, x);
    EXPECT_FALSE(weight->buffers_taken());
    EXPECT_EQ(saved_bytes(), base) << "owned weight bytes must keep their tag";
  }
  EXPECT_EQ(bytes_of(*weight), original);
  EXPECT_EQ(gpu_bytes(MemTag::kWeights), weight_bytes);

  std::vector<uint8_t> restored;
  autograd::backward(autograd::sum(autograd::apply(SaveQuantizedFn{weight, &restored}, x)));
  EXPECT_EQ(restored, original);
  EXPECT_FALSE(weight->buffers_taken());
  EXPECT_EQ(bytes_of(*weight), original);
  EXPECT_EQ(gpu_bytes(MemTag::kWeights), weight_bytes);
}

}  // namespace
}  // namespace octet::modules
