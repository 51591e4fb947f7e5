// Row-wise FP8 (torchao's "rowwise" recipe) against a reference written here: each row's scale =
// fp8_max / amax in f32 (power of two: rounded down), elements with CUDA's host FP8 cast,
// scale_inv = 1 / scale; the column-wise direction is the cast of the transpose; the GEMM
// against f64 sums of the expanded values; the recipe's JSON keys; the shape rule; the checkpoint
// form of an FP8 weight.
#include "kernels/rowwise.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp8.h"
#include "runtime/recipe.h"
#include "tests/kernels/scale_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The reference scale rule, an overflow the largest finite f32.
float reference_scale(float amax, float fp8_max, bool pow2, float eps) {
  return test::reference_scale(amax, fp8_max, pow2, eps, FLT_MAX);
}

// Rows whose magnitudes differ by up to 2^+-30, a zero row, inf, NaN and a row whose amax is so
// small that fp8_max / amax overflows f32.
std::vector<float> mixed(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v = test::random_tensor({rows, cols}, DType::kF32, seed).to_floats();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& x = v[static_cast<size_t>(r * cols + c)];
      x = std::ldexp(x, static_cast<int>((r * 7) % 61) - 30);
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    v[static_cast<size_t>(c)] = 0.f;                               // row 0
    v[static_cast<size_t>(4 * cols + c)] = c == 0 ? 1e-39f : 0.f;  // row 4: a subnormal
  }
  v[static_cast<size_t>(1 * cols + 5)] = kInf;
  v[static_cast<size_t>(2 * cols + 7)] = -kInf;
  v[static_cast<size_t>(3 * cols + 9)] = kNaN;
  return v;
}

using Expected = test::ExpectedCast;

Expected reference(const std::vector<float>& x, int64_t rows, int64_t cols, DType fp8, bool pow2,
                   float eps) {
  Expected e{std::vector<uint8_t>(static_cast<size_t>(rows * cols)),
             std::vector<float>(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) {
      const float a = std::fabs(x[static_cast<size_t>(r * cols + c)]);
      if (!std::isnan(a) && a > amax) amax = a;
    }
    const float s = reference_scale(amax, fp8_max(fp8), pow2, eps);
    e.scale_inv[static_cast<size_t>(r)] = 1.f / s;
    for (int64_t c = 0; c < cols; ++c) {
      const auto at = static_cast<size_t>(r * cols + c);
      test::reference_cast_into(e, at, x[at], s, fp8);
    }
  }
  return e;
}

// How many bytes and scales differ from `want` (0: bit for bit).
int64_t mismatches(const Tensor& data, const Tensor& scale_inv, const Expected& want) {
  int64_t bad = 0;
  const auto* d = data.data_as<uint8_t>();
  for (size_t i = 0; i < want.data.size(); ++i) bad += d[i] != want.data[i] ? 1 : 0;
  const float* s = scale_inv.data_as<float>();
  for (size_t i = 0; i < want.scale_inv.size(); ++i) {
    bad += test::bits_of(s[i]) != test::bits_of(want.scale_inv[i]) ? 1 : 0;
  }
  return bad;
}

class RowwiseCast : public ::testing::TestWithParam<std::tuple<DType, bool, float>> {};

TEST_P(RowwiseCast, MatchesTheReferenceBitForBitAndCounts) {
  const auto [fp8, pow2, eps] = GetParam();
  const int64_t rows = 70, cols = 300;
  const std::vector<float> x = mixed(rows, cols, 3);
  Tensor data = Tensor::empty({rows, cols}, fp8);
  Tensor scales = Tensor::empty({rows}, DType::kF32);
  test::poison(data);
  test::poison(scales);
  FP8CastCounts counts;
  ops::quantize_rowwise(Tensor::from_floats(x, {rows, cols}), {fp8_max(fp8), pow2, eps}, data,
                        scales, &counts);
  const Expected want = reference(x, rows, cols, fp8, pow2, eps);
  EXPECT_EQ(mismatches(data, scales, want), 0);
  EXPECT_EQ(counts.total, rows * cols);
  EXPECT_EQ(counts.saturated, want.saturated);
  EXPECT_EQ(counts.flushed, want.flushed);
  // The other FP8 format's reference differs almost everywhere: the check tells them apart.
  const DType other = fp8 == DType::kE4M3 ? DType::kE5M2 : DType::kE4M3;
  EXPECT_GT(mismatches(data, scales, reference(x, rows, cols, other, pow2, eps)), rows * cols / 2);
}

