// GEMM against an f64 reference: every transpose combination, f32 / bf16 / FP8 operands,
// f32 / bf16 output, bias and accumulation, odd and folded 3-D shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "kernels/ops.h"
#include "runtime/float16.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::Accumulate;
using ops::GemmOptions;
using ops::Transpose;

struct Problem {
  int64_t m, n, k;
  Transpose ta, tb;
};

// Element (i, j) of op(x) where x is stored row-major.
double at(const std::vector<double>& x, int64_t cols, Transpose t, int64_t i, int64_t j) {
  return t == Transpose::kYes ? x[static_cast<size_t>(j * cols + i)]
                              : x[static_cast<size_t>(i * cols + j)];
}

// f64 product and, per element, sum_k |a_ik b_kj| (the scale of f32 accumulation error).
void reference(const std::vector<double>& a, int64_t a_cols, const std::vector<double>& b,
               int64_t b_cols, const Problem& p, std::vector<double>& product,
               std::vector<double>& magnitude) {
  product.assign(static_cast<size_t>(p.m * p.n), 0.0);
  magnitude.assign(product.size(), 0.0);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double s = 0, mag = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double v = at(a, a_cols, p.ta, i, l) * at(b, b_cols, p.tb, l, j);
        s += v;
        mag += std::fabs(v);
      }
      product[static_cast<size_t>(i * p.n + j)] = s;
      magnitude[static_cast<size_t>(i * p.n + j)] = mag;
    }
  }
}

Shape stored(int64_t rows, int64_t cols, Transpose t) {
  return t == Transpose::kYes ? Shape{cols, rows} : Shape{rows, cols};
}

// Rigorous bound for a length-k f32 dot product in any order: gamma_k * sum|a b|.
double gamma(int64_t k) {
  const double u = std::ldexp(1.0, -24);
  return k * u / (1 - k * u);
}

class GemmAllTransposes : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GemmAllTransposes, F32MatchesF64WithinRelative1em5) {
  const auto [ta_i, tb_i] = GetParam();
  for (const auto& [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{37, 53, 71}, {64, 48, 256}, {128, 96, 768}}) {
    const Problem p{m, n, k, ta_i ? Transpose::kYes : Transpose::kNo,
                    tb_i ? Transpose::kYes : Transpose::kNo};
    const Tensor a = test::random_tensor(stored(m, k, p.ta), DType::kF32, 11);
    const Tensor b = test::random_tensor(stored(k, n, p.tb), DType::kF32, 12);
    Tensor out = Tensor::empty({m, n}, DType::kF32);
    test::poison(out);
    ops::gemm(a, p.ta, b, p.tb, out);
    std::vector<double> want, mag;
    reference(test::to_doubles(a), a.cols(), test::to_doubles(b), b.cols(), p, want, mag);
    const std::vector<float> got = out.to_floats();
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      scale = std::max(scale, mag[i]);
    }
    // Relative to the largest sum |a||b| of the output (the norm the f32 error scales with).
    EXPECT_LT(worst / scale, 1e-5) << "M=" << m << " N=" << n << " K=" << k;
  }
}

TEST_P(GemmAllTransposes, Fp8EqualsDequantizedF64ProductWithinAccumulationError) {
  const auto [ta_i, tb_i] = GetParam();
  const Problem p{40, 48, 96, ta_i ? Transpose::kYes : Transpose::kNo,
                  tb_i ? Transpose::kYes : Transpose::kNo};
  for (const auto& [da, db] :
       {std::pair{DType::kE4M3, DType::kE4M3}, std::pair{DType::kE4M3, DType::kE5M2},
        std::pair{DType::kE5M2, DType::kE4M3}}) {
    // Quantize random data with non-trivial scales so scale_inv matters.
    const Tensor a_hp = test::random_tensor(stored(p.m, p.k, p.ta), DType::kF32, 21, 3.f);
    const Tensor b_hp = test::random_tensor(stored(p.k, p.n, p.tb), DType::kF32, 22, 0.05f);
    const Tensor sa = Tensor::from_floats({16.f}, {1}), sb = Tensor::from_floats({2048.f}, {1});
    const Tensor ia = Tensor::from_floats({1.f / 16.f}, {1});
    const Tensor ib = Tensor::from_floats({1.f / 2048.f}, {1});
    Tensor a = Tensor::empty(a_hp.shape(), da), b = Tensor::empty(b_hp.shape(), db);
    ops::quantize_fp8(a_hp, sa, &a, nullptr, nullptr);
    ops::quantize_fp8(b_hp, sb, &b, nullptr, nullptr);
    GemmOptions options;
    options.a_scale_inv = &ia;
    options.b_scale_inv = &ib;
    Tensor out = Tensor::empty({p.m, p.n}, DType::kF32);
    test::poison(out);
    ops::gemm(a, p.ta, b, p.tb, out, options);

    // Reference: dequantize each code independently (load_as_f32 of the FP8 byte) in f64.
    std::vector<double> qa = test::to_doubles(a), qb = test::to_doubles(b);
    for (double& v : qa) v /= 16.0;
    for (double& v : qb) v /= 2048.0;
    std::vector<double> want, mag;
    reference(qa, a.cols(), qb, b.cols(), p, want, mag);
    const std::vector<float> got = out.to_floats();
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = gamma(p.k) * mag[i] + std::ldexp(std::fabs(want[i]), -23) + 1e-30;
      if (!(std::fabs(got[i] - want[i]) <= bound)) ++bad;
    }
    EXPECT_EQ(bad, 0u) << da << " x " << db;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmAllTransposes,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(0, 1)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "T" : "N") +
                                  (std::get<1>(info.param) ? "T" : "N");
                         });

