// Quartet II's backward cast against the f64 model of tests/support/quartet2_model.h: the
// 128-point random-sign transform and its inverse, MS-EDEN's codes, scales and decode scale,
// E4M3 stochastic rounding's frequencies, the unbiasedness of the rotated cast, shape errors, and
// the recipe's JSON.
#include "kernels/math/quartet2.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/nvfp4_tensor.h"
#include "runtime/recipe.h"
#include "tests/support/quartet2_model.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

namespace model = test::quartet2;

std::vector<double> widened(const Tensor& t) {
  const std::vector<float> v = t.to_floats();
  return {v.begin(), v.end()};
}

// Rows whose magnitudes vary by 2^+-8 from one 16-block to the next, and one zero block.
Tensor varied(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = test::random_tensor({rows, cols}, DType::kF32, seed);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < rows * cols; ++i)
    p[i] = std::ldexp(p[i], static_cast<int>(i / 16 % 17) - 8);
  for (int64_t i = 0; i < 16; ++i) p[cols + i] = 0.f;
  return t;
}

TEST(Rht128, IsTheRandomSignHadamardTransformInF64) {
  const int64_t rows = 3, cols = 256;
  const Tensor x = varied(rows, cols, 5);
  const Tensor y = ops::rht128(x, 77, 1000);
  const std::vector<double> want = model::rht128_rows(widened(x), rows, cols, 77, 1000);
  const std::vector<float> got = y.to_floats();
  for (size_t i = 0; i < got.size(); ++i) {
    // Rounded once to f32 from f64 sums: within half an ulp of the exact value (and a hair).
    ASSERT_NEAR(got[i], want[i], 0x1p-24 * 1.0001 * std::fabs(want[i]) + 1e-37) << i;
  }
  // The inverse gives x back to within the rounding of y; other signs give other values.
  const std::vector<float> back = ops::rht128(y, 77, 1000, true).to_floats();
  const std::vector<float> xv = x.to_floats();
  for (int64_t c = 0; c < rows * cols / 128; ++c) {
    double chunk_max = 0;
    for (int64_t i = 0; i < 128; ++i)
      chunk_max = std::max(chunk_max, double{std::fabs(xv[c * 128 + i])});
    for (int64_t i = 0; i < 128; ++i) {
      ASSERT_NEAR(back[c * 128 + i], xv[c * 128 + i], 0x1p-21 * chunk_max) << c * 128 + i;
    }
  }
  EXPECT_FALSE(test::same_bits(y, ops::rht128(x, 77, 1128)));
  EXPECT_FALSE(test::same_bits(y, ops::rht128(x, 78, 1000)));
  EXPECT_THAT(test::error_of([&] {
                ops::rht128(Tensor::zeros({2, 96}, DType::kF32), 1, 0);
              }),
              ::testing::HasSubstr("multiple of 128"));
}

struct Eden {
  Tensor data, scales, decode;
};
Eden eden(const Tensor& v, uint64_t seed, uint64_t offset) {
  Eden e{Tensor::empty(nvfp4_data_shape(v.rows(), v.cols()), DType::kU8),
         Tensor::empty(nvfp4_scale_shape(v.rows(), v.cols()), DType::kE4M3),
         Tensor::empty({1}, DType::kF32)};
  test::poison(e.data);
  test::poison(e.scales);
  ops::quantize_nvfp4_eden(v, seed, offset, e.data, e.scales, e.decode);
  return e;
}

uint8_t nibble(const Tensor& data, int64_t cols, int64_t r, int64_t c) {
  const uint8_t byte = data.data_as<uint8_t>()[r * (cols / 2) + c / 2];
  return (c & 1) ? byte >> 4 : byte & 0xF;
}

TEST(MsEden, CodesScalesAndDecodeScaleMatchTheModel) {
  const int64_t rows = 16, cols = 256;  // NVFP4's layouts take rows in 16s
  const Tensor v = ops::rht128(varied(rows, cols, 9), 3, 0);
  const Eden got = eden(v, 3, 128);
  const model::Cast want = model::eden(widened(v), rows, cols, 3, 128);
  EXPECT_NEAR(got.decode.item(), want.decode, 1e-6 * want.decode);
  const int64_t stride = got.scales.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 16; ++b) {
      const uint8_t sf = got.scales.data_as<uint8_t>()[r * stride + b];
      ASSERT_EQ(sf, want.scales[static_cast<size_t>(r * (cols / 16) + b)]) << r << ", " << b;
    }
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(nibble(got.data, cols, r, c), want.codes[static_cast<size_t>(r * cols + c)])
          << r << ", " << c;
    }
  }
  // The largest corrected scale lands on 256; the layout's padding rows are zero.
  double top = 0;
  for (uint8_t sf : want.scales) top = std::max(top, model::e4m3_value(sf));
  EXPECT_EQ(top, 256.0);
  for (int64_t i = rows * stride; i < got.scales.numel(); ++i) {
    ASSERT_EQ(got.scales.data_as<uint8_t>()[i], 0) << "padding " << i;
  }
}

