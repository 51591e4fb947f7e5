// The extension points, proven by a format that exists only in this test: "identity", which
// stores f32 bits unchanged (row-wise data and its transpose as column-wise data), its quantizer,
// its format-table entry and a custom recipe. Wired through Linear and LayerNormMLP end to end —
// forward, backward, FP8 primary weights, a state-dict round trip — with no change to octet:
// every result equals the high-precision module's bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/variable.h"
#include "kernels/ops.h"
#include "kernels/quantized_format.h"
#include "kernels/quantizer.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "modules/optimizer.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

constexpr std::string_view kIdentity = "identity-test";

Usage held(const Tensor& row, const Tensor& col) {
  return (row.defined() ? Usage::kRowwise : Usage::kNone) |
         (col.defined() ? Usage::kColumnwise : Usage::kNone);
}

// f32 values as they are: row-wise (logical shape) and column-wise ((cols, rows), transposed).
class IdentityTensor final : public QuantizedTensor {
 public:
  IdentityTensor(Shape shape, Tensor row, Tensor col, Ownership ownership)
      : QuantizedTensor(std::move(shape), DType::kF32, held(row, col), ownership,
                        row.defined() ? row.device() : col.device()),
        row_(std::move(row)),
        col_(std::move(col)) {}

  std::string_view format() const override { return kIdentity; }
  using QuantizedTensor::nbytes;
  size_t nbytes(Usage usage) const override {
    const Tensor& t = usage == Usage::kRowwise ? row_ : col_;
    return t.defined() ? t.nbytes() : 0;
  }
  const Tensor& rowwise_data() const override { return row_; }
  const Tensor& columnwise_data() const { return col_; }
  std::vector<std::pair<std::string, Tensor>> rowwise_state() const override {
    return {{"", row_}};
  }
  void set_columnwise(Tensor col) {
    col_ = std::move(col);
    set_usage(usage() | Usage::kColumnwise);
    bump_version();
  }
  void set_rowwise(Tensor row) {
    row_ = std::move(row);
    set_usage(usage() | Usage::kRowwise);
    bump_version();
  }
  void drop_usage(Usage drop) override {
    if (has_usage(drop, Usage::kRowwise)) row_ = Tensor();
    if (has_usage(drop, Usage::kColumnwise)) col_ = Tensor();
    set_usage(held(row_, col_));
    bump_version();
  }
  std::vector<Tensor> take_buffers() override {
    begin_take();
    return {std::exchange(row_, Tensor()), std::exchange(col_, Tensor())};
  }
  void give_buffers(std::vector<Tensor> buffers) override {
    begin_give(buffers.size(), 2);
    row_ = std::move(buffers[0]);
    col_ = std::move(buffers[1]);
  }

 private:
  std::vector<Tensor> held_buffers() const override { return {row_, col_}; }
  Tensor row_, col_;
};

Tensor transposed(const Tensor& x) { return ops::transpose_2d(x.reshape({x.rows(), x.cols()})); }

class IdentityQuantizer final : public Quantizer {
 public:
  static inline int casts = 0;  // how many tensors the format made, so a test sees it ran
  std::string_view format() const override { return kIdentity; }
  DType dtype() const override { return DType::kF32; }
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording) const override {
    ++casts;
    const Tensor f = ops::cast(x, DType::kF32);  // a copy even for f32
    Tensor row = has_usage(usage, Usage::kRowwise) ? f : Tensor();
    Tensor col = has_usage(usage, Usage::kColumnwise) ? transposed(f) : Tensor();
    auto t = std::make_shared<IdentityTensor>(x.shape(), row, col, ownership);
    t->set_quantizer(ops::quantizer_handle(*this));
    return t;
  }
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording) const override {
    auto& t = dynamic_cast<IdentityTensor&>(dst);
    if (t.has(Usage::kRowwise)) {
      Tensor row = t.rowwise_data();
      ops::copy_(row, src);
    }
    if (t.has(Usage::kColumnwise)) {
      Tensor col = t.columnwise_data();
      ops::copy_(col, transposed(src));
    }
    dst.bump_version();
  }
  std::string describe() const override { return "identity"; }
};

