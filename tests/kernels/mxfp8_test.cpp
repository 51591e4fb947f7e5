// MXFP8 block quantization against a reference written here: E8M0 exponents from the formula in
// f64 (cross-checked with CUDA's host conversion), elements with CUDA's host FP8 cast, exact
// expansion, saturation, and the usage rules (each direction from high precision).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp8.h"
#include "tests/support/mixed_magnitudes.h"
#include "tests/support/test_util.h"

#if OCTET_HAVE_CUDA_HEADERS
#include <cuda_fp8.h>  // CUDA's host E8M0 conversion, the exponent reference
#endif

namespace octet {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using test::mixed_magnitudes;
using test::reference_cast;

// DESIGN.md: e = e8m0(block_amax / fp8_max) rounded up to a power of two: the smallest e in
// [0, 254] with 2^(e - 127) >= the f32 quotient.
uint8_t reference_e8m0(double block_amax, double fp8_max) {
  const float q = static_cast<float>(block_amax / fp8_max);  // the f32 division, rounded once
  uint8_t e = 0;
  if (std::isinf(q)) {
    e = 254;
  } else if (q > std::ldexp(1.0, -127)) {
    int ex = 0;
    const double m = std::frexp(static_cast<double>(q), &ex);  // q = m * 2^ex, m in [0.5, 1)
    e = static_cast<uint8_t>(std::min(254, (m == 0.5 ? ex - 1 : ex) + 127));
  }
#if OCTET_HAVE_CUDA_HEADERS
  EXPECT_EQ(e, __nv_cvt_float_to_e8m0(q, __NV_SATFINITE, cudaRoundPosInf)) << "q = " << q;
#endif
  return e;
}

struct Mismatches {
  int64_t exponents = 0;
  int64_t elements = 0;
};

// Checks one direction: data (R, C) and exponents (R, ceil(C / 32)) of the matrix m (R, C),
// where m is x for row-wise and x's transpose for column-wise.
Mismatches check_direction(const std::vector<float>& m, int64_t rows, int64_t cols,
                           const Tensor& data, const Tensor& scales, DType fp8) {
  const double max = fp8 == DType::kE4M3 ? 448.0 : 57344.0;
  const int64_t blocks = (cols + 31) / 32;
  const uint8_t* q = data.data_as<uint8_t>();
  const uint8_t* e = scales.data_as<uint8_t>();
  Mismatches bad;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * 32, c1 = std::min(cols, c0 + 32);
      double amax = 0;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = m[static_cast<size_t>(r * cols + c)];
        if (!std::isnan(v)) amax = std::max(amax, std::fabs(static_cast<double>(v)));
      }
      const uint8_t want_e = reference_e8m0(amax, max);
      bad.exponents += e[r * blocks + b] != want_e;
      const double multiplier = std::ldexp(1.0, 127 - want_e);
      for (int64_t c = c0; c < c1; ++c) {
        const double v = m[static_cast<size_t>(r * cols + c)];
        bad.elements += q[r * cols + c] != reference_cast(static_cast<float>(v * multiplier), fp8);
      }
    }
  }
  return bad;
}

using BlockParam = std::tuple<Shape, DType, DType>;  // shape, fp8, input
class MXFP8Blocks : public ::testing::TestWithParam<BlockParam> {};

TEST_P(MXFP8Blocks, ExponentsAndElementsMatchTheReference) {
  const auto [shape, fp8, input] = GetParam();
  const Tensor x = mixed_magnitudes(shape, input, 61);
  const std::vector<float> v = x.to_floats();  // what the kernel reads
  const MXFP8Quantizer q(fp8);
  auto t = std::dynamic_pointer_cast<MXFP8Tensor>(
      q.quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip));
  ASSERT_NE(t, nullptr);
  const int64_t rows = x.rows(), cols = x.cols();
  ASSERT_EQ(t->rowwise_scales().shape(), Shape({rows, (cols + 31) / 32}));
  ASSERT_EQ(t->columnwise_data().shape(), Shape({cols, rows}));
  ASSERT_EQ(t->columnwise_scales().shape(), Shape({cols, (rows + 31) / 32}));

  const Mismatches row =
      check_direction(v, rows, cols, t->rowwise_data(), t->rowwise_scales(), fp8);
  EXPECT_EQ(row.exponents, 0) << "row-wise exponents";
  EXPECT_EQ(row.elements, 0) << "row-wise elements";
  std::vector<float> vt(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) vt[c * rows + r] = v[r * cols + c];
  }
  const Mismatches col =
      check_direction(vt, cols, rows, t->columnwise_data(), t->columnwise_scales(), fp8);
  EXPECT_EQ(col.exponents, 0) << "column-wise exponents";
  EXPECT_EQ(col.elements, 0) << "column-wise elements";
}

