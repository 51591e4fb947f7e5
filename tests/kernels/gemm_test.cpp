// GEMM against an f64 reference: every transpose combination, f32 / bf16 / FP8 operands,
// f32 / bf16 / FP8 output, bias and accumulation, the GELU epilogue, the FP8 output's amax, odd
// and folded 3-D shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/math/activation.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"
#include "runtime/parallel.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::Accumulate;
using ops::Epilogue;
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
  // M of 1 and 3 against a transposed B take the dot-product path (one generated token a
  // sequence); the others the GEMM.
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 53, 71},
                                {64, 48, 256},
                                {128, 96, 768},
                                {1, 300, 77},
                                {3, 130, 768}}) {
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
  // x (2, 8, 32) folds to (16, 32); y = 0.5 x·wᵀ + bias, then a second call accumulates. One and
  // three rows (x (1, 1, 32), (1, 3, 32)) take the dot-product path.
  for (const int64_t rows : {8, 1, 3}) {
    const int64_t seqs = rows == 8 ? 2 : 1, m = seqs * rows;
    SCOPED_TRACE(testing::Message() << "M=" << m);
    const Tensor x = test::random_tensor({seqs, rows, 32}, DType::kF32, 41);
    const Tensor w = test::random_tensor({24, 32}, DType::kF32, 42);
    const Tensor bias = test::random_tensor({24}, DType::kBF16, 43);
    GemmOptions options;
    options.alpha = 0.5f;
    options.bias = &bias;
    Tensor out = ops::gemm(x, Transpose::kNo, w, Transpose::kYes, DType::kF32, options);
    ASSERT_EQ(out.shape(), (Shape{m, 24}));
    std::vector<double> want, mag;
    reference(test::to_doubles(x), 32, test::to_doubles(w), 32,
              {m, 24, 32, Transpose::kNo, Transpose::kYes}, want, mag);
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

// The tanh GELU in f64: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
double gelu_f64(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

// GELU's slope lies in [-0.13, 1.13]: an error e in its input moves its output by at most 1.13 e.
constexpr double kGeluLipschitz = 1.13;

// The f64 value before the epilogue, alpha * product + bias, and a bound on how far octet's f32
// value of it may lie: the accumulation bound plus one rounding of the bias sum.
struct Expected {
  std::vector<double> value, bound;
};

Expected expected_sum(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, double alpha,
                      const Tensor* bias, double a_scale = 1, double b_scale = 1) {
  const bool a_t = ta == Transpose::kYes, b_t = tb == Transpose::kYes;
  const Problem p{a_t ? a.cols() : a.rows(), b_t ? b.rows() : b.cols(), a_t ? a.rows() : a.cols(),
                  ta, tb};
  std::vector<double> av = test::to_doubles(a), bv = test::to_doubles(b);
  for (double& v : av) v *= a_scale;
  for (double& v : bv) v *= b_scale;
  std::vector<double> product, mag;
  reference(av, a.cols(), bv, b.cols(), p, product, mag);
  const std::vector<double> bias_d = bias ? test::to_doubles(*bias) : std::vector<double>();
  Expected e;
  e.value.resize(product.size());
  e.bound.resize(product.size());
  for (size_t i = 0; i < product.size(); ++i) {
    const double b_i = bias ? bias_d[i % bias_d.size()] : 0.0;
    e.value[i] = alpha * product[i] + b_i;
    e.bound[i] = gamma(p.k + 2) * (std::fabs(alpha) * mag[i] + std::fabs(b_i)) +
                 std::ldexp(std::fabs(e.value[i]), -23);
  }
  return e;
}

// The same after the GELU: its f32 evaluation adds a few ulps (1e-5 relative is generous).
Expected expected_gelu(Expected e) {
  for (size_t i = 0; i < e.value.size(); ++i) {
    e.value[i] = gelu_f64(e.value[i]);
    e.bound[i] = kGeluLipschitz * e.bound[i] + 1e-5 * std::fabs(e.value[i]) + 1e-30;
  }
  return e;
}

TEST(Gemm, GeluEpilogueMatchesF64ProductBiasThenGelu) {
  for (DType operands : {DType::kF32, DType::kBF16}) {
    for (bool with_bias : {false, true}) {
      for (DType out_dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(std::string(dtype_name(operands)) + (with_bias ? " + bias -> " : " -> ") +
                     std::string(dtype_name(out_dtype)));
        const int64_t m = 37, n = 53, k = 71;
        const Tensor a = test::random_tensor({m, k}, operands, 61);
        const Tensor b = test::random_tensor({n, k}, operands, 62, 0.3f);
        const Tensor bias = test::random_tensor({n}, DType::kF32, 63);
        GemmOptions options;
        options.alpha = 0.75f;
        options.bias = with_bias ? &bias : nullptr;
        options.epilogue = Epilogue::kGelu;
        Tensor out = Tensor::empty({m, n}, out_dtype);
        test::poison(out);
        ops::gemm(a, Transpose::kNo, b, Transpose::kYes, out, options);
        const Expected want =
            expected_gelu(expected_sum(a, Transpose::kNo, b, Transpose::kYes, 0.75, options.bias));
        // A bf16 out adds its own rounding: half a step, at most 2^-8 relative.
        const double out_rounding = out_dtype == DType::kBF16 ? std::ldexp(1.0, -8) : 0.0;
        const std::vector<float> got = out.to_floats();
        size_t bad = 0;
        double negative = 0;  // the GELU must have bent some outputs: a missing one fails here
        for (size_t i = 0; i < got.size(); ++i) {
          const double tol = want.bound[i] + out_rounding * std::fabs(want.value[i]);
          if (!(std::fabs(got[i] - want.value[i]) <= tol) && bad++ == 0) {
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want.value[i]
                          << " (tolerance " << tol << ")";
          }
          negative = std::min(negative, static_cast<double>(got[i]));
        }
        EXPECT_EQ(bad, 0u);
        EXPECT_GT(negative, -0.2) << "GELU's minimum is -0.17";
      }
    }
  }
}

TEST(Gemm, GeluEpilogueEqualsTheActivationOfThePlainGemmBitForBit) {
  // The epilogue is the activation kernel's formula on the same f32 values.
  const Tensor a = test::random_tensor({2, 16, 48}, DType::kF32, 64);
  const Tensor w = test::random_tensor({40, 48}, DType::kF32, 65, 0.2f);
  const Tensor bias = test::random_tensor({40}, DType::kBF16, 66);
  GemmOptions options;
  options.bias = &bias;
  const Tensor plain = ops::gemm(a, Transpose::kNo, w, Transpose::kYes, DType::kF32, options);
  options.epilogue = Epilogue::kGelu;
  const Tensor fused = ops::gemm(a, Transpose::kNo, w, Transpose::kYes, DType::kF32, options);
  const Tensor want = ops::activation(ops::Activation::kGelu, plain);
  const std::vector<float> g = fused.to_floats(), w_f = want.to_floats();
  ASSERT_EQ(g.size(), w_f.size());
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) bad += test::bits_of(g[i]) != test::bits_of(w_f[i]);
  EXPECT_EQ(bad, 0u);
}

// The expected FP8 codes of values v (known to within `bound`) cast as fp8(f32(v) * scale): the
// code of the f64 value itself. The f32 GEMM may round the other way where v lies within its
// accumulation error of a rounding boundary between two codes; there the code of either end of
// [v - bound, v + bound] is accepted too (the cast is monotone, so any code between them can
// result). Returns the number of elements that took such a neighbouring code; fails the test for
// any code outside the interval.
size_t expect_fp8_codes(const Tensor& out, const Expected& want, float scale) {
  const DType fp8 = out.dtype();
  const auto value_of = [&](uint8_t code) {
    return fp8 == DType::kE4M3 ? from_e4m3(code) : from_e5m2(code);
  };
  const uint8_t* got = out.data_as<uint8_t>();
  size_t neighbours = 0, bad = 0;
  for (size_t i = 0; i < want.value.size(); ++i) {
    const double v = want.value[i], e = want.bound[i];
    const uint8_t exact = test::reference_cast(static_cast<float>(v) * scale, fp8);
    if (got[i] == exact) continue;
    const float lo = value_of(test::reference_cast(static_cast<float>(v - e) * scale, fp8));
    const float hi = value_of(test::reference_cast(static_cast<float>(v + e) * scale, fp8));
    const float g = value_of(got[i]);
    if (lo <= g && g <= hi) {
      ++neighbours;
    } else if (bad++ == 0) {
      ADD_FAILURE() << "element " << i << ": code 0x" << std::hex << int{got[i]} << std::dec << " ("
                    << g << "), want 0x" << std::hex << int{exact} << std::dec << " ("
                    << value_of(exact) << ") for " << v << " * " << scale;
    }
  }
  EXPECT_EQ(bad, 0u);
  return neighbours;
}

TEST(Gemm, Fp8OutputEqualsTheCastOfTheF64ResultWithAmax) {
  const int64_t m = 40, n = 48, k = 96;
  // f32 and FP8 operands; out e4m3 / e5m2; with and without bias and GELU. Scales put the largest
  // products past the FP8 maximum, so saturation is exercised too.
  const Tensor a_hp = test::random_tensor({m, k}, DType::kF32, 81, 2.f);
  const Tensor b_hp = test::random_tensor({n, k}, DType::kF32, 82, 0.5f);
  const Tensor bias = test::random_tensor({n}, DType::kBF16, 83, 2.f);
  Tensor a8 = Tensor::empty({m, k}, DType::kE4M3), b8 = Tensor::empty({n, k}, DType::kE5M2);
  ops::quantize_fp8(a_hp, Tensor::from_floats({64.f}, {1}), &a8, nullptr, nullptr);
  ops::quantize_fp8(b_hp, Tensor::from_floats({256.f}, {1}), &b8, nullptr, nullptr);
  const Tensor ia = Tensor::from_floats({1.f / 64.f}, {1});
  const Tensor ib = Tensor::from_floats({1.f / 256.f}, {1});
  for (bool fp8_operands : {false, true}) {
    for (DType out_dtype : {DType::kE4M3, DType::kE5M2}) {
      for (bool with_bias : {false, true}) {
        for (Epilogue epilogue : {Epilogue::kNone, Epilogue::kGelu}) {
          SCOPED_TRACE(std::string(fp8_operands ? "e4m3 x e5m2" : "f32") + " -> " +
                       std::string(dtype_name(out_dtype)) + (with_bias ? " bias" : "") +
                       (epilogue == Epilogue::kGelu ? " gelu" : ""));
          const float scale = out_dtype == DType::kE4M3 ? 16.f : 2048.f;
          const Tensor out_scale = Tensor::from_floats({scale}, {1});
          Tensor amax = Tensor::from_floats({0.5f}, {1});  // smaller than the result's
          GemmOptions options;
          options.bias = with_bias ? &bias : nullptr;
          options.epilogue = epilogue;
          options.out_scale = &out_scale;
          options.out_amax = &amax;
          if (fp8_operands) {
            options.a_scale_inv = &ia;
            options.b_scale_inv = &ib;
          }
          const Tensor& a = fp8_operands ? a8 : a_hp;
          const Tensor& b = fp8_operands ? b8 : b_hp;
          Tensor out = Tensor::empty({m, n}, out_dtype);
          test::poison(out);
          const uint64_t amax_version = amax.version();
          ops::gemm(a, Transpose::kNo, b, Transpose::kYes, out, options);
          EXPECT_GT(amax.version(), amax_version);

          Expected want =
              expected_sum(a, Transpose::kNo, b, Transpose::kYes, 1.0, options.bias,
                           fp8_operands ? 1.0 / 64 : 1.0, fp8_operands ? 1.0 / 256 : 1.0);
          if (epilogue == Epilogue::kGelu) want = expected_gelu(want);
          const size_t neighbours = expect_fp8_codes(out, want, scale);
          EXPECT_LE(neighbours, out.numel() / 100) << "neighbouring codes should be rare";

          // amax: max |value| before the scale, max-accumulated onto 0.5; each f32 value is
          // within its bound of the f64 one, so their maxima are within the largest bound.
          double want_amax = 0.5, amax_bound = 0;
          size_t saturated = 0;
          const float fp8_max = out_dtype == DType::kE4M3 ? 448.f : 57344.f;
          for (size_t i = 0; i < want.value.size(); ++i) {
            want_amax = std::max(want_amax, std::fabs(want.value[i]));
            amax_bound = std::max(amax_bound, want.bound[i]);
            saturated += std::fabs(want.value[i]) * scale > fp8_max;
          }
          EXPECT_NEAR(amax.item(), want_amax, amax_bound);
          if (epilogue == Epilogue::kNone) {
            EXPECT_GT(saturated, 0u) << "no saturation tested";
          }
        }
      }
    }
  }
}

TEST(Gemm, Fp8OutputIsQuantizeFp8OfTheF32OutputAndAmaxOnlyGrows) {
  // The FP8 out is exactly ops::quantize_fp8 of the f32 result (the same sgemm, then the same
  // cast): bytes and amax bit for bit. A larger amax already held is kept.
  const Tensor a = test::random_tensor({2, 24, 64}, DType::kBF16, 91);
  const Tensor w = test::random_tensor({32, 64}, DType::kBF16, 92, 0.25f);
  const Tensor bias = test::random_tensor({32}, DType::kF32, 93);
  GemmOptions options;
  options.bias = &bias;
  options.epilogue = Epilogue::kGelu;
  const Tensor y = ops::gemm(a, Transpose::kNo, w, Transpose::kYes, DType::kF32, options);
  const Tensor scale = Tensor::from_floats({40.f}, {1});
  Tensor want = Tensor::empty({48, 32}, DType::kE4M3);
  Tensor want_amax = Tensor::zeros({1}, DType::kF32);
  ops::quantize_fp8(y, scale, &want, nullptr, &want_amax);

  for (float start : {0.f, 1e6f}) {
    Tensor amax = Tensor::from_floats({start}, {1});
    options.out_scale = &scale;
    options.out_amax = &amax;
    const Tensor got = ops::gemm(a, Transpose::kNo, w, Transpose::kYes, DType::kE4M3, options);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(got.nbytes())), 0);
    EXPECT_EQ(amax.item(), std::max(start, want_amax.item())) << "start " << start;
  }
}