TEST(MsEden, AZeroTensorCastsToZeroWithDecodeScaleZero) {
  const Eden got = eden(Tensor::zeros({16, 128}, DType::kF32), 1, 0);
  EXPECT_EQ(got.decode.item(), 0.f);
  for (int64_t i = 0; i < got.data.numel(); ++i) ASSERT_EQ(got.data.data_as<uint8_t>()[i], 0);
  for (int64_t i = 0; i < got.scales.numel(); ++i) ASSERT_EQ(got.scales.data_as<uint8_t>()[i], 0);
}

TEST(MsEden, ScalesRoundStochasticallyToTheirE4M3NeighboursWithoutBias) {
  // t between two E4M3 values, normal and subnormal: the frequency of the upper one over 4096
  // draws is its distance fraction, within 4 standard deviations.
  for (const float t : {200.f, 17.3f, 1.7f, 0.0061f}) {
    uint8_t lo = to_e4m3(t);
    if (from_e4m3(lo) > t) --lo;
    const double lo_v = model::e4m3_value(lo),
                 hi_v = model::e4m3_value(static_cast<uint8_t>(lo + 1));
    const double p = (t - lo_v) / (hi_v - lo_v);
    int up = 0;
    const int n = 4096;
    for (int i = 0; i < n; ++i) {
      const uint8_t code =
          math::e4m3_stochastic(t, detail::philox_word(11, static_cast<uint64_t>(i)));
      ASSERT_TRUE(code == lo || code == lo + 1) << t;
      up += code == lo + 1;
    }
    EXPECT_NEAR(up / double{n}, p, 4 * std::sqrt(p * (1 - p) / n) + 1e-9) << "t " << t;
  }
  EXPECT_EQ(math::e4m3_stochastic(256.f, 0xFFFFFFFFu), to_e4m3(256.f));  // exact: never moves
}

TEST(MsEden, TheRotatedCastIsUnbiased) {
  // The mean over fresh signs and draws of inverse(dequant(MS-EDEN(H d x))) tends to x: its error
  // falls as 1 / sqrt(draws) (16 for 256: measured 15.7); a bias would stay.
  const int64_t rows = 16, cols = 128, n = rows * cols;
  const Tensor x = test::random_tensor({rows, cols}, DType::kF32, 21);
  const std::vector<float> xv = x.to_floats();
  std::vector<double> mean(static_cast<size_t>(n), 0.0);
  double single = 0;
  const int draws = 256;
  for (int k = 0; k < draws; ++k) {
    const uint64_t at = static_cast<uint64_t>(k) * 1000;
    const Eden e = eden(ops::rht128(x, 5, at), 5, at + 128);
    const Tensor values =
        ops::scale(ops::expand_nvfp4(e.data, e.scales, rows, cols, DType::kF32), e.decode.item());
    const std::vector<float> back = ops::rht128(values, 5, at, true).to_floats();
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      mean[static_cast<size_t>(i)] += back[static_cast<size_t>(i)] / double{draws};
      err += std::pow(back[static_cast<size_t>(i)] - xv[static_cast<size_t>(i)], 2);
      norm += std::pow(xv[static_cast<size_t>(i)], 2);
    }
    if (k == 0) single = std::sqrt(err / norm);
  }
  double err = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += std::pow(mean[static_cast<size_t>(i)] - xv[static_cast<size_t>(i)], 2);
    norm += std::pow(xv[static_cast<size_t>(i)], 2);
  }
  // (Without the scale correction the mean stays at about a seventh of one cast's error.)
  EXPECT_LT(std::sqrt(err / norm), single / 10) << "one cast " << single;
}