TEST(Gemm, Bf16OperandsBiasAndAccumulateIntoBf16Output) {
  // out = old + a·bᵀ + bias, computed in f32 and rounded once to bf16.
  const int64_t m = 24, n = 40, k = 64;
  const Tensor a = test::random_tensor({m, k}, DType::kBF16, 31);
  const Tensor b = test::random_tensor({n, k}, DType::kBF16, 32);
  const Tensor bias = test::random_tensor({n}, DType::kF32, 33);
  Tensor out = test::random_tensor({m, n}, DType::kBF16, 34);
  const std::vector<double> old = test::to_doubles(out);
  GemmOptions options;
  options.bias = &bias;
  options.accumulate = Accumulate::kYes;
  ops::gemm(a, Transpose::kNo, b, Transpose::kYes, out, options);
  std::vector<double> want, mag;
  reference(test::to_doubles(a), k, test::to_doubles(b), k,
            {m, n, k, Transpose::kNo, Transpose::kYes}, want, mag);
  const std::vector<double> bias_d = test::to_doubles(bias);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      want[static_cast<size_t>(i * n + j)] +=
          old[static_cast<size_t>(i * n + j)] + bias_d[static_cast<size_t>(j)];
    }
  }
  EXPECT_TRUE(test::all_close(out.to_floats(), want, {1e-4, 1.0 / 256}));
}

TEST(Gemm, F32BiasAlphaAccumulateAndFolded3dOperand) {
  // x (2, 8, 32) folds to (16, 32); y = 0.5 x·wᵀ + bias, then a second call accumulates.
  const Tensor x = test::random_tensor({2, 8, 32}, DType::kF32, 41);
  const Tensor w = test::random_tensor({24, 32}, DType::kF32, 42);
  const Tensor bias = test::random_tensor({24}, DType::kBF16, 43);
  GemmOptions options;
  options.alpha = 0.5f;
  options.bias = &bias;
  Tensor out = ops::gemm(x, Transpose::kNo, w, Transpose::kYes, DType::kF32, options);
  ASSERT_EQ(out.shape(), (Shape{16, 24}));
  std::vector<double> want, mag;
  reference(test::to_doubles(x), 32, test::to_doubles(w), 32,
            {16, 24, 32, Transpose::kNo, Transpose::kYes}, want, mag);
  const std::vector<double> bias_d = test::to_doubles(bias);
  std::vector<double> once(want.size());
  for (size_t i = 0; i < want.size(); ++i) once[i] = 0.5 * want[i] + bias_d[i % 24];
  EXPECT_TRUE(test::all_close(out.to_floats(), once, test::tolerance_for(DType::kF32)));

  options.accumulate = Accumulate::kYes;
  options.bias = nullptr;
  const uint64_t version = out.version();
  ops::gemm(x, Transpose::kNo, w, Transpose::kYes, out, options);
  EXPECT_GT(out.version(), version);
  for (size_t i = 0; i < want.size(); ++i) once[i] += 0.5 * want[i];
  EXPECT_TRUE(test::all_close(out.to_floats(), once, test::tolerance_for(DType::kF32)));
}

TEST(Gemm, LongKTransposedBPathMatchesReference) {
  // K >= 2048 with a transposed f32 B takes the transposed-copy path.
  const Problem p{16, 24, 2048, Transpose::kNo, Transpose::kYes};
  const Tensor a = test::random_tensor({16, 2048}, DType::kF32, 51);
  const Tensor b = test::random_tensor({24, 2048}, DType::kF32, 52);
  Tensor out = ops::gemm(a, p.ta, b, p.tb, DType::kF32);
  std::vector<double> want, mag;
  reference(test::to_doubles(a), 2048, test::to_doubles(b), 2048, p, want, mag);
  const std::vector<float> got = out.to_floats();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::fabs(got[i] - want[i]), gamma(p.k) * mag[i]);
}

TEST(Gemm, ClearErrors) {
  const Tensor a = Tensor::zeros({4, 8}, DType::kF32);
  const Tensor b = Tensor::zeros({6, 9}, DType::kF32);
  try {
    ops::gemm(a, Transpose::kNo, b, Transpose::kYes, DType::kF32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inner dimensions differ"), std::string::npos) << e.what();
  }
  const Tensor q = Tensor::zeros({4, 8}, DType::kE4M3);
  const Tensor r = Tensor::zeros({6, 8}, DType::kE4M3);
  try {
    ops::gemm(q, Transpose::kNo, r, Transpose::kYes, DType::kF32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a_scale_inv"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::gemm(a, Transpose::kNo, r, Transpose::kYes, DType::kF32), Error);  // f32 x e4m3
}

}  // namespace
}  // namespace octet
