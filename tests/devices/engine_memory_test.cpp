// The autograd engine's memory contract on every device (tests/support/devices.h), proven with
// the allocator's byte counts of the test's device: saved state released right after each node's
// backward, dropped graphs free internal buffers and leave owned ones intact, grad modes record
// nothing, gradients accumulate under their tag; and quantized tensors in the save context (an
// internal Float8Tensor / MXFP8Tensor hands its buffers over and gets identical bytes back, an
// owned one is never emptied). The module layer's side is module_memory_test.cpp.
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
#include "kernels/blockwise.h"
#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/quantizer.h"
#include "runtime/memory.h"
#include "runtime/storage.h"
#include "tests/support/devices.h"
#include "tests/support/test_util.h"

namespace octet::autograd {
namespace {

using test::bytes_of;
using test::host_bytes;

class EngineMemory : public test::DeviceTest {};
OCTET_DEVICE_TESTS(EngineMemory);

// A chain of 8 recorded ops, each saving its input: x -> mul -> ... -> sum.
Tensor chain_of_8(const Tensor& x, const Tensor& w) {
  Tensor h = x;
  for (int i = 0; i < 7; ++i) h = mul(h, w);
  return sum(h);
}

TEST_P(EngineMemory, SavedBytesDropAfterEachNodeAndReachZero) {
  const int64_t base = saved_bytes();
  {
    Tensor x = leaf({256, 64}, 1), w = leaf({256, 64}, 2);
    Tensor loss = chain_of_8(x, w);
    const int64_t after_forward = saved_bytes() - base;
    // Each mul saves its two inputs; w is a leaf the test holds (counted under its tag, kOther,
    // while held), and the 6 intermediate products are computed activations.
    EXPECT_GE(after_forward, 7 * 256 * 64 * 4);
    std::vector<int64_t> during;
    set_node_observer([&](const char*) { during.push_back(saved_bytes() - base); });
    backward(loss);
    set_node_observer(nullptr);
    ASSERT_GE(during.size(), 8u);
    // Strictly decreasing across the 7 muls: memory goes back while backward goes on.
    for (size_t i = 2; i < 8; ++i) EXPECT_LT(during[i], during[i - 1]) << "after node " << i;
    EXPECT_EQ(saved_bytes() - base, 0);
    EXPECT_TRUE(grad(x).defined());
    EXPECT_TRUE(grad(w).defined());
  }
  EXPECT_EQ(saved_bytes(), base);
}

TEST_P(EngineMemory, PeakIsLowerThanKeepingSavedStateUntilTheGraphDies) {
  // Eight layers with their own weights, as in a network: while backward goes on, weight
  // gradients appear node by node, so the peak comes late in backward when saved state is kept,
  // and at its start when each node's saved state goes right after it runs.
  auto run_chain = [&] {
    Tensor x = leaf({512, 128}, 3);
    std::vector<Tensor> w;
    for (uint64_t i = 0; i < 8; ++i) w.push_back(leaf({128, 128}, 4 + i));
    reset_peak_memory(device());
    const int64_t start = memory_stats(device()).total_current;
    Tensor h = x;
    for (int i = 0; i < 8; ++i) h = matmul(h, w[static_cast<size_t>(i)]);
    Tensor loss = sum(h);
    backward(loss);
    return memory_stats(device()).total_peak - start;
  };
  // A GEMM workspace kept for the process (cuBLASLt's 32 MiB comes with the first GEMM on a
  // device) is allocated by an unmeasured run, so that it is in neither peak.
  run_chain();
  const int64_t released = run_chain();
  int64_t kept = 0;
  {
    KeepSavedUntilGraphDiesForTesting keep;
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

// y = x * blob (blob is saved as an object); backward restores it and reads its bytes.
struct BlobMulFn {
  static constexpr const char* kName = "blob_mul";
  std::shared_ptr<Blob> blob;
  std::vector<uint8_t>* restored_bytes = nullptr;
  Tensor forward(Context& ctx, const Tensor& x) {
    Tensor y = ops::mul(x, blob->data());
    ctx.save_object(blob);
    blob.reset();  // the node keeps nothing but the context
    return y;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto b = ctx.restore_object<Blob>(0);
    if (restored_bytes != nullptr) *restored_bytes = host_bytes(b->data());
    return {ops::mul(dy[0], b->data())};
  }
};

TEST_P(EngineMemory, InternalObjectHandsItsBuffersAndGetsThemBackIdentical) {
  const int64_t base = saved_bytes();
  Tensor x = leaf({32, 32}, 5);
  std::vector<uint8_t> original, restored;
  Tensor loss;
  {
    MemTagScope activations(MemTag::kActivations);
    auto blob = std::make_shared<Blob>(random({32, 32}, 6), Ownership::kInternal);
    ASSERT_EQ(blob->data().device(), device());
    original = host_bytes(blob->data());
    loss = sum(apply(BlobMulFn{blob, &restored}, x));
    EXPECT_FALSE(blob->data().defined()) << "internal object kept its buffer";
  }
  // Only the blob's buffer is saved (blob_mul saves nothing else, sum saves nothing).
  EXPECT_EQ(saved_bytes() - base, 32 * 32 * 4);
  backward(loss);
  EXPECT_EQ(restored, original);
  EXPECT_EQ(saved_bytes() - base, 0);
}

TEST_P(EngineMemory, DroppedGraphFreesInternalBuffersAndLeavesOwnedIntact) {
  const int64_t base = saved_bytes();
  const int64_t act_base = bytes(MemTag::kActivations);
  Tensor x = leaf({16, 16}, 7);
  Tensor owned_data;
  {
    MemTagScope weights(MemTag::kWeights);
    owned_data = random({16, 16}, 8);
  }
  auto owned = std::make_shared<Blob>(owned_data, Ownership::kOwned);
  const std::vector<uint8_t> before = host_bytes(owned_data);
  {
    Tensor internal_data;
    {
      MemTagScope activations(MemTag::kActivations);
      internal_data = random({16, 16}, 9);
    }
    auto internal = std::make_shared<Blob>(internal_data, Ownership::kInternal);
    internal_data = Tensor();
    Tensor y1 = apply(BlobMulFn{owned, nullptr}, x);
    Tensor y2 = apply(BlobMulFn{internal, nullptr}, y1);
    EXPECT_GT(saved_bytes() - base, 0);
    // y2 goes out of scope here without backward.
  }
  EXPECT_EQ(saved_bytes() - base, 0);
  EXPECT_EQ(bytes(MemTag::kActivations) - act_base, 0) << "leaked activations";
  ASSERT_TRUE(owned->data().defined());
  EXPECT_EQ(host_bytes(owned->data()), before);
  EXPECT_TRUE(owned->data().shares_storage(owned_data));
}

TEST_P(EngineMemory, NoGradAndInferenceModeRecordNothing) {
  Tensor x = leaf({64, 64}, 14), w = leaf({64, 64}, 15);
  const int64_t base = saved_bytes();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(grad_enabled());
    Tensor y = matmul(x, w);
    EXPECT_EQ(y.device(), device());
    EXPECT_EQ(grad_fn(y), nullptr);
    EXPECT_EQ(y.storage()->tag(), MemTag::kActivations);  // counted as what it is, not "other"
    EXPECT_FALSE(requires_grad(y));
    EXPECT_EQ(saved_bytes(), base);
    {
      EnableGradGuard enable;  // nests
      EXPECT_NE(grad_fn(matmul(x, w)), nullptr);
    }
    EXPECT_FALSE(grad_enabled());
  }
  {
    InferenceModeGuard inference;
    EXPECT_TRUE(inference_mode());
    Tensor y = mul(matmul(x, w), w);
    EXPECT_EQ(grad_fn(y), nullptr);
    EXPECT_EQ(saved_bytes(), base);
  }
  // With gradients the same product does save: the zeros above are not for want of anything.
  {
    Tensor y = mul(matmul(x, w), w);
    EXPECT_GT(saved_bytes(), base);
  }
  EXPECT_EQ(saved_bytes(), base);
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(inference_mode());
}

TEST_P(EngineMemory, GradientsAccumulateAcrossBackwardsUntilZeroGrad) {
  Tensor x = leaf({3, 5}, 16);
  const Tensor w = random({3, 5}, 17);
  backward(sum(mul(x, w)));
  backward(sum(mul(x, w)));
  const std::vector<float> g = grad(x).to_floats(), wv = w.to_floats();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], 2 * wv[i]);
  EXPECT_EQ(grad(x).device(), device());
  EXPECT_EQ(grad(x).storage()->tag(), MemTag::kGrads);
  const int64_t grads = bytes(MemTag::kGrads);
  zero_grad(x);
  EXPECT_FALSE(grad(x).defined());
  EXPECT_EQ(bytes(MemTag::kGrads), grads - 3 * 5 * 4) << "zero_grad did not free the gradient";
}

// ---- quantized tensors in the save-for-backward context ----

// y = 2x; saves a quantized tensor as an object and, in backward, records its restored bytes.
struct SaveQuantizedFn {
  static constexpr const char* kName = "save_quantized";
  std::shared_ptr<QuantizedTensor> q;
  std::vector<uint8_t>* restored = nullptr;
  Tensor forward(Context& ctx, const Tensor& x) {
    ctx.save_object(q);
    q.reset();  // the node keeps nothing but its context
    return ops::scale(x, 2.f);
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto restored_q = ctx.restore_object<QuantizedTensor>(0);
    if (restored != nullptr) *restored = bytes_of(*restored_q);
    return {ops::scale(dy[0], 2.f)};
  }
};

class QuantizedSave : public test::DeviceTest {
 protected:
  // (64, 48) values (std 3) quantized on the test's device under `tag`, both usages.
  std::shared_ptr<QuantizedTensor> quantized(const Quantizer& q, Ownership ownership, MemTag tag) {
    MemTagScope scope(tag);
    auto t = q.quantize(random({64, 48}, 81, 3.f), Usage::kBoth, ownership, AmaxRecording::kSkip);
    EXPECT_EQ(t->device(), device());
    return t;
  }
  // A delayed-scaling quantizer whose scale and (one-entry) history live on the test's device.
  DelayedScalingQuantizer delayed(float scale, DType dtype) const {
    return DelayedScalingQuantizer(scalar(scale), here(Tensor::zeros({1}, DType::kF32)), dtype);
  }

