// The FP8 GEMM entry point: fprop, dgrad and wgrad on per-tensor (delayed, hybrid, current) and
// MXFP8 operands, each against the f64 product of the operands it reads (decoded here from their
// bytes), within the f32 accumulation bound; and the shape-rule errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "runtime/fp8.h"
#include "tests/support/product_nt.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

// Logical (rows, cols) values of one usage of a quantized tensor, decoded from its bytes in f64.
std::vector<double> decode(const QuantizedTensor& t, Usage usage) {
  const int64_t rows = t.rows(), cols = t.cols();
  const bool row = usage == Usage::kRowwise;
  Tensor data, scales;
  double scale_inv = 1;
  if (t.format() == kPerTensorFormat) {
    const auto& f = static_cast<const Float8Tensor&>(t);
    data = row ? f.rowwise_data() : f.columnwise_data();
    scale_inv = f.scale_inv().item();
  } else {
    const auto& m = static_cast<const MXFP8Tensor&>(t);
    data = row ? m.rowwise_data() : m.columnwise_data();
    scales = row ? m.rowwise_scales() : m.columnwise_scales();
  }
  const int64_t stored_cols = row ? cols : rows;  // column-wise data is (cols, rows)
  const int64_t blocks = (stored_cols + 31) / 32;
  const uint8_t* q = data.data_as<uint8_t>();
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t sr = row ? i : j, sc = row ? j : i;  // stored position
      const uint8_t code = q[sr * stored_cols + sc];
      double v = t.dtype() == DType::kE4M3 ? from_e4m3(code) : from_e5m2(code);
      if (scales.defined()) {
        v *= std::ldexp(1.0, scales.data_as<uint8_t>()[sr * blocks + sc / 32] - 127);
      } else {
        v *= scale_inv;
      }
      out[static_cast<size_t>(i * cols + j)] = v;
    }
  }
  return out;
}

// out (m, n) = sum_k a(m, k) * b(n, k), with the bound sum_k |a b| for the rounding tolerance.
using Product = test::ProductNT;
using test::product_nt;

std::vector<double> transpose(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> t(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = x[i * cols + j];
  }
  return t;
}

