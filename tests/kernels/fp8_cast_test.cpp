// The fused FP8 quantize kernel (row-wise + column-wise + amax in one pass), the byte transpose
// and dequantize, against independent references: CUDA's host conversion where the toolkit's
// headers exist (the scalar rule and the block cast are verified on all 2^32 inputs in
// fp8_exhaustive_test.cpp), f64 arithmetic elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::reference_cast;

struct CastCase {
  Shape shape;
  DType input;
  DType fp8;
};

class QuantizeFp8 : public ::testing::TestWithParam<CastCase> {};

TEST_P(QuantizeFp8, RowwiseColumnwiseAndAmaxInOnePass) {
  const CastCase c = GetParam();
  Tensor x = test::random_tensor(c.shape, c.input, 7, 40.f);
  // Plant values that exercise saturation, NaN (ignored by amax) and signed zero.
  std::vector<float> v = x.to_floats();
  v[0] = 1e9f;
  v[1] = -std::numeric_limits<float>::infinity();
  v[2] = std::numeric_limits<float>::quiet_NaN();
  v[3] = -0.f;
  x = Tensor::from_floats(v, c.shape, c.input);
  v = x.to_floats();  // what the kernel reads (bf16 inputs are already rounded)

  const float scale_value = c.fp8 == DType::kE4M3 ? 3.5f : 100.f;
  const Tensor scale = Tensor::from_floats({scale_value}, {1});
  Tensor row = Tensor::empty(c.shape, c.fp8);
  Tensor col = Tensor::empty({x.cols(), x.rows()}, c.fp8);
  Tensor amax = Tensor::from_floats({5.f}, {1});  // max-accumulated: 1e9 wins below
  test::poison(row);
  test::poison(col);
  ops::quantize_fp8(x, scale, &row, &col, &amax);

  const int64_t rows = x.rows(), cols = x.cols();
  const uint8_t* r = row.data_as<uint8_t>();
  const uint8_t* t = col.data_as<uint8_t>();
  int64_t bad_row = 0, bad_col = 0;
  double want_amax = 5.0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float xv = v[static_cast<size_t>(i * cols + j)];
      if (!std::isnan(xv)) want_amax = std::max(want_amax, static_cast<double>(std::fabs(xv)));
      const uint8_t want = reference_cast(xv * scale_value, c.fp8);
      bad_row += r[i * cols + j] != want;
      bad_col += t[j * rows + i] != want;
    }
  }
  EXPECT_EQ(bad_row, 0) << "row-wise bytes differ from the CUDA rule";
  EXPECT_EQ(bad_col, 0) << "column-wise bytes differ from the transposed CUDA rule";
  EXPECT_EQ(amax.item(), static_cast<float>(want_amax));
  const uint8_t max_code = c.fp8 == DType::kE4M3 ? 0x7E : 0x7B;
  EXPECT_EQ(r[0], max_code);         // 1e9 saturates
  EXPECT_EQ(r[1], 0x80 | max_code);  // -inf saturates
  EXPECT_EQ(r[2], 0x7F);             // NaN stays NaN
  EXPECT_EQ(r[3], 0x80);             // -0 keeps its sign
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, QuantizeFp8,
    ::testing::Values(CastCase{{64, 128}, DType::kF32, DType::kE4M3},
                      CastCase{{3, 37, 300}, DType::kF32, DType::kE5M2},  // tiles with edges
                      CastCase{{130, 257}, DType::kBF16, DType::kE4M3},
                      CastCase{{1, 16}, DType::kBF16, DType::kE5M2}));