class IdentityFormat final : public ops::QuantizedFormat {
 public:
  std::string_view name() const override { return kIdentity; }
  std::string layout() const override { return "f32 values, no scale"; }
  std::string shape_violation(const Shape&) const override { return ""; }
  int64_t row_multiple() const override { return 1; }
  Tensor dequantize(const QuantizedTensor& q, DType dtype) const override {
    const auto& t = dynamic_cast<const IdentityTensor&>(q);
    const Tensor f = t.has(Usage::kRowwise) ? t.rowwise_data() : transposed(t.columnwise_data());
    return ops::cast(f, dtype).reshape(q.shape());
  }
  void make_usage(QuantizedTensor& q, Usage missing, const Tensor*) const override {
    auto& t = dynamic_cast<IdentityTensor&>(q);
    if (has_usage(missing, Usage::kColumnwise)) t.set_columnwise(transposed(t.rowwise_data()));
    if (has_usage(missing, Usage::kRowwise)) {
      t.set_rowwise(transposed(t.columnwise_data()).reshape(q.shape()));
    }
  }
  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            ops::GemmLayout layout, Tensor& out_2d,
            const ops::FP8GemmOptions& options) const override {
    const auto& ta = dynamic_cast<const IdentityTensor&>(a);
    const auto& tb = dynamic_cast<const IdentityTensor&>(b);
    const Tensor da =
        ops::operand_data(a, ta.rowwise_data(), ta.columnwise_data(), a_usage, layout);
    const Tensor db =
        ops::operand_data(b, tb.rowwise_data(), tb.columnwise_data(), b_usage, layout);
    ops::GemmOptions g;
    g.bias = options.bias;
    g.accumulate = options.accumulate;
    ops::gemm(da, ops::Transpose::kNo, db, ops::Transpose::kYes, out_2d, g);
  }
};

class IdentityRecipe final : public CustomRecipe {
 public:
  std::string name() const override { return "identity"; }
  DType dtype(FP8Direction) const override { return DType::kF32; }
  std::shared_ptr<Quantizer> make_quantizer(SlotId) const override {
    return std::make_shared<IdentityQuantizer>();
  }
};

const Recipe& identity_recipe() {
  static const Recipe recipe = [] {
    ops::register_quantized_format(std::make_shared<IdentityFormat>());
    return Recipe::custom_recipe(std::make_shared<IdentityRecipe>());
  }();
  return recipe;
}

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b, const char* what) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << what << ": " << a << " vs " << b;
  }
  if (a.nbytes() > 0 && std::memcmp(a.data(), b.data(), a.nbytes()) != 0) {
    return ::testing::AssertionFailure() << what << ": values differ";
  }
  return ::testing::AssertionSuccess();
}

struct LinearRun {
  Tensor y, dx, dw, db;
};

LinearRun run_linear(const Recipe* recipe, FP8PrimaryWeights primary) {
  LinearOptions o;
  o.seed = 11;
  if (recipe != nullptr) o.recipe = *recipe;
  o.fp8_primary_weights = primary;
  Linear lin(32, 48, o);
  Tensor x = test::random_tensor({24, 32}, DType::kF32, 3);
  autograd::set_requires_grad(x);
  const Tensor y = test::with_fp8(recipe, [&] { return lin.forward(x); });
  const Tensor g = test::random_tensor(y.shape(), DType::kF32, 4);
  autograd::backward(y, g);
  return {y, autograd::grad(x), autograd::grad(lin.weight()), autograd::grad(lin.bias())};
}

TEST(CustomFormat, IdentityFormatThroughLinearEqualsHighPrecisionBitForBit) {
  const LinearRun hp = run_linear(nullptr, FP8PrimaryWeights::kNo);
  IdentityQuantizer::casts = 0;
  const LinearRun id = run_linear(&identity_recipe(), FP8PrimaryWeights::kNo);
  EXPECT_EQ(IdentityQuantizer::casts, 3);  // x, W and dY went through the test's format
  EXPECT_TRUE(same_bits(id.y, hp.y, "y"));
  EXPECT_TRUE(same_bits(id.dx, hp.dx, "dx"));
  EXPECT_TRUE(same_bits(id.dw, hp.dw, "dw"));
  EXPECT_TRUE(same_bits(id.db, hp.db, "db"));
}