TEST(Gemm, EmptyInnerDimensionGivesEpilogueOfBiasIntoFp8) {
  // K = 0: out = fp8(gelu(bias) * scale).
  const Tensor a = Tensor::zeros({3, 0}, DType::kF32), b = Tensor::zeros({0, 8}, DType::kF32);
  const Tensor bias = test::random_tensor({8}, DType::kF32, 94);
  const Tensor scale = Tensor::from_floats({8.f}, {1});
  Tensor amax = Tensor::zeros({1}, DType::kF32);
  GemmOptions options;
  options.bias = &bias;
  options.epilogue = Epilogue::kGelu;
  options.out_scale = &scale;
  options.out_amax = &amax;
  const Tensor out = ops::gemm(a, Transpose::kNo, b, Transpose::kNo, DType::kE4M3, options);
  const std::vector<float> bias_f = bias.to_floats();
  float want_amax = 0;
  for (int64_t i = 0; i < 3 * 8; ++i) {
    const float v = math::gelu_tanh(bias_f[static_cast<size_t>(i % 8)]);
    EXPECT_EQ(out.data_as<uint8_t>()[i], test::reference_cast(v * 8.f, DType::kE4M3)) << i;
    want_amax = std::max(want_amax, std::fabs(v));
  }
  EXPECT_EQ(amax.item(), want_amax);
}