TEST(QuantizeFp8Only, RowwiseOnlyColumnwiseOnlyAndNoAmax) {
  const Tensor x = test::random_tensor({48, 80}, DType::kF32, 9);
  const Tensor scale = Tensor::from_floats({2.f}, {1});
  Tensor row = Tensor::empty(x.shape(), DType::kE4M3);
  Tensor col = Tensor::empty({80, 48}, DType::kE4M3);
  ops::quantize_fp8(x, scale, &row, nullptr, nullptr);
  ops::quantize_fp8(x, scale, nullptr, &col, nullptr);
  const Tensor transposed = ops::transpose_2d(row);
  EXPECT_EQ(std::memcmp(transposed.data(), col.data(), col.nbytes()), 0);
}

TEST(QuantizeFp8Only, ClearErrorsNameTheShape) {
  const Tensor x = Tensor::zeros({8, 16}, DType::kF32);
  const Tensor scale = Tensor::from_floats({1.f}, {1});
  Tensor wrong = Tensor::empty({8, 16}, DType::kE4M3);  // column-wise must be (16, 8)
  try {
    ops::quantize_fp8(x, scale, nullptr, &wrong, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(16, 8)"), std::string::npos) << e.what();
  }
  Tensor not_fp8 = Tensor::empty({8, 16}, DType::kBF16);
  EXPECT_THROW(ops::quantize_fp8(x, scale, &not_fp8, nullptr, nullptr), Error);
  Tensor row = Tensor::empty({8, 16}, DType::kE4M3);
  Tensor two = Tensor::empty({2}, DType::kF32);
  try {
    ops::quantize_fp8(x, scale, &row, nullptr, nullptr, nullptr, &two);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scale_inv must be a one-element f32"), std::string::npos)
        << e.what();
  }
}

// scale_inv from the cast is 1 / scale rounded to nearest (f64 division rounded once to f32
// gives the same value), and its version moves as the cast's other outputs do.
TEST(QuantizeFp8Only, WritesScaleInv) {
  const Tensor x = test::random_tensor({5, 24}, DType::kBF16, 12);
  for (float s : {3.f, 0.7f, 448.f, 3e38f}) {
    Tensor row = Tensor::empty(x.shape(), DType::kE4M3);
    Tensor inv = Tensor::full({1}, -1.f, DType::kF32);
    const auto version = inv.version();
    ops::quantize_fp8(x, Tensor::from_floats({s}, {1}), &row, nullptr, nullptr, nullptr, &inv);
    EXPECT_EQ(inv.item(), static_cast<float>(1.0 / static_cast<double>(s))) << s;
    EXPECT_GT(inv.version(), version);
  }
}

// What the cast must count, from the test's own reference: saturated when |x * scale| (f64)
// is above the format's max, flushed when x is non-zero and CUDA's host cast of x * scale is
// +-0; NaN is neither; total is every element.
FP8CastCounts reference_counts(const std::vector<float>& v, float scale, DType fp8) {
  FP8CastCounts want;
  const double max = fp8 == DType::kE4M3 ? 448.0 : 57344.0;
  for (float x : v) {
    ++want.total;
    if (std::isnan(x)) continue;
    want.saturated += std::fabs(static_cast<double>(x) * scale) > max;
    want.flushed += x != 0.f && (reference_cast(x * scale, fp8) & 0x7F) == 0;
  }
  return want;
}

void expect_counts(const FP8CastCounts& got, const FP8CastCounts& want, const std::string& what) {
  EXPECT_EQ(got.saturated, want.saturated) << what;
  EXPECT_EQ(got.flushed, want.flushed) << what;
  EXPECT_EQ(got.total, want.total) << what;
}

TEST_P(QuantizeFp8, CountsSaturatedAndFlushedElementsExactly) {
  const CastCase c = GetParam();
  const float scale_value = c.fp8 == DType::kE4M3 ? 3.5f : 100.f;
  const float max = c.fp8 == DType::kE4M3 ? 448.f : 57344.f;
  // In range and never flushed (0.01..0.97 times the largest unsaturated input), then planted:
  // over-range values (one just above max / scale, which rounds to max yet was clamped, and
  // +-inf), tiny values that flush, zeros of both signs (not flushed) and NaNs (neither).
  const int64_t n = shape_numel(c.shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float mag = static_cast<float>(1 + i % 97) / 100.f * (max / scale_value);
    v[static_cast<size_t>(i)] = i % 2 == 0 ? mag : -mag;
  }
  const std::vector<float> planted = {1e6f,
                                      -1e6f,
                                      max / scale_value * 1.015625f,
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      1e-9f,
                                      -1e-9f,
                                      0.f,
                                      -0.f,
                                      std::numeric_limits<float>::quiet_NaN()};
  // Spread over the tensor so that several tiles and threads see them.
  for (size_t k = 0; k < planted.size() && static_cast<int64_t>(k) < n; ++k) {
    v[static_cast<size_t>(static_cast<int64_t>(k) * n / static_cast<int64_t>(planted.size()))] =
        planted[k];
  }
  Tensor x = Tensor::from_floats(v, c.shape, c.input);
  v = x.to_floats();  // what the kernel reads

  const FP8CastCounts want = reference_counts(v, scale_value, c.fp8);
  if (n >= static_cast<int64_t>(planted.size())) {
    EXPECT_EQ(want.saturated, 5);  // the reference agrees with the planted values
    EXPECT_EQ(want.flushed, 2);
  }
  const Tensor scale = Tensor::from_floats({scale_value}, {1});
  Tensor row = Tensor::empty(c.shape, c.fp8);
  Tensor col = Tensor::empty({x.cols(), x.rows()}, c.fp8);
  FP8CastCounts got;
  ops::quantize_fp8(x, scale, &row, &col, nullptr, &got);
  expect_counts(got, want, "row-wise + column-wise");
  // Counts are added, not overwritten; a column-wise-only cast counts each element once too.
  ops::quantize_fp8(x, scale, nullptr, &col, nullptr, &got);
  FP8CastCounts twice;
  twice.saturated = 2 * want.saturated;
  twice.flushed = 2 * want.flushed;
  twice.total = 2 * want.total;
  expect_counts(got, twice, "summed");
}

TEST(Transpose2d, EveryElementSize) {
  for (DType d : {DType::kE4M3, DType::kBF16, DType::kF32, DType::kI64}) {
    const int64_t rows = 45, cols = 70;
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) / 8.f;
    const Tensor x = Tensor::from_floats(v, {rows, cols}, d);
    const Tensor t = ops::transpose_2d(x);
    ASSERT_EQ(t.shape(), (Shape{cols, rows}));
    const std::vector<float> xt = x.to_floats(), tt = t.to_floats();
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j)
        bad += xt[static_cast<size_t>(i * cols + j)] != tt[static_cast<size_t>(j * rows + i)];
    }
    EXPECT_EQ(bad, 0) << d;
  }
}

TEST(DequantizeFp8, EveryCodeTimesScaleInv) {
  for (DType d : {DType::kE4M3, DType::kE5M2}) {
    std::vector<uint8_t> codes(256);
    for (int i = 0; i < 256; ++i) codes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    const Tensor q = Tensor::from_bytes(codes.data(), {16, 16}, d);
    const Tensor scale_inv = Tensor::from_floats({0.125f}, {1});
    const Tensor f = ops::dequantize_fp8(q, scale_inv, DType::kF32);
    const Tensor h = ops::dequantize_fp8(q, scale_inv, DType::kBF16);
    const std::vector<float> got = f.to_floats(), got_bf16 = h.to_floats();
    for (int i = 0; i < 256; ++i) {
      const double want =
          static_cast<double>(load_as_f32(d, codes.data(), static_cast<size_t>(i))) * 0.125;
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[static_cast<size_t>(i)])) << "code " << i;
        continue;
      }
      EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<float>(want)) << d << " code " << i;
      EXPECT_EQ(got_bf16[static_cast<size_t>(i)], from_bf16(to_bf16(static_cast<float>(want))));
    }
  }
}

}  // namespace
}  // namespace octet
