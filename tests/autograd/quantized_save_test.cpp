// Quantized tensors in the save-for-backward context, proven with byte counts: an internal
// Float8Tensor / MXFP8Tensor hands its buffers to the context and gets identical bytes back; after
// the node's backward the saved bytes are back where they started; owned ones are never emptied.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "autograd/context.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/quantizer.h"
#include "tests/support/test_util.h"

namespace octet::autograd {
namespace {

int64_t saved_bytes() { return memory_stats().current_of(MemTag::kSaved); }

std::vector<uint8_t> concat_bytes(const std::vector<Tensor>& buffers) {
  std::vector<uint8_t> out;
  for (const Tensor& t : buffers) {
    if (!t.defined()) continue;
    const auto* p = static_cast<const uint8_t*>(t.data());
    out.insert(out.end(), p, p + t.nbytes());
  }
  return out;
}

std::vector<uint8_t> bytes_of(const QuantizedTensor& q) {
  if (q.format() == kPerTensorFormat) {
    const auto& f = static_cast<const Float8Tensor&>(q);
    return concat_bytes({f.rowwise_data(), f.columnwise_data(), f.scale_inv()});
  }
  const auto& m = static_cast<const MXFP8Tensor&>(q);
  return concat_bytes(
      {m.rowwise_data(), m.rowwise_scales(), m.columnwise_data(), m.columnwise_scales()});
}

// y = 2x; saves a quantized tensor as an object and, in backward, records its restored bytes
// and the saved-byte count while the node still runs.
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

Tensor leaf(const Shape& shape, uint64_t seed) {
  Tensor t = test::random_tensor(shape, DType::kF32, seed);
  set_requires_grad(t);
  return t;
}

std::shared_ptr<QuantizedTensor> quantized(const Quantizer& q, Ownership ownership, MemTag tag) {
  MemTagScope scope(tag);
  return q.quantize(test::random_tensor({64, 48}, DType::kF32, 81, 3.f), Usage::kBoth, ownership,
                    AmaxRecording::kSkip);
}

class InternalQuantizedSave : public ::testing::TestWithParam<std::string> {};

TEST_P(InternalQuantizedSave, BuffersGoToTheContextAndComeBackIdentical) {
  const DelayedScalingQuantizer per_tensor(Tensor::from_floats({5.f}, {1}),
                                           Tensor::zeros({1}, DType::kF32), DType::kE4M3);
  const MXFP8Quantizer mxfp8(DType::kE4M3);
  const Quantizer& quantizer = GetParam() == kPerTensorFormat
                                   ? static_cast<const Quantizer&>(per_tensor)
                                   : static_cast<const Quantizer&>(mxfp8);
  const int64_t base = saved_bytes();
  const int64_t act_base = memory_stats().current_of(MemTag::kActivations);
  Tensor x = leaf({8, 8}, 82);
  auto q = quantized(quantizer, Ownership::kInternal, MemTag::kActivations);
  const std::vector<uint8_t> original = bytes_of(*q);
  const int64_t q_bytes = static_cast<int64_t>(q->nbytes());
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
  EXPECT_EQ(memory_stats().current_of(MemTag::kActivations), act_base);
}

TEST_P(InternalQuantizedSave, DroppedGraphFreesTheBuffers) {
  const MXFP8Quantizer mxfp8(DType::kE4M3);
  const DelayedScalingQuantizer per_tensor(Tensor::from_floats({1.f}, {1}),
                                           Tensor::zeros({1}, DType::kF32), DType::kE5M2);
  const Quantizer& quantizer = GetParam() == kPerTensorFormat
                                   ? static_cast<const Quantizer&>(per_tensor)
                                   : static_cast<const Quantizer&>(mxfp8);
  const int64_t base = saved_bytes();
  const int64_t act_base = memory_stats().current_of(MemTag::kActivations);
  Tensor x = leaf({8, 8}, 83);
  {
    Tensor y =
        apply(SaveQuantizedFn{quantized(quantizer, Ownership::kInternal, MemTag::kActivations)}, x);
    EXPECT_GT(saved_bytes(), base);
  }
  EXPECT_EQ(saved_bytes(), base);
  EXPECT_EQ(memory_stats().current_of(MemTag::kActivations), act_base);
}

INSTANTIATE_TEST_SUITE_P(Formats, InternalQuantizedSave,
                         ::testing::Values(std::string(kPerTensorFormat),
                                           std::string(kMXFP8Format)),
                         [](const auto& info) {
                           return info.param == kPerTensorFormat ? "per_tensor" : "mxfp8";
                         });

TEST(OwnedQuantizedSave, IsSavedByReferenceAndNeverEmptied) {
  const DelayedScalingQuantizer quantizer(Tensor::from_floats({2.f}, {1}),
                                          Tensor::zeros({1}, DType::kF32), DType::kE4M3);
  auto weight = quantized(quantizer, Ownership::kOwned, MemTag::kWeights);
  const std::vector<uint8_t> original = bytes_of(*weight);
  const int64_t weight_bytes = memory_stats().current_of(MemTag::kWeights);
  const int64_t base = saved_bytes();
  Tensor x = leaf({8, 8}, 84);
  {  // a forward whose backward never runs
    Tensor y = apply(SaveQuantizedFn{weight}, x);
    EXPECT_FALSE(weight->buffers_taken());
    EXPECT_EQ(saved_bytes(), base) << "owned weight bytes must keep their tag";
  }
  EXPECT_EQ(bytes_of(*weight), original);
  EXPECT_EQ(memory_stats().current_of(MemTag::kWeights), weight_bytes);

  std::vector<uint8_t> restored;
  backward(sum(apply(SaveQuantizedFn{weight, &restored}, x)));
  EXPECT_EQ(restored, original);
  EXPECT_FALSE(weight->buffers_taken());
  EXPECT_EQ(bytes_of(*weight), original);
  EXPECT_EQ(memory_stats().current_of(MemTag::kWeights), weight_bytes);
}

}  // namespace
}  // namespace octet::autograd