// |got - want| <= (k + 2) u32 sum|a b| (+ one bf16 rounding): f32 accumulation in any order,
// then the scale product.
::testing::AssertionResult within_accumulation_error(const Tensor& got, const Product& want,
                                                     int64_t k, DType out) {
  const std::vector<float> g = got.to_floats();
  const double u = std::ldexp(1.0, -24);
  for (size_t i = 0; i < g.size(); ++i) {
    double tol = (k + 2) * u * want.magnitude[i] + 1e-30;
    if (out == DType::kBF16) tol += std::ldexp(1.0, -8) * std::fabs(want.value[i]);
    if (!(std::fabs(g[i] - want.value[i]) <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want "
                                           << want.value[i] << " (tolerance " << tol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

struct Mode {
  const char* name;
  std::function<std::shared_ptr<Quantizer>(FP8Direction)> quantizer;
};

std::shared_ptr<Quantizer> delayed(float scale, DType fp8) {
  return std::make_shared<DelayedScalingQuantizer>(Tensor::from_floats({scale}, {1}),
                                                   Tensor::zeros({1}, DType::kF32), fp8);
}

const Mode kModes[] = {
    {"delayed_e4m3",
     [](FP8Direction d) {
       return delayed(d == FP8Direction::kForward ? 48.f : 96.f, DType::kE4M3);
     }},
    {"delayed_hybrid",
     [](FP8Direction d) {
       return d == FP8Direction::kForward ? delayed(40.f, DType::kE4M3)
                                          : delayed(4096.f, DType::kE5M2);
     }},
    {"current_hybrid",
     [](FP8Direction d) {
       return make_quantizer(Recipe::current(FP8Format::kHybrid), nullptr, {d, 0});
     }},
    {"mxfp8", [](FP8Direction) { return std::make_shared<MXFP8Quantizer>(DType::kE4M3); }},
};

class FP8Gemm : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(FP8Gemm, AllLayoutsMatchTheF64ProductOfTheOperandsTheyRead) {
  const Mode& mode = kModes[std::get<0>(GetParam())];
  const DType out = std::get<1>(GetParam());
  const int64_t m = 64, k = 64, n = 96;  // X (2, 32, 64), W (96, 64), dY (2, 32, 96)
  const Tensor x = test::random_tensor({2, 32, k}, DType::kF32, 71, 2.f);
  const Tensor w = test::random_tensor({n, k}, DType::kBF16, 72, 0.5f);
  const Tensor dy = test::random_tensor({2, 32, n}, DType::kF32, 73, 0.01f);
  auto fwd = mode.quantizer(FP8Direction::kForward), bwd = mode.quantizer(FP8Direction::kBackward);
  auto qx = fwd->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);
  auto qw = fwd->quantize(w, Usage::kBoth, Ownership::kOwned, AmaxRecording::kRecord);
  auto qdy = bwd->quantize(dy, Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord);

  // fprop: Y = X·Wᵀ (+ bias), reading X and W row-wise.
  const Tensor bias = test::random_tensor({n}, DType::kF32, 74);
  ops::FP8GemmOptions with_bias;
  with_bias.bias = &bias;
  const Tensor y = ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, out, with_bias);
  EXPECT_EQ(y.shape(), Shape({2, 32, n}));
  Product want = product_nt(decode(*qx, Usage::kRowwise), decode(*qw, Usage::kRowwise), m, n, k);
  const std::vector<float> b = bias.to_floats();
  for (size_t i = 0; i < want.value.size(); ++i) {
    want.value[i] += b[i % n];
    want.magnitude[i] += std::fabs(b[i % n]);
  }
  EXPECT_TRUE(within_accumulation_error(y, want, k, out)) << "fprop";

  // dgrad: dX = dY·W, reading dY row-wise and W column-wise.
  const Tensor dx = ops::fp8_gemm(*qdy, *qw, ops::GemmLayout::kDgrad, out);
  EXPECT_EQ(dx.shape(), Shape({2, 32, k}));
  want = product_nt(decode(*qdy, Usage::kRowwise), transpose(decode(*qw, Usage::kColumnwise), n, k),
                    m, k, n);
  EXPECT_TRUE(within_accumulation_error(dx, want, n, out)) << "dgrad";

  // wgrad: dW = dYᵀ·X, reading dY and X column-wise, accumulated onto what out holds.
  Tensor dw = test::random_tensor({n, k}, out, 75);
  const std::vector<float> before = dw.to_floats();
  ops::FP8GemmOptions accumulate;
  accumulate.accumulate = ops::Accumulate::kYes;
  ops::fp8_gemm(*qdy, *qx, ops::GemmLayout::kWgrad, dw, accumulate);
  want = product_nt(transpose(decode(*qdy, Usage::kColumnwise), m, n),
                    transpose(decode(*qx, Usage::kColumnwise), m, k), n, k, m);
  for (size_t i = 0; i < want.value.size(); ++i) {
    want.value[i] += before[i];
    want.magnitude[i] += std::fabs(before[i]);
  }
  EXPECT_TRUE(within_accumulation_error(dw, want, m, out)) << "wgrad";
}

INSTANTIATE_TEST_SUITE_P(Modes, FP8Gemm,
                         ::testing::Combine(::testing::Range(0, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const auto& info) {
                           return std::string(kModes[std::get<0>(info.param)].name) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}

std::shared_ptr<QuantizedTensor> per_tensor(const Shape& shape, Usage usage = Usage::kBoth) {
  return delayed(1.f, DType::kE4M3)
      ->quantize(test::random_tensor(shape, DType::kF32, 76), usage, Ownership::kInternal,
                 AmaxRecording::kSkip);
}

TEST(FP8GemmErrors, ShapeRulesAreNamed) {
  expect_error(
      [] {
        ops::fp8_gemm(*per_tensor({7, 16}), *per_tensor({16, 16}), ops::GemmLayout::kFprop,
                      DType::kF32);
      },
      {"fprop", "X has shape (7, 16)", "prod(leading dims) % 8 == 0", "7 % 8 = 7"});
  expect_error(
      [] {
        ops::fp8_gemm(*per_tensor({16, 24}), *per_tensor({16, 24}), ops::GemmLayout::kFprop,
                      DType::kF32);
      },
      {"X has shape (16, 24)", "last dim % 16 == 0", "24 % 16 = 8"});
  const MXFP8Quantizer mx;
  auto mx_x = mx.quantize(test::random_tensor({32, 48}, DType::kF32, 77), Usage::kBoth,
                          Ownership::kInternal, AmaxRecording::kSkip);
  auto mx_w = mx.quantize(test::random_tensor({32, 48}, DType::kF32, 78), Usage::kBoth,
                          Ownership::kInternal, AmaxRecording::kSkip);
  expect_error([&] { ops::fp8_gemm(*mx_x, *mx_w, ops::GemmLayout::kFprop, DType::kF32); },
               {"X has shape (32, 48)", "multiples of 32", "48 % 32 = 16"});
  EXPECT_TRUE(ops::fp8_gemm_shape_supported(kPerTensorFormat, {2, 4, 16}));
  EXPECT_FALSE(ops::fp8_gemm_shape_supported(kPerTensorFormat, {2, 3, 16}));
  EXPECT_FALSE(ops::fp8_gemm_shape_supported(kMXFP8Format, {16, 32}));
  EXPECT_TRUE(ops::fp8_gemm_shape_supported(kMXFP8Format, {2, 16, 64}));
}

TEST(FP8GemmErrors, OperandsMustFitTheLayout) {
  auto x = per_tensor({16, 32}), w = per_tensor({48, 32}), dy = per_tensor({16, 48});
  expect_error(
      [&] {
        ops::fp8_gemm(*x, *per_tensor({48, 16}), ops::GemmLayout::kFprop, DType::kF32);
      },
      {"differ in K"});
  expect_error(
      [&] {
        ops::fp8_gemm(*dy, *per_tensor({32, 32}), ops::GemmLayout::kDgrad, DType::kF32);
      },
      {"dgrad", "48 columns", "32 rows"});
  expect_error(
      [&] {
        ops::fp8_gemm(*per_tensor({32, 48}), *x, ops::GemmLayout::kWgrad, DType::kF32);
      },
      {"wgrad", "differ in M"});
  auto w_rows = per_tensor({48, 32}, Usage::kRowwise);
  expect_error([&] { ops::fp8_gemm(*dy, *w_rows, ops::GemmLayout::kDgrad, DType::kF32); },
               {"operand W", "lacks column-wise data", "update_usage"});
  const MXFP8Quantizer mx;
  auto mx_w = mx.quantize(test::random_tensor({32, 32}, DType::kF32, 79), Usage::kBoth,
                          Ownership::kInternal, AmaxRecording::kSkip);
  expect_error(
      [&] {
        ops::fp8_gemm(*per_tensor({32, 32}), *mx_w, ops::GemmLayout::kFprop, DType::kF32);
      },
      {"are in different formats"});
  Tensor wrong = Tensor::empty({16, 40}, DType::kF32);
  expect_error([&] { ops::fp8_gemm(*x, *w, ops::GemmLayout::kFprop, wrong); },
               {"output must have shape (16, 48)"});
}

}  // namespace
}  // namespace octet
