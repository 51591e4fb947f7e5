// Blockwise FP8 (TE's Float8BlockScaling) against a reference written here from TE's rules: each
// block's scale = 448 / amax in f32 (power of two: mantissa cleared), elements with CUDA's host
// FP8 cast, scale_inv in TE's GEMM-ready layout; the GEMM against f64 sums of K-block partial
// products times both block scales; hand-worked scales; the usage rules and 2D x 2D refused.
#include "kernels/blockwise.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp8.h"
#include "runtime/fp8_scaling.h"
#include "tests/kernels/scale_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kB = 128;

using test::reference_scale;

// Blocks whose magnitudes differ by up to 2^+-30, with a zero block, inf, NaN and a block whose
// amax is so small that 448 / amax overflows f32.
std::vector<float> mixed(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v = test::random_tensor({rows, cols}, DType::kF32, seed).to_floats();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      v[static_cast<size_t>(r * cols + c)] = std::ldexp(
          v[static_cast<size_t>(r * cols + c)], static_cast<int>((r * 7 + c / kB * 11) % 61) - 30);
    }
  }
  for (int64_t c = 0; c < std::min<int64_t>(cols, kB); ++c)
    v[static_cast<size_t>(c)] = 0.f;  // row 0, block 0
  v[static_cast<size_t>(1 * cols + 5)] = kInf;
  v[static_cast<size_t>(2 * cols + 7)] = -kInf;
  v[static_cast<size_t>(3 * cols + 9)] = kNaN;
  for (int64_t c = 0; c < std::min<int64_t>(cols, kB); ++c) {
    v[static_cast<size_t>(4 * cols + c)] = c == 0 ? 1e-39f : 0.f;  // amax a subnormal
  }
  return v;
}

using Expected = test::ExpectedCast;  // scale_inv in the GEMM-ready layout, padding 0

// Row-wise blocks of `x` (rows, cols): 1x128 along a row, or 128x128 tiles.
Expected reference(const std::vector<float>& x, int64_t rows, int64_t cols, BlockScaling blocks,
                   DType fp8, bool pow2) {
  const Shape ss = blockwise_scale_shape(blocks, rows, cols);
  Expected e{std::vector<uint8_t>(static_cast<size_t>(rows * cols)),
             std::vector<float>(static_cast<size_t>(ss[0] * ss[1]), 0.f)};
  const int64_t band = blocks == BlockScaling::k1D ? 1 : kB;
  for (int64_t r0 = 0; r0 < rows; r0 += band) {
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const int64_t r1 = std::min(rows, r0 + band), c1 = std::min(cols, c0 + kB);
      float amax = 0.f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float a = std::fabs(x[static_cast<size_t>(r * cols + c)]);
          if (!std::isnan(a) && a > amax) amax = a;
        }
      }
      const float s = reference_scale(amax, fp8_max(fp8), pow2, 0.f, FLT_MAX);
      const int64_t at =
          blocks == BlockScaling::k1D ? (c0 / kB) * ss[1] + r0 : (r0 / kB) * ss[1] + c0 / kB;
      e.scale_inv[static_cast<size_t>(at)] = 1.f / s;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const auto at_rc = static_cast<size_t>(r * cols + c);
          test::reference_cast_into(e, at_rc, x[at_rc], s, fp8);
        }
      }
    }
  }
  return e;
}