// The forward operands' row-wise cast, as the forward GEMM reads it, from the recipe's quantizer.
struct ForwardCast {
  std::shared_ptr<QuantizedTensor> cast;
  const NVFP4Tensor* t = nullptr;
};
ForwardCast forward_cast(const Recipe& recipe, ForwardTensor role, const Tensor& x) {
  ForwardCast f;
  f.cast = make_quantizer(recipe, nullptr, forward_slot(0, role))
               ->quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
  f.t = dynamic_cast<const NVFP4Tensor*>(f.cast.get());
  return f;
}

TEST(Quartet2Forward, CastsMatchTheModelWithAndWithoutFourOverSix) {
  const int64_t rows = 32, cols = 256;
  const Tensor x = varied(rows, cols, 21);
  const std::vector<double> xv = widened(x);
  const model::Cast on = model::forward(xv, rows, cols, true);
  const model::Cast off = model::forward(xv, rows, cols, false);
  EXPECT_NE(on.scales, off.scales);
  EXPECT_NE(on.codes, off.codes);
  for (const bool four_over_six : {true, false}) {
    const Recipe recipe =
        parse_recipe(four_over_six ? R"({"recipe": "nvfp4", "method": "quartet2"})"
                                   : R"({"recipe": "nvfp4", "method": "quartet2",
                                                          "nvfp4_4over6": "none"})");
    const model::Cast& want = four_over_six ? on : off;
    // Without 4over6 the largest block lands on 448 exactly, with it at most 1.5 * 256.
    double top = 0;
    for (uint8_t sf : want.scales) top = std::max(top, model::e4m3_value(sf));
    if (four_over_six) {
      EXPECT_LE(top, 384.0);
    } else {
      EXPECT_EQ(top, 448.0);
    }
    for (const ForwardTensor role : {ForwardTensor::kInput, ForwardTensor::kWeight}) {
      SCOPED_TRACE(std::string(four_over_six ? "4over6 " : "map to 6 ") +
                   (role == ForwardTensor::kInput ? "input" : "weight"));
      const ForwardCast got = forward_cast(recipe, role, x);
      ASSERT_NE(got.t, nullptr);
      EXPECT_FALSE(got.t->layout().tiles_2d);
      EXPECT_EQ(got.t->layout().e4m3_max, four_over_six ? 256.f : 448.f);
      const Tensor& data = got.t->rowwise_data();
      const Tensor& scales = got.t->rowwise_scales();
      const int64_t stride = scales.size(1);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < cols / 16; ++b) {
          ASSERT_EQ(scales.data_as<uint8_t>()[r * stride + b],
                    want.scales[static_cast<size_t>(r * (cols / 16) + b)])
              << r << ", " << b;
        }
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(nibble(data, cols, r, c), want.codes[static_cast<size_t>(r * cols + c)])
              << r << ", " << c;
        }
      }
      const std::vector<float> back = ops::dequantize(*got.cast, DType::kF32).to_floats();
      for (size_t i = 0; i < back.size(); ++i) {
        ASSERT_NEAR(back[i], want.values[i], 0x1p-22 * std::fabs(want.values[i])) << i;
      }
    }
  }
}

TEST(Quartet2Recipe, JsonKeysRoundTripAndTeSwitchesAreRefused) {
  const Recipe r = parse_recipe(R"({"recipe": "nvfp4", "method": "quartet2"})");
  EXPECT_EQ(r, Recipe::nvfp4_quartet2());
  EXPECT_TRUE(r.is_quartet2());
  EXPECT_TRUE(r.uses_rng_streams());
  EXPECT_EQ(recipe_from_json(recipe_to_json(r)), r);
  EXPECT_EQ(recipe_to_json(r).dump(),
            R"({"method":"quartet2","nvfp4_4over6":"all","recipe":"nvfp4"})");
  EXPECT_EQ(parse_recipe(R"({"recipe": "nvfp4", "method": "te"})"), Recipe::nvfp4());
  EXPECT_FALSE(Recipe::nvfp4().is_quartet2());
  EXPECT_THAT(test::error_of([] {
                parse_recipe(R"({"recipe": "nvfp4", "method": "quartet2", "disable_rht": true})");
              }),
              ::testing::HasSubstr("recipe.disable_rht"));
  EXPECT_THAT(
      test::error_of([] { parse_recipe(R"({"recipe": "nvfp4", "method": "quartet3"})"); }),
      ::testing::AllOf(::testing::HasSubstr("recipe.method"), ::testing::HasSubstr("quartet2")));
}

}  // namespace
}  // namespace octet