INSTANTIATE_TEST_SUITE_P(Shapes, MXFP8Blocks,
                         ::testing::Combine(::testing::Values(Shape{1, 32}, Shape{16, 64},
                                                              Shape{128, 128}, Shape{993, 512},
                                                              Shape{8, 32, 1024}),
                                            ::testing::Values(DType::kE4M3, DType::kE5M2),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

TEST(MXFP8, PartialBlocksAtTheEndOfARow) {
  // 40 columns: one block of 32 and one of 8; 3 rows: one partial column-wise block.
  const Tensor x = mixed_magnitudes({3, 40}, DType::kF32, 62);
  const std::vector<float> v = x.to_floats();
  Tensor data = Tensor::empty({3, 40}, DType::kE4M3), scales = Tensor::empty({3, 2}, DType::kE8M0);
  test::poison(data);
  test::poison(scales);
  ops::quantize_mxfp8(x, Usage::kRowwise, data, scales);
  const Mismatches bad = check_direction(v, 3, 40, data, scales, DType::kE4M3);
  EXPECT_EQ(bad.exponents + bad.elements, 0);
}

// code value * 2^(e - 127) in f64 for data (R, C) with exponents (R, ceil(C / 32)); past the f32
// range the f32 product is infinite.
std::vector<double> reference_expand(const Tensor& data, const Tensor& scales) {
  const int64_t rows = data.rows(), cols = data.cols(), blocks = (cols + 31) / 32;
  const uint8_t* d = data.data_as<uint8_t>();
  const uint8_t* e = scales.data_as<uint8_t>();
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double w = static_cast<double>(from_e4m3(d[i])) *
                     std::ldexp(1.0, e[(i / cols) * blocks + (i % cols) / 32] - 127);
    out[i] = std::fabs(w) > std::numeric_limits<float>::max() ? std::copysign(kInf, w) : w;
  }
  return out;
}

TEST(MXFP8, DequantizeIsTheExactBlockProduct) {
  // Finite values only: all_close cannot compare infinities (saturation is tested below).
  std::vector<float> v = mixed_magnitudes({64, 96}, DType::kF32, 63).to_floats();
  for (float& f : v) f = std::isfinite(f) ? f : 0.f;
  const Tensor x = Tensor::from_floats(v, {64, 96});
  const MXFP8Quantizer q(DType::kE4M3);
  auto t = std::dynamic_pointer_cast<MXFP8Tensor>(
      q.quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip));
  const std::vector<double> want_rows = reference_expand(t->rowwise_data(), t->rowwise_scales());
  EXPECT_TRUE(test::all_close(ops::dequantize(*t, DType::kF32).to_floats(), want_rows, {0, 0}));
  // From column-wise data alone: its own values, transposed back to the logical layout.
  const std::vector<double> cw = reference_expand(t->columnwise_data(), t->columnwise_scales());
  std::vector<double> want_cols(cw.size());
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t c = 0; c < 96; ++c) want_cols[r * 96 + c] = cw[c * 64 + r];
  }
  ops::update_usage(*t, Usage::kColumnwise);
  EXPECT_TRUE(test::all_close(ops::dequantize(*t, DType::kF32).to_floats(), want_cols, {0, 0}));
}

