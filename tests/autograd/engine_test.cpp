// The engine's contracts, proven with the allocator's byte counts: saved state released right
// after each node's backward, dropped graphs free internal buffers and leave owned ones intact,
// retain_graph, in-place detection, grad modes, accumulation, gradient checks on the way back.
#include "autograd/engine.h"

#include <gtest/gtest.h>

#include <cstring>

#include "autograd/context.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "tests/support/test_util.h"

namespace octet::autograd {
namespace {

int64_t saved_bytes() { return memory_stats().current_of(MemTag::kSaved); }

Tensor leaf(const Shape& shape, uint64_t seed) {
  Tensor t = test::random_tensor(shape, DType::kF32, seed);
  set_requires_grad(t);
  return t;
}

// A chain of 8 recorded ops, each saving its input: x -> mul -> ... -> sum.
Tensor chain_of_8(const Tensor& x, const Tensor& w) {
  Tensor h = x;
  for (int i = 0; i < 7; ++i) h = mul(h, w);
  return sum(h);
}

TEST(Engine, SavedBytesDropAfterEachNodeAndReachZero) {
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

TEST(Engine, PeakIsLowerThanKeepingSavedStateUntilTheGraphDies) {
  // Eight layers with their own weights, as in a network: while backward goes on, weight
  // gradients appear node by node, so the peak comes late in backward when saved state is kept,
  // and at its start when each node's saved state goes right after it runs.
  auto run = [] {
    Tensor x = leaf({512, 128}, 3);
    std::vector<Tensor> w;
    for (uint64_t i = 0; i < 8; ++i) w.push_back(leaf({128, 128}, 4 + i));
    reset_peak_memory();
    const int64_t start = memory_stats().total_current;
    Tensor h = x;
    for (int i = 0; i < 8; ++i) h = matmul(h, w[static_cast<size_t>(i)]);
    Tensor loss = sum(h);
    backward(loss);
    return memory_stats().total_peak - start;
  };
  const int64_t released = run();
  int64_t kept = 0;
  {
    KeepSavedUntilGraphDiesForTesting keep;
    kept = run();
  }
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

// y = x * blob (blob is saved as an object); backward restores it.
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
    if (restored_bytes != nullptr) {
      const auto* p = static_cast<const uint8_t*>(b->data().data());
      restored_bytes->assign(p, p + b->data().nbytes());
    }
    return {ops::mul(dy[0], b->data())};
  }
};

TEST(Engine, InternalObjectHandsItsBuffersAndGetsThemBackIdentical) {
  const int64_t base = saved_bytes();
  Tensor x = leaf({32, 32}, 5);
  std::vector<uint8_t> original, restored;
  Tensor loss;
  {
    MemTagScope activations(MemTag::kActivations);
    auto blob =
        std::make_shared<Blob>(test::random_tensor({32, 32}, DType::kF32, 6), Ownership::kInternal);
    const auto* p = static_cast<const uint8_t*>(blob->data().data());
    original.assign(p, p + blob->data().nbytes());
    loss = sum(apply(BlobMulFn{blob, &restored}, x));
    EXPECT_FALSE(blob->data().defined()) << "internal object kept its buffer";
  }
  // Only the blob's buffer is saved (blob_mul saves nothing else, sum saves nothing).
  EXPECT_EQ(saved_bytes() - base, 32 * 32 * 4);
  backward(loss);
  EXPECT_EQ(restored, original);
  EXPECT_EQ(saved_bytes() - base, 0);
}

TEST(Engine, DroppedGraphFreesInternalBuffersAndLeavesOwnedIntact) {
  const int64_t base = saved_bytes();
  const int64_t act_base = memory_stats().current_of(MemTag::kActivations);
  Tensor x = leaf({16, 16}, 7);
  Tensor owned_data;
  {
    MemTagScope weights(MemTag::kWeights);
    owned_data = test::random_tensor({16, 16}, DType::kF32, 8);
  }
  auto owned = std::make_shared<Blob>(owned_data, Ownership::kOwned);
  std::vector<uint8_t> before(owned_data.nbytes());
  std::memcpy(before.data(), owned_data.data(), before.size());
  {
    Tensor internal_data;
    {
      MemTagScope activations(MemTag::kActivations);
      internal_data = test::random_tensor({16, 16}, DType::kF32, 9);
    }
    auto internal = std::make_shared<Blob>(internal_data, Ownership::kInternal);
    internal_data = Tensor();
    Tensor y1 = apply(BlobMulFn{owned, nullptr}, x);
    Tensor y2 = apply(BlobMulFn{internal, nullptr}, y1);
    EXPECT_GT(saved_bytes() - base, 0);
    // y2 goes out of scope here without backward.
  }
  EXPECT_EQ(saved_bytes() - base, 0);
  EXPECT_EQ(memory_stats().current_of(MemTag::kActivations) - act_base, 0) << "leaked activations";
  ASSERT_TRUE(owned->data().defined());
  EXPECT_EQ(std::memcmp(owned->data().data(), before.data(), before.size()), 0);
  EXPECT_TRUE(owned->data().shares_storage(owned_data));
}

// An owned object changed in place between forward and backward is caught on restore.
class VersionedBlob final : public Saveable {
 public:
  explicit VersionedBlob(Tensor data) : data_(std::move(data)) {}
  Ownership ownership() const override { return Ownership::kOwned; }
  std::vector<Tensor> take_buffers() override { return {}; }
  void give_buffers(std::vector<Tensor>) override {}
  uint64_t version() const override { return version_; }
  void change() { ++version_; }
  const Tensor& data() const { return data_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
};

struct VersionedMulFn {
  static constexpr const char* kName = "versioned_mul";
  std::shared_ptr<VersionedBlob> blob;
  Tensor forward(Context& ctx, const Tensor& x) {
    ctx.save_object(blob);
    return ops::mul(x, blob->data());
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto b = ctx.restore_object<VersionedBlob>(0);
    return {ops::mul(dy[0], b->data())};
  }
};

TEST(Engine, InPlaceChangeOfASavedOwnedObjectIsCaught) {
  Tensor x = leaf({4}, 24);
  auto blob = std::make_shared<VersionedBlob>(test::random_tensor({4}, DType::kF32, 25));
  Tensor loss = sum(apply(VersionedMulFn{blob}, x));
  blob->change();
  const std::string e = test::error_of([&] { backward(loss); });
  EXPECT_NE(e.find("owned object #0"), std::string::npos) << e;
  EXPECT_NE(e.find("modified in place"), std::string::npos) << e;
}

TEST(Engine, SecondBackwardNeedsRetainGraph) {
  Tensor x = leaf({4, 4}, 10), w = leaf({4, 4}, 11);
  {
    Tensor loss = chain_of_8(x, w);
    backward(loss);
    try {
      backward(loss);
      FAIL() << "second backward without retain_graph must throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already released"), std::string::npos) << e.what();
    }
  }
  zero_grad(x);
  zero_grad(w);
  Tensor loss = chain_of_8(x, w);
  backward(loss, Tensor(), RetainGraph::kYes);
  const std::vector<float> first = grad(x).to_floats();
  zero_grad(x);
  zero_grad(w);
  backward(loss);
  EXPECT_EQ(grad(x).to_floats(), first);
}

TEST(Engine, InPlaceChangeOfASavedTensorIsCaught) {
  Tensor x = leaf({8}, 12);
  Tensor w = test::random_tensor({8}, DType::kF32, 13);
  Tensor loss = sum(mul(x, w));
  ops::add_(w, w);  // modifies a saved input
  try {
    backward(loss);
    FAIL() << "expected the version check to fire";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an in-place operation"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("mul"), std::string::npos) << e.what();
  }
}

TEST(Engine, NoGradAndInferenceModeRecordNothing) {
  Tensor x = leaf({64, 64}, 14), w = leaf({64, 64}, 15);
  const int64_t base = saved_bytes();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(grad_enabled());
    Tensor y = matmul(x, w);
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
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(inference_mode());
}

TEST(Engine, GradientsAccumulateAcrossBackwardsUntilZeroGrad) {
  Tensor x = leaf({3, 5}, 16);
  const Tensor w = test::random_tensor({3, 5}, DType::kF32, 17);
  backward(sum(mul(x, w)));
  backward(sum(mul(x, w)));
  const std::vector<float> g = grad(x).to_floats(), wv = w.to_floats();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], 2 * wv[i]);
  EXPECT_EQ(grad(x).storage()->tag(), MemTag::kGrads);
  zero_grad(x);
  EXPECT_FALSE(grad(x).defined());
}

