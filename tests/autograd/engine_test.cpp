// The engine's contracts: retain_graph, in-place detection, reused inputs, gradient checks on the
// way back, backward-end callbacks. The ones proven with byte counts (release after each node,
// dropped graphs, grad modes, accumulation) run on every device: tests/devices.
#include "autograd/engine.h"

#include <gtest/gtest.h>

#include "autograd/context.h"
#include "autograd/function.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "tests/support/test_util.h"

namespace octet::autograd {
namespace {

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