INSTANTIATE_TEST_SUITE_P(Formats, RowwiseCast,
                         ::testing::Values(std::tuple{DType::kE4M3, true, 0.f},
                                           std::tuple{DType::kE4M3, false, 0.f},
                                           std::tuple{DType::kE5M2, true, 0.f},
                                           std::tuple{DType::kE4M3, true, 1e-3f}));

TEST(RowwiseCast, Bf16InputAndTheDequantizationIsExact) {
  const int64_t rows = 33, cols = 50;
  const Tensor x = test::random_tensor({rows, cols}, DType::kBF16, 4, 3.f);
  Tensor data = Tensor::empty({rows, cols}, DType::kE4M3);
  Tensor scales = Tensor::empty({rows}, DType::kF32);
  ops::quantize_rowwise(x, {}, data, scales);
  EXPECT_EQ(mismatches(data, scales, reference(x.to_floats(), rows, cols, DType::kE4M3, true, 0.f)),
            0);
  const std::vector<float> got = ops::dequantize_rowwise(data, scales, DType::kF32).to_floats();
  const uint8_t* q = data.data_as<uint8_t>();
  const float* s = scales.data_as<float>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double want = static_cast<double>(from_e4m3(q[i])) * s[i / cols];
    ASSERT_EQ(got[static_cast<size_t>(i)], want) << i;  // power-of-two scales: exact
  }
}

TEST(RowwiseQuantizer, ColumnwiseIsTheCastOfTheTransposeAndUsagesNeedTheSource) {
  const int64_t rows = 48, cols = 80;
  const Tensor x = test::random_tensor({rows, cols}, DType::kF32, 5);
  const auto q = std::make_shared<RowwiseQuantizer>(DType::kE4M3, true, 0.f);
  auto t = q->quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
  const auto& r = dynamic_cast<const RowwiseFP8Tensor&>(*t);
  EXPECT_EQ(r.columnwise_data().shape(), (Shape{cols, rows}));
  EXPECT_EQ(r.columnwise_scales().shape(), (Shape{cols}));
  const std::vector<float> xt = ops::transpose_2d(x).to_floats();
  EXPECT_EQ(mismatches(r.columnwise_data(), r.columnwise_scales(),
                       reference(xt, cols, rows, DType::kE4M3, true, 0.f)),
            0);
  EXPECT_EQ(mismatches(r.rowwise_data(), r.rowwise_scales(),
                       reference(x.to_floats(), rows, cols, DType::kE4M3, true, 0.f)),
            0);
  // Dequantization reads the row-wise data when it is held.
  EXPECT_EQ(ops::dequantize(*t, DType::kF32).to_floats(),
            ops::dequantize_rowwise(r.rowwise_data(), r.rowwise_scales(), DType::kF32).to_floats());

  auto act = q->quantize(x, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  const std::string message = test::error_of([&] { ops::update_usage(*act, Usage::kBoth); });
  EXPECT_NE(message.find("quantized from high precision"), std::string::npos) << message;
  ops::update_usage(*act, Usage::kBoth, &x);
  EXPECT_TRUE(act->has(Usage::kColumnwise));
}

TEST(RowwiseGemm, EveryLayoutMatchesF64SumsOfTheExpandedValues) {
  const int64_t m = 48, n = 80, k = 96;
  const Tensor x = test::random_tensor({m, k}, DType::kF32, 11);
  const Tensor w = test::random_tensor({n, k}, DType::kF32, 12, 0.05f);
  const Tensor bias = test::random_tensor({n}, DType::kF32, 13);
  const RowwiseQuantizer q(DType::kE4M3, true, 0.f);
  auto a = q.quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  auto b = q.quantize(w, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  ops::FP8GemmOptions o;
  o.bias = &bias;
  const Tensor y = ops::fp8_gemm(*a, *b, ops::GemmLayout::kFprop, DType::kF32, o);
  const std::vector<float> av = ops::dequantize(*a, DType::kF32).to_floats();
  const std::vector<float> bv = ops::dequantize(*b, DType::kF32).to_floats();
  const std::vector<float> got = y.to_floats(), biasv = bias.to_floats();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = biasv[static_cast<size_t>(j)], mag = std::fabs(want);
      for (int64_t l = 0; l < k; ++l) {
        const double t = static_cast<double>(av[static_cast<size_t>(i * k + l)]) *
                         bv[static_cast<size_t>(j * k + l)];
        want += t;
        mag += std::fabs(t);
      }
      // Exact products (power-of-two scales), summed in f32: k roundings of at most half an ulp.
      ASSERT_LE(std::fabs(got[static_cast<size_t>(i * n + j)] - want), 1e-6 + 1e-7 * k * mag)
          << "(" << i << ", " << j << ")";
    }
  }
}