TEST(Engine, ReusedInputGetsTheSumOfItsGradients) {
  // y = x*x + x  ->  dy/dx = 2x + 1
  Tensor x = leaf({6}, 18);
  backward(sum(add(mul(x, x), x)));
  const std::vector<float> g = grad(x).to_floats(), xv = x.to_floats();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], 2 * xv[i] + 1);
}

struct WrongShapeFn {
  static constexpr const char* kName = "wrong_shape";
  Tensor forward(Context&, const Tensor& x) { return x.clone(); }
  Tensors backward(Context&, const Tensors&) { return {Tensor::zeros({2}, DType::kF32)}; }
};

TEST(Engine, GradientShapeIsCheckedAgainstTheInput) {
  Tensor x = leaf({3}, 19);
  Tensor loss = sum(apply(WrongShapeFn{}, x));
  try {
    backward(loss);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong_shape"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(3,)"), std::string::npos) << e.what();
  }
}

struct IntGradFn {
  static constexpr const char* kName = "int_grad";
  Tensor forward(Context&, const Tensor& x) { return x.clone(); }
  Tensors backward(Context&, const Tensors&) { return {Tensor::zeros({3}, DType::kI32)}; }
};

struct F32GradFn {
  static constexpr const char* kName = "f32_grad";
  Tensor forward(Context&, const Tensor& x) { return ops::cast(x, DType::kF32); }
  Tensors backward(Context&, const Tensors& dy) { return {dy[0]}; }  // f32 for a bf16 input
};