::testing::AssertionResult equal_bits(const Tensor& got_data, const Tensor& got_scales,
                                      const Expected& want) {
  const auto* d = got_data.data_as<uint8_t>();
  for (size_t i = 0; i < want.data.size(); ++i) {
    if (d[i] != want.data[i]) {
      return ::testing::AssertionFailure() << "data[" << i << "]: got 0x" << std::hex << int{d[i]}
                                           << ", want 0x" << int{want.data[i]};
    }
  }
  const float* s = got_scales.data_as<float>();
  for (size_t i = 0; i < want.scale_inv.size(); ++i) {
    if (test::bits_of(s[i]) != test::bits_of(want.scale_inv[i])) {
      return ::testing::AssertionFailure()
             << "scale_inv[" << i << "]: got " << s[i] << ", want " << want.scale_inv[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class BlockwiseCast : public ::testing::TestWithParam<std::tuple<BlockScaling, DType, bool>> {};

TEST_P(BlockwiseCast, RowwiseMatchesTheReferenceBitForBit) {
  const auto [blocks, fp8, pow2] = GetParam();
  const int64_t rows = 260, cols = 300;  // partial blocks in both directions
  const std::vector<float> x = mixed(rows, cols, 3);
  const Tensor xt = Tensor::from_floats(x, {rows, cols});
  Tensor data = Tensor::empty({rows, cols}, fp8);
  Tensor scales = Tensor::empty(blockwise_scale_shape(blocks, rows, cols), DType::kF32);
  test::poison(data);
  test::poison(scales);
  FP8CastCounts counts;
  ops::quantize_blockwise(xt, {blocks, fp8_max(fp8), pow2, 0.f}, data, scales, &counts);
  const Expected want = reference(x, rows, cols, blocks, fp8, pow2);
  EXPECT_TRUE(equal_bits(data, scales, want));
  EXPECT_EQ(counts.total, rows * cols);
  // The inf values saturate (and, their block's scale being 1, whatever else there exceeds the
  // max); flushes are the small values of blocks with a large amax.
  EXPECT_EQ(counts.saturated, want.saturated);
  EXPECT_EQ(counts.flushed, want.flushed);
  EXPECT_GE(want.saturated, 2);
  EXPECT_GT(want.flushed, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, BlockwiseCast,
                         ::testing::Combine(::testing::Values(BlockScaling::k1D, BlockScaling::k2D),
                                            ::testing::Values(DType::kE4M3, DType::kE5M2),
                                            ::testing::Bool()));

// quantize_blockwise_both: the bytes, scales and counts of quantize_blockwise of x and of its
// transpose, both equal to the reference, for f32 and bf16 inputs and ragged shapes.
TEST(BlockwiseBothWays, AreTheTwoCastsByteForByte) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},     {1, 130},   {130, 1},
                                                {129, 257}, {256, 128}, {260, 300}};
  for (const auto& [rows, cols] : shapes) {
    const std::vector<float> v =
        rows >= 5 && cols >= 10 ? mixed(rows, cols, 9)
                                : test::random_tensor({rows, cols}, DType::kF32, 9).to_floats();
    for (DType input : {DType::kF32, DType::kBF16}) {
      const Tensor x = Tensor::from_floats(v, {rows, cols}, input);
      const Tensor xt = ops::transpose_2d(x);
      for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
        for (bool pow2 : {true, false}) {
          SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " " +
                       std::string(dtype_name(input)) + " to " + std::string(dtype_name(fp8)) +
                       (pow2 ? " pow2" : ""));
          const ops::BlockwiseCast cast{BlockScaling::k1D, fp8_max(fp8), pow2, 0.f};
          Tensor row = Tensor::empty({rows, cols}, fp8), col = Tensor::empty({cols, rows}, fp8);
          Tensor row_s =
              Tensor::empty(blockwise_scale_shape(BlockScaling::k1D, rows, cols), DType::kF32);
          Tensor col_s =
              Tensor::empty(blockwise_scale_shape(BlockScaling::k1D, cols, rows), DType::kF32);
          for (Tensor* t : {&row, &col, &row_s, &col_s}) test::poison(*t);
          FP8CastCounts both;
          ops::quantize_blockwise_both(x, cast, row, row_s, col, col_s, &both);
          Tensor row2 = Tensor::empty(row.shape(), fp8), col2 = Tensor::empty(col.shape(), fp8);
          Tensor row2_s = Tensor::empty(row_s.shape(), DType::kF32);
          Tensor col2_s = Tensor::empty(col_s.shape(), DType::kF32);
          FP8CastCounts apart;
          ops::quantize_blockwise(x, cast, row2, row2_s, &apart);
          ops::quantize_blockwise(xt, cast, col2, col2_s, &apart);
          for (const auto& [got, want] :
               {std::pair{&row, &row2}, {&row_s, &row2_s}, {&col, &col2}, {&col_s, &col2_s}}) {
            EXPECT_EQ(std::memcmp(got->data(), want->data(), want->nbytes()), 0);
          }
          EXPECT_EQ(both.total, 2 * rows * cols);
          EXPECT_EQ(both.total, apart.total);
          EXPECT_EQ(both.saturated, apart.saturated);
          EXPECT_EQ(both.flushed, apart.flushed);
          if (input == DType::kBF16) continue;  // the reference's overflow value is f32's
          const std::vector<float> xv = x.to_floats(), xtv = xt.to_floats();
          EXPECT_TRUE(
              equal_bits(row, row_s, reference(xv, rows, cols, BlockScaling::k1D, fp8, pow2)));
          EXPECT_TRUE(
              equal_bits(col, col_s, reference(xtv, cols, rows, BlockScaling::k1D, fp8, pow2)));
        }
      }
    }
  }
}