TEST(RowwiseGemm, ShapeRuleNamesTheShape) {
  test::expect_shape_rule_names_the_shape(kRowwiseFormat);
}

TEST(RowwiseRecipe, JsonKeysDefaultsAndErrors) {
  const Recipe r = parse_recipe(R"({"recipe": "rowwise"})");
  EXPECT_EQ(r, Recipe::rowwise());
  EXPECT_TRUE(r.power_2_scale);
  EXPECT_EQ(r.dtype(FP8Direction::kForward), DType::kE4M3);
  EXPECT_EQ(r.dtype(FP8Direction::kBackward), DType::kE4M3);
  EXPECT_EQ(recipe_from_json(recipe_to_json(r)), r);
  const Recipe custom = parse_recipe(
      R"({"recipe": "rowwise", "fp8_format": "hybrid", "power_2_scale": false,
          "amax_epsilon": 1e-12})");
  EXPECT_EQ(custom.dtype(FP8Direction::kBackward), DType::kE5M2);
  EXPECT_FALSE(custom.power_2_scale);
  EXPECT_EQ(recipe_from_json(recipe_to_json(custom)), custom);
  const std::string unknown =
      test::error_of([] { parse_recipe(R"({"recipe": "rowwise", "margin": 1})", "fp8.recipe"); });
  EXPECT_NE(unknown.find("fp8.recipe.margin"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown key"), std::string::npos) << unknown;
  const std::string negative =
      test::error_of([] { parse_recipe(R"({"recipe": "rowwise", "amax_epsilon": -1})"); });
  EXPECT_NE(negative.find("recipe.amax_epsilon"), std::string::npos) << negative;
  // The quantizer of every slot casts to the recipe's format.
  const auto q = make_quantizer(r, {}, backward_slot(0, BackwardTensor::kGradOutput));
  EXPECT_EQ(q->format(), kRowwiseFormat);
  EXPECT_EQ(quantized_format_for(r, forward_slot(0, ForwardTensor::kWeight)), kRowwiseFormat);
}

TEST(RowwiseTensor, CheckpointFormIsTheRowwiseDataAndItsScales) {
  const Tensor w = test::random_tensor({32, 64}, DType::kF32, 6);
  const RowwiseQuantizer q(DType::kE4M3, true, 0.f);
  auto t = q.quantize(w, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  const auto state = t->rowwise_state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[1].first, ".scale_inv");
  EXPECT_EQ(state[1].second.shape(), (Shape{32}));
  EXPECT_EQ(t->positive_state(), std::vector<std::string>{".scale_inv"});
  // A direction's buffers of the wrong shape are refused with the rule.
  const std::string message = test::error_of([] {
    RowwiseFP8Tensor bad({4, 8}, Tensor::zeros({4, 8}, DType::kE4M3),
                         Tensor::zeros({8}, DType::kF32), Tensor(), Tensor(), Ownership::kOwned);
  });
  EXPECT_NE(message.find("one per row"), std::string::npos) << message;
}

}  // namespace
}  // namespace octet