TEST(Engine, GradientDtypeIsCheckedAndHighPrecisionIsRoundedToTheInputs) {
  Tensor x = leaf({3}, 22);
  Tensor loss = sum(apply(IntGradFn{}, x));
  const std::string e = test::error_of([&] { backward(loss); });
  EXPECT_NE(e.find("i32 gradient for f32 input"), std::string::npos) << e;

  Tensor b = test::random_tensor({3}, DType::kBF16, 23);
  set_requires_grad(b);
  backward(sum(apply(F32GradFn{}, b)));
  ASSERT_TRUE(grad(b).defined());
  EXPECT_EQ(grad(b).dtype(), DType::kBF16);
  EXPECT_EQ(grad(b).to_floats(), std::vector<float>(3, 1.f));
}

struct CallbackFn {
  static constexpr const char* kName = "callback";
  std::vector<std::string>* log;
  Tensor forward(Context&, const Tensor& x) { return x.clone(); }
  Tensors backward(Context&, const Tensors& dy) {
    log->push_back("node");
    call_at_backward_end([l = log] { l->push_back("end"); });
    return {dy[0]};
  }
};

TEST(Engine, BackwardEndCallbacksRunOnceAfterAllNodes) {
  std::vector<std::string> log;
  Tensor x = leaf({2}, 20);
  Tensor y = apply(CallbackFn{&log}, apply(CallbackFn{&log}, x));
  backward(sum(y));
  EXPECT_EQ(log, (std::vector<std::string>{"node", "node", "end", "end"}));
  EXPECT_FALSE(in_backward());
  EXPECT_THROW(call_at_backward_end([] {}), Error);
}

TEST(Engine, ClearErrorsForBadRoots) {
  const Tensor plain = Tensor::zeros({2}, DType::kF32);
  EXPECT_THROW(backward(plain), Error);  // does not require grad
  Tensor x = leaf({2, 2}, 21);
  EXPECT_THROW(backward(mul(x, x)), Error);  // not a single element: gradient needed
}

}  // namespace
}  // namespace octet::autograd