TEST(BlockwiseScale, HandWorkedValues) {
  // E4M3, power of two: 448 / 3 = 149.33 -> 128; 448 / 1 -> 256; 448 / 0.1 = 4480 -> 4096;
  // amax 0 -> scale 1; inf -> 1 (TE's kernel); a tiny amax overflows to the input's max, then
  // 2^127 (bf16: its max 2^127 * 1.99 also rounds down to 2^127).
  EXPECT_EQ(blockwise_scale(3.f, 448.f, 0.f, true, FLT_MAX), 128.f);
  EXPECT_EQ(blockwise_scale(1.f, 448.f, 0.f, true, FLT_MAX), 256.f);
  EXPECT_EQ(blockwise_scale(0.1f, 448.f, 0.f, true, FLT_MAX), 4096.f);
  EXPECT_EQ(blockwise_scale(0.f, 448.f, 0.f, true, FLT_MAX), 1.f);
  EXPECT_EQ(blockwise_scale(kInf, 448.f, 0.f, true, FLT_MAX), 1.f);
  EXPECT_EQ(blockwise_scale(1e-39f, 448.f, 0.f, true, FLT_MAX), std::ldexp(1.f, 127));
  EXPECT_EQ(scale_inverse(std::ldexp(1.f, 127)), std::ldexp(1.f, -127));  // an f32 subnormal
  // Without power of two: the plain quotient; epsilon lifts a small amax.
  EXPECT_EQ(blockwise_scale(3.f, 448.f, 0.f, false, FLT_MAX), 448.f / 3.f);
  EXPECT_EQ(blockwise_scale(1e-3f, 448.f, 0.5f, false, FLT_MAX), 896.f);
}

TEST(BlockwiseQuantizer, ColumnwiseIsTheRowwiseCastOfTheTranspose) {
  const int64_t rows = 200, cols = 144;
  const Tensor x = Tensor::from_floats(mixed(rows, cols, 5), {rows, cols});
  for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
    const BlockwiseQuantizer q(DType::kE4M3, blocks, true, 0.f);
    auto t = q.quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip);
    const auto& b = dynamic_cast<const BlockwiseFP8Tensor&>(*t);
    const std::vector<float> xt = ops::transpose_2d(x).to_floats();
    EXPECT_TRUE(equal_bits(b.columnwise_data(), b.columnwise_scales(),
                           reference(xt, cols, rows, blocks, DType::kE4M3, true)));
    if (blocks == BlockScaling::k2D) {
      // 128x128 tiles: the column-wise bytes are exactly the row-wise bytes transposed.
      const Tensor back = ops::transpose_2d(b.columnwise_data());
      EXPECT_EQ(std::memcmp(back.data(), b.rowwise_data().data(), back.nbytes()), 0);
    }
  }
}

TEST(BlockwiseQuantizer, UsageRules) {
  const int64_t rows = 64, cols = 256;
  const Tensor x = test::random_tensor({rows, cols}, DType::kF32, 7);
  // 2D: the missing direction is the transpose, no source needed.
  const auto q2 = std::make_shared<BlockwiseQuantizer>(DType::kE4M3, BlockScaling::k2D, true, 0.f);
  auto w = q2->quantize(x, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  ops::update_usage(*w, Usage::kBoth);
  const auto full = q2->quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
  const auto& a = dynamic_cast<const BlockwiseFP8Tensor&>(*w);
  const auto& b = dynamic_cast<const BlockwiseFP8Tensor&>(*full);
  EXPECT_EQ(std::memcmp(a.columnwise_data().data(), b.columnwise_data().data(),
                        b.columnwise_data().nbytes()),
            0);
  EXPECT_EQ(std::memcmp(a.columnwise_scales().data(), b.columnwise_scales().data(),
                        b.columnwise_scales().nbytes()),
            0);
  // 1D: each direction from high precision; without the source it says so.
  const auto q1 = std::make_shared<BlockwiseQuantizer>(DType::kE4M3, BlockScaling::k1D, true, 0.f);
  auto act = q1->quantize(x, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
  const std::string message = test::error_of([&] { ops::update_usage(*act, Usage::kBoth); });
  EXPECT_NE(message.find("quantized from high precision"), std::string::npos) << message;
  ops::update_usage(*act, Usage::kBoth, &x);
  EXPECT_TRUE(act->has(Usage::kColumnwise));
}

// f64 reference of the block-scaled GEMM: per K-block the exact sum of products of the FP8
// values, times both blocks' scale_inv; and the sum of |terms| for the tolerance.
struct GemmRef {
  std::vector<double> y, mag;
};
GemmRef gemm_reference(const BlockwiseFP8Tensor& a, const BlockwiseFP8Tensor& b) {
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  const std::vector<float> av =
      ops::dequantize_blockwise(a.rowwise_data(), a.rowwise_scales(), a.blocks(), DType::kF32)
          .to_floats();
  const std::vector<float> bv =
      ops::dequantize_blockwise(b.rowwise_data(), b.rowwise_scales(), b.blocks(), DType::kF32)
          .to_floats();
  GemmRef r{std::vector<double>(static_cast<size_t>(m * n), 0),
            std::vector<double>(static_cast<size_t>(m * n), 0)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t l = 0; l < k; ++l) {
        const double t = static_cast<double>(av[static_cast<size_t>(i * k + l)]) *
                         bv[static_cast<size_t>(j * k + l)];
        r.y[static_cast<size_t>(i * n + j)] += t;
        r.mag[static_cast<size_t>(i * n + j)] += std::fabs(t);
      }
    }
  }
  return r;
}