TEST(CustomFormat, IdentityPrimaryWeightsTrainAndRoundTripTheStateDict) {
  const LinearRun hp = run_linear(nullptr, FP8PrimaryWeights::kNo);
  const LinearRun id = run_linear(&identity_recipe(), FP8PrimaryWeights::kYes);
  EXPECT_TRUE(same_bits(id.y, hp.y, "y"));
  EXPECT_TRUE(same_bits(id.dx, hp.dx, "dx"));
  EXPECT_TRUE(same_bits(id.dw, hp.dw, "dw"));

  LinearOptions o;
  o.recipe = identity_recipe();
  o.fp8_primary_weights = FP8PrimaryWeights::kYes;
  Linear a(32, 48, o), b(32, 48, [&] {
    LinearOptions ob = o;
    ob.seed = 99;
    return ob;
  }());
  ASSERT_EQ(a.fp8_weight()->format(), kIdentity);
  // An optimizer step requantizes in place through the format's quantizer.
  Tensor x = test::random_tensor({8, 32}, DType::kF32, 5);
  {
    FP8Autocast scope(identity_recipe());
    autograd::backward(autograd::sum(a.forward(x)));
  }
  Optimizer opt(a.parameters(), OptimizerOptions{});
  opt.step(1e-2f);
  b.load_state_dict(a.state_dict());
  EXPECT_TRUE(same_bits(b.weight(), a.weight(), "loaded weight"));
  FP8Autocast scope(identity_recipe());
  autograd::NoGradGuard no_grad;
  EXPECT_TRUE(same_bits(b.forward(x), a.forward(x), "forward after the load"));
}

TEST(CustomFormat, IdentityFormatThroughLayerNormMLPEqualsHighPrecisionBitForBit) {
  auto run = [](const Recipe* recipe) {
    LayerNormMLPOptions o;
    o.linear.seed = 21;
    if (recipe != nullptr) o.linear.recipe = *recipe;
    LayerNormMLP mlp(32, 64, o);
    Tensor x = test::random_tensor({16, 32}, DType::kF32, 6);
    autograd::set_requires_grad(x);
    const Tensor y = test::with_fp8(recipe, [&] { return mlp.forward(x); });
    autograd::backward(y, test::random_tensor(y.shape(), DType::kF32, 7));
    return std::vector<Tensor>{y, autograd::grad(x), autograd::grad(mlp.fc1_weight().leaf()),
                               autograd::grad(mlp.fc2_weight().leaf()),
                               autograd::grad(mlp.norm().gamma)};
  };
  const std::vector<Tensor> hp = run(nullptr), id = run(&identity_recipe());
  const char* names[] = {"y", "dx", "dw1", "dw2", "dgamma"};
  for (size_t i = 0; i < hp.size(); ++i) EXPECT_TRUE(same_bits(id[i], hp[i], names[i]));
}

TEST(CustomFormat, FormatTableNamesWhatIsRegistered) {
  identity_recipe();
  const std::string message = test::error_of([] { ops::quantized_format("nvfp9"); });
  EXPECT_NE(message.find("unknown quantized format \"nvfp9\""), std::string::npos) << message;
  EXPECT_NE(message.find("per-tensor, mxfp8"), std::string::npos) << message;
  EXPECT_EQ(ops::quantized_format(kIdentity).name(), kIdentity);
  EXPECT_NE(test::error_of([] {
              ops::register_quantized_format(std::make_shared<IdentityFormat>());
            }).find("already registered"),
            std::string::npos);
  EXPECT_EQ(describe(identity_recipe()), R"({"name":"identity","recipe":"custom"})");
}

}  // namespace
}  // namespace octet::modules