  // The quantizer of `format`: the two given, or the block formats' own (stateless: 128x128
  // blockwise tiles, NVFP4 activations with the transform on the column-wise copy).
  static const Quantizer& of_format(std::string_view format, const Quantizer& per_tensor,
                                    const Quantizer& mxfp8) {
    static const BlockwiseQuantizer blockwise(DType::kE4M3, BlockScaling::k2D, true, 0.f);
    static const NVFP4Quantizer nvfp4(NVFP4Role::kActivation, false, true, false, Tensor());
    if (format == kBlockwiseFormat) return blockwise;
    if (format == kNVFP4Format) return nvfp4;
    return format == kPerTensorFormat ? per_tensor : mxfp8;
  }

  void buffers_go_to_the_context_and_come_back_identical(std::string_view format);
  void dropped_graph_frees_the_buffers(std::string_view format);
};
OCTET_DEVICE_TESTS(QuantizedSave);

void QuantizedSave::buffers_go_to_the_context_and_come_back_identical(std::string_view format) {
  const DelayedScalingQuantizer per_tensor = delayed(5.f, DType::kE4M3);
  const MXFP8Quantizer mxfp8(DType::kE4M3);
  const Quantizer& quantizer = of_format(format, per_tensor, mxfp8);
  const int64_t base = saved_bytes();
  const int64_t act_base = bytes(MemTag::kActivations);
  Tensor x = leaf({8, 8}, 82);
  auto q = quantized(quantizer, Ownership::kInternal, MemTag::kActivations);
  const std::vector<uint8_t> original = bytes_of(*q);
  const int64_t q_bytes = static_cast<int64_t>(q->nbytes());
  ASSERT_GT(q_bytes, 0);
  std::weak_ptr<QuantizedTensor> watch = q;

  std::vector<uint8_t> restored;
  auto loss = std::make_unique<Tensor>(sum(apply(SaveQuantizedFn{q, &restored}, x)));
  // The context holds every buffer (data and scales), counted as saved; the object has none.
  EXPECT_TRUE(q->buffers_taken());
  EXPECT_EQ(q->nbytes(), 0u);
  EXPECT_EQ(saved_bytes() - base, q_bytes);
  q.reset();  // the graph is now the only holder of the buffers and of the object

  int64_t after_node = -1;
  set_node_observer([&](const char* name) {
    if (std::string(name) == SaveQuantizedFn::kName) after_node = saved_bytes() - base;
  });
  backward(*loss);
  set_node_observer(nullptr);
  EXPECT_EQ(restored, original);
  EXPECT_EQ(after_node, 0) << "saved bytes still held right after the node's backward";
  EXPECT_EQ(saved_bytes(), base);
  // The restored object went away with the node's released state, though the graph lives on.
  EXPECT_TRUE(watch.expired());
  loss.reset();
  EXPECT_EQ(bytes(MemTag::kActivations), act_base);
}

void QuantizedSave::dropped_graph_frees_the_buffers(std::string_view format) {
  const MXFP8Quantizer mxfp8(DType::kE4M3);
  const DelayedScalingQuantizer per_tensor = delayed(1.f, DType::kE5M2);
  const Quantizer& quantizer = of_format(format, per_tensor, mxfp8);
  const int64_t base = saved_bytes();
  const int64_t act_base = bytes(MemTag::kActivations);
  Tensor x = leaf({8, 8}, 83);
  {
    Tensor y =
        apply(SaveQuantizedFn{quantized(quantizer, Ownership::kInternal, MemTag::kActivations)}, x);
    EXPECT_GT(saved_bytes(), base);
  }
  EXPECT_EQ(saved_bytes(), base);
  EXPECT_EQ(bytes(MemTag::kActivations), act_base);
}

TEST_P(QuantizedSave, InternalPerTensorBuffersGoToTheContextAndComeBackIdentical) {
  buffers_go_to_the_context_and_come_back_identical(kPerTensorFormat);
}
TEST_P(QuantizedSave, InternalMxfp8BuffersGoToTheContextAndComeBackIdentical) {
  buffers_go_to_the_context_and_come_back_identical(kMXFP8Format);
}
TEST_P(QuantizedSave, InternalPerTensorDroppedGraphFreesTheBuffers) {
  dropped_graph_frees_the_buffers(kPerTensorFormat);
}
TEST_P(QuantizedSave, InternalMxfp8DroppedGraphFreesTheBuffers) {
  dropped_graph_frees_the_buffers(kMXFP8Format);
}

TEST_P(QuantizedSave, InternalBlockwiseBuffersGoToTheContextAndComeBackIdentical) {
  buffers_go_to_the_context_and_come_back_identical(kBlockwiseFormat);
}
TEST_P(QuantizedSave, InternalNvfp4BuffersGoToTheContextAndComeBackIdentical) {
  buffers_go_to_the_context_and_come_back_identical(kNVFP4Format);
}
TEST_P(QuantizedSave, InternalBlockwiseDroppedGraphFreesTheBuffers) {
  dropped_graph_frees_the_buffers(kBlockwiseFormat);
}
TEST_P(QuantizedSave, InternalNvfp4DroppedGraphFreesTheBuffers) {
  dropped_graph_frees_the_buffers(kNVFP4Format);
}

TEST_P(QuantizedSave, OwnedIsSavedByReferenceAndNeverEmptied) {
  const DelayedScalingQuantizer quantizer = delayed(2.f, DType::kE4M3);
  auto weight = quantized(quantizer, Ownership::kOwned, MemTag::kWeights);
  const std::vector<uint8_t> original = bytes_of(*weight);
  const int64_t weight_bytes = bytes(MemTag::kWeights);
  const int64_t base = saved_bytes();
  Tensor x = leaf({8, 8}, 84);
  {  // a forward whose backward never runs
    Tensor y = apply(SaveQuantizedFn{weight}, x);
    EXPECT_FALSE(weight->buffers_taken());
    EXPECT_EQ(saved_bytes(), base) << "owned weight bytes must keep their tag";
  }
  EXPECT_EQ(bytes_of(*weight), original);
  EXPECT_EQ(bytes(MemTag::kWeights), weight_bytes);

  std::vector<uint8_t> restored;
  backward(sum(apply(SaveQuantizedFn{weight, &restored}, x)));
  EXPECT_EQ(restored, original);
  EXPECT_FALSE(weight->buffers_taken());
  EXPECT_EQ(bytes_of(*weight), original);
  EXPECT_EQ(bytes(MemTag::kWeights), weight_bytes);
}

}  // namespace
}  // namespace octet::autograd