TEST(Gemm, EpilogueAndFp8OutputErrors) {
  const Tensor a = test::random_tensor({4, 8}, DType::kF32, 95);
  const Tensor b = test::random_tensor({6, 8}, DType::kF32, 96);
  const Tensor scale = Tensor::from_floats({1.f}, {1});
  Tensor amax = Tensor::zeros({1}, DType::kF32);
  Tensor f32_out = Tensor::zeros({4, 6}, DType::kF32);
  Tensor fp8_out = Tensor::zeros({4, 6}, DType::kE4M3);
  auto message = [&](Tensor& out, const GemmOptions& options) {
    return test::error_of([&] { ops::gemm(a, Transpose::kNo, b, Transpose::kYes, out, options); });
  };
  GemmOptions gelu_acc;
  gelu_acc.epilogue = Epilogue::kGelu;
  gelu_acc.accumulate = Accumulate::kYes;
  EXPECT_NE(message(f32_out, gelu_acc).find("GELU epilogue cannot be combined with accumulate"),
            std::string::npos);

  const std::string no_scale = message(fp8_out, GemmOptions{});
  EXPECT_NE(no_scale.find("FP8 output and out_scale go together"), std::string::npos) << no_scale;
  EXPECT_NE(no_scale.find("e4m3"), std::string::npos) << no_scale;
  EXPECT_NE(no_scale.find("without out_scale"), std::string::npos) << no_scale;

  GemmOptions scaled;
  scaled.out_scale = &scale;
  const std::string no_fp8 = message(f32_out, scaled);
  EXPECT_NE(no_fp8.find("FP8 output and out_scale go together"), std::string::npos) << no_fp8;
  EXPECT_NE(no_fp8.find("f32"), std::string::npos) << no_fp8;
  EXPECT_NE(no_fp8.find("with out_scale"), std::string::npos) << no_fp8;

  GemmOptions fp8_acc = scaled;
  fp8_acc.accumulate = Accumulate::kYes;
  EXPECT_NE(message(fp8_out, fp8_acc).find("accumulate cannot add into an FP8 output"),
            std::string::npos);

  GemmOptions amax_only;
  amax_only.out_amax = &amax;
  EXPECT_NE(message(f32_out, amax_only).find("out_amax is for an FP8 output"), std::string::npos);

  const Tensor bad_scale = Tensor::from_floats({1.f, 2.f}, {2});
  GemmOptions two;
  two.out_scale = &bad_scale;
  EXPECT_NE(message(fp8_out, two).find("out_scale (FP8 output) must be a one-element f32"),
            std::string::npos);
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

namespace octet {
namespace {

// Shapes large enough that the CPU GEMM cuts the output into several tiles (kernels/cpu/gemm.cpp),
// with ragged edges (no side a multiple of 16): every transpose and operand dtype matches f64,
// and the bits are the same on 1, 2, 3 and 7 threads (each tile is one thread's sgemm over all of
// K, and the tiles depend on the shape alone).
TEST(Gemm, TiledShapesMatchF64AndGiveTheSameBitsOnAnyThreadCount) {
  const int threads = num_threads();
  struct Case {
    DType dtype;
    Transpose ta, tb;
  };
  std::vector<Case> cases;
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) cases.push_back({DType::kF32, ta, tb});
  }
  cases.push_back({DType::kBF16, Transpose::kNo, Transpose::kYes});
  cases.push_back({DType::kE4M3, Transpose::kNo, Transpose::kYes});
  cases.push_back({DType::kE5M2, Transpose::kYes, Transpose::kNo});
  const int64_t m = 403, n = 611, k = 397;  // about 196 MFLOP: 4 tiles
  for (const Case& c : cases) {
    const Problem p{m, n, k, c.ta, c.tb};
    const Tensor a = test::random_tensor(stored(m, k, c.ta), c.dtype, 31);
    const Tensor b = test::random_tensor(stored(k, n, c.tb), c.dtype, 32);
    std::vector<std::vector<float>> runs;
    for (int t : {1, 2, 3, 7}) {
      set_num_threads(t);
      Tensor out = Tensor::empty({m, n}, DType::kF32);
      test::poison(out);
      const Tensor one = Tensor::from_floats({1.f}, {1});
      GemmOptions options;
      if (is_fp8(c.dtype)) options.a_scale_inv = options.b_scale_inv = &one;
      ops::gemm(a, c.ta, b, c.tb, out, options);
      runs.push_back(out.to_floats());
    }
    set_num_threads(threads);
    std::ostringstream what;
    what << c.dtype << " " << (c.ta == Transpose::kYes ? "T" : "N")
         << (c.tb == Transpose::kYes ? "T" : "N");
    for (size_t r = 1; r < runs.size(); ++r) {
      EXPECT_EQ(std::memcmp(runs[r].data(), runs[0].data(), runs[0].size() * sizeof(float)), 0)
          << what.str() << ": thread count #" << r << " differs";
    }
    std::vector<double> want, mag;
    reference(test::to_doubles(a), a.cols(), test::to_doubles(b), b.cols(), p, want, mag);
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double bound = gamma(k) * mag[i] + 1e-30;
      if (!(std::fabs(runs[0][i] - want[i]) <= bound)) ++bad;
    }
    EXPECT_EQ(bad, 0u) << what.str();
  }
}

}  // namespace
}  // namespace octet