TEST(MXFP8, InfinitySaturatesAndNaNStaysNaN) {
  std::vector<float> v(64, 1.f);
  v[3] = kInf;
  v[40] = -kInf;
  v[41] = kNaN;
  const Tensor x = Tensor::from_floats(v, {1, 64});
  Tensor data = Tensor::empty({1, 64}, DType::kE4M3), scales = Tensor::empty({1, 2}, DType::kE8M0);
  ops::quantize_mxfp8(x, Usage::kRowwise, data, scales);
  const uint8_t* q = data.data_as<uint8_t>();
  EXPECT_EQ(scales.data_as<uint8_t>()[0], 254);  // inf / 448 saturates to 2^127
  EXPECT_EQ(q[3], 0x7E);                         // +max
  EXPECT_EQ(q[40], 0xFE);                        // -max
  EXPECT_EQ(q[41], 0x7F);                        // NaN
  EXPECT_EQ(q[0], 0x00);  // 1 * 2^-127 underflows next to an infinite block max
}

TEST(MXFP8, UsagesComeFromHighPrecisionOnly) {
  const Tensor x = mixed_magnitudes({64, 64}, DType::kBF16, 64);
  const MXFP8Quantizer q(DType::kE4M3);
  auto t = std::dynamic_pointer_cast<MXFP8Tensor>(
      q.quantize(x, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip));
  try {
    ops::update_usage(*t, Usage::kBoth);
    FAIL() << "column-wise MXFP8 data made without the source";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass the f32/bf16 source"), std::string::npos)
        << e.what();
  }
  const Tensor wrong_shape = x.reshape({32, 128});
  EXPECT_THROW(ops::update_usage(*t, Usage::kBoth, &wrong_shape), Error);
  ops::update_usage(*t, Usage::kBoth, &x);
  auto fresh = std::dynamic_pointer_cast<MXFP8Tensor>(
      q.quantize(x, Usage::kColumnwise, Ownership::kOwned, AmaxRecording::kSkip));
  for (auto get : {&MXFP8Tensor::columnwise_data, &MXFP8Tensor::columnwise_scales}) {
    const Tensor& a = ((*t).*get)();
    const Tensor& b = ((*fresh).*get)();
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  }
  // Dropping is always allowed; the row-wise data is then gone until requantized.
  ops::update_usage(*t, Usage::kColumnwise);
  EXPECT_EQ(t->usage(), Usage::kColumnwise);
  EXPECT_THROW(ops::update_usage(*t, Usage::kRowwise), Error);
}

TEST(MXFP8, QuantizeIntoEqualsAFreshQuantize) {
  auto q = std::make_shared<MXFP8Quantizer>(DType::kE4M3);
  const Tensor x1 = mixed_magnitudes({64, 96}, DType::kF32, 65);
  const Tensor x2 = test::random_tensor({64, 96}, DType::kF32, 66, 7.f);
  auto dst = std::dynamic_pointer_cast<MXFP8Tensor>(
      q->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  const Tensor row = dst->rowwise_data();
  ops::quantize_into(*dst, x2, AmaxRecording::kRecord);
  EXPECT_TRUE(dst->rowwise_data().shares_storage(row));
  auto fresh = std::dynamic_pointer_cast<MXFP8Tensor>(
      q->quantize(x2, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  for (auto get : {&MXFP8Tensor::rowwise_data, &MXFP8Tensor::rowwise_scales,
                   &MXFP8Tensor::columnwise_data, &MXFP8Tensor::columnwise_scales}) {
    const Tensor& a = ((*dst).*get)();
    const Tensor& b = ((*fresh).*get)();
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  }
}

TEST(MXFP8, ClearErrorsForBadBuffers) {
  const Tensor x = Tensor::zeros({4, 64}, DType::kF32);
  Tensor data = Tensor::empty({4, 64}, DType::kE4M3), scales = Tensor::empty({4, 1}, DType::kE8M0);
  try {
    ops::quantize_mxfp8(x, Usage::kRowwise, data, scales);
    FAIL() << "wrong exponent shape accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e8m0(4, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::quantize_mxfp8(x, Usage::kBoth, data, scales), Error);
  Tensor col = Tensor::empty({4, 64}, DType::kE4M3),
         col_scales = Tensor::empty({64, 1}, DType::kE8M0);
  EXPECT_THROW(ops::quantize_mxfp8(x, Usage::kColumnwise, col, col_scales),
               Error);  // needs (64, 4)
}

}  // namespace
}  // namespace octet