TEST(BlockwiseGemm, EveryBlockPairingMatchesF64AndTwoDByTwoDIsRefused) {
  const int64_t m = 48, n = 80, k = 304;  // a partial last K-block of 48
  const Tensor x = test::random_tensor({m, k}, DType::kF32, 11);
  const Tensor w = test::random_tensor({n, k}, DType::kF32, 12, 0.05f);
  for (const auto& [xa, wb] : {std::pair{BlockScaling::k1D, BlockScaling::k2D},
                               std::pair{BlockScaling::k1D, BlockScaling::k1D},
                               std::pair{BlockScaling::k2D, BlockScaling::k1D}}) {
    const BlockwiseQuantizer qx(DType::kE4M3, xa, true, 0.f), qw(DType::kE4M3, wb, true, 0.f);
    auto a = qx.quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    auto b = qw.quantize(w, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    const Tensor bias = test::random_tensor({n}, DType::kF32, 13);
    ops::FP8GemmOptions o;
    o.bias = &bias;
    const Tensor y = ops::fp8_gemm(*a, *b, ops::GemmLayout::kFprop, DType::kF32, o);
    const GemmRef ref = gemm_reference(dynamic_cast<const BlockwiseFP8Tensor&>(*a),
                                       dynamic_cast<const BlockwiseFP8Tensor&>(*b));
    const std::vector<float> got = y.to_floats(), bv = bias.to_floats();
    for (size_t i = 0; i < got.size(); ++i) {
      // f32 accumulation over 3 K-blocks of at most 128 exact products.
      const double want = ref.y[i] + bv[i % static_cast<size_t>(n)];
      ASSERT_LE(std::fabs(got[i] - want),
                1e-6 + 4e-7 * (ref.mag[i] + std::fabs(bv[i % static_cast<size_t>(n)])))
          << "element " << i << " (" << int(xa) << "D x " << int(wb) << "D)";
    }
  }
  const BlockwiseQuantizer q2(DType::kE4M3, BlockScaling::k2D, true, 0.f);
  auto a = q2.quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  auto b = q2.quantize(w, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  const std::string message =
      test::error_of([&] { ops::fp8_gemm(*a, *b, ops::GemmLayout::kFprop, DType::kF32); });
  EXPECT_NE(message.find("2D by 2D"), std::string::npos) << message;
}

TEST(BlockwiseGemm, ShapeRuleNamesTheShape) {
  test::expect_shape_rule_names_the_shape(kBlockwiseFormat);
}

TEST(BlockwiseRecipe, JsonKeysDefaultsAndTheTwoDRule) {
  const Recipe r = parse_recipe(R"({"recipe": "blockwise"})");
  EXPECT_EQ(r, Recipe::blockwise());
  EXPECT_TRUE(r.power_2_scale);
  EXPECT_EQ(r.block_scaling(forward_slot(0, ForwardTensor::kWeight)), BlockScaling::k2D);
  EXPECT_EQ(r.block_scaling(forward_slot(1, ForwardTensor::kInput)), BlockScaling::k1D);
  EXPECT_EQ(r.block_scaling(backward_slot(0, BackwardTensor::kGradOutput)), BlockScaling::k1D);
  EXPECT_EQ(recipe_from_json(recipe_to_json(r)), r);
  const Recipe hybrid = parse_recipe(R"({"recipe": "blockwise", "fp8_format": "hybrid"})");
  EXPECT_EQ(hybrid.dtype(FP8Direction::kBackward), DType::kE5M2);
  const std::string message = test::error_of(
      [] { parse_recipe(R"({"recipe": "blockwise", "x_block_scaling_dim": 2})", "fp8.recipe"); });
  EXPECT_NE(message.find("fp8.recipe.x_block_scaling_dim and fp8.recipe.w_block_scaling_dim"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("2D by 2D"), std::string::npos) << message;
  EXPECT_NE(test::error_of([] {
              parse_recipe(R"({"recipe": "blockwise", "margin": 1})");
            }).find("unknown key"),
            std::string::npos);
}

}  // namespace
}  // namespace octet
