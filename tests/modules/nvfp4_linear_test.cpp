// Linear under NVFP4 against an f64 model of TE's NVFP4BlockScaling written here from TE's rules
// (transformer_engine/common/recipe/__init__.py, pytorch/custom_recipes/reference_nvfp4.py,
// pytorch/tensor/nvfp4_tensor.py): which operand of which GEMM gets 1x16 blocks or 16x16 tiles,
// the random Hadamard transform (wgrad's operands only, along the tokens) and the tensor amax it
// is scaled from, and that stochastic rounding of the gradients is unbiased through dgrad and
// wgrad.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "modules/fp8_autocast.h"
#include "modules/linear.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::transposed;

constexpr int64_t kB = 16;

// TE's sign vector of the transform (get_wgrad_sign_vector), as TE writes it.
constexpr int kTeSigns[kB] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

// f32 -> bf16 -> f32, round to nearest even (finite inputs).
float bf16_rn(float x) {
  uint32_t u = test::bits_of(x);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return test::float_from_bits(u & 0xFFFF0000u);
}

double e4m3_value(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return (code & 0x80) ? -v : v;
}

double e2m1_value(uint8_t code) {
  static const double kMagnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 0x8) ? -kMagnitude[code & 0x7] : kMagnitude[code & 0x7];
}

// y = x · diag(s) H16 / 4 on each 16 values of every row, H16 by Sylvester's doubling, summed in
// f64 and rounded to bf16 (TE's transform writes bf16).
std::vector<float> rht_rows(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<std::vector<int>> h{{1}};
  while (h.size() < static_cast<size_t>(kB)) {
    const size_t n = h.size();
    std::vector<std::vector<int>> d(2 * n, std::vector<int>(2 * n));
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        d[i][j] = d[i][j + n] = d[i + n][j] = h[i][j];
        d[i + n][j + n] = -h[i][j];
      }
    }
    h = d;
  }
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols; g += kB) {
      for (int64_t j = 0; j < kB; ++j) {
        double s = 0;
        for (int64_t i = 0; i < kB; ++i) {
          s += static_cast<double>(x[static_cast<size_t>(r * cols + g + i)]) * kTeSigns[i] *
               h[static_cast<size_t>(i)][static_cast<size_t>(j)] * 0.25;
        }
        y[static_cast<size_t>(r * cols + g + j)] = bf16_rn(static_cast<float>(s));
      }
    }
  }
  return y;
}

// TE's NVFP4 cast of x (rows, cols) rounded to nearest, 1x16 blocks along the rows or 16x16
// tiles, as the values it stands for: e2m1 * sf * amax / 2688, in f64. The scale arithmetic is
// f32 in TE's order (TE >= 2.14); E4M3 and E2M1 are CUDA's host conversions.
std::vector<double> te_nvfp4(const std::vector<float>& x, int64_t rows, int64_t cols, bool tiles) {
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  float s_enc = std::min(2688.f / amax, FLT_MAX);
  if (amax == 0.f || s_enc == 0.f) s_enc = 1.f;
  const float s_dec = 1.f / s_enc;
  const float mult = s_enc * (1.f / 6.f);
  std::vector<double> out(x.size());
  const int64_t band = tiles ? kB : 1;
  for (int64_t r0 = 0; r0 < rows; r0 += band) {
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      float bamax = 0;
      for (int64_t r = r0; r < r0 + band; ++r) {
        for (int64_t c = c0; c < c0 + kB; ++c) {
          bamax = std::max(bamax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
        }
      }
      const uint8_t sf = test::reference_cast(std::min(bamax * mult, FLT_MAX), DType::kE4M3);
      const float enc = std::min(1.f / (static_cast<float>(e4m3_value(sf)) * s_dec), FLT_MAX);
      for (int64_t r = r0; r < r0 + band; ++r) {
        for (int64_t c = c0; c < c0 + kB; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          out[i] = e2m1_value(test::reference_e2m1(x[i] * enc)) * e4m3_value(sf) *
                   static_cast<double>(amax) / 2688.0;
        }
      }
    }
  }
  return out;
}

// c (n, p) = a (n, q) · b (p, q)ᵀ in f64, and sum |terms| per element.
void nt_product(const std::vector<double>& a, const std::vector<double>& b, int64_t n, int64_t p,
                int64_t q, std::vector<double>& c, std::vector<double>& mag) {
  c.assign(static_cast<size_t>(n * p), 0);
  mag.assign(static_cast<size_t>(n * p), 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < p; ++j) {
      for (int64_t t = 0; t < q; ++t) {
        const double v = a[static_cast<size_t>(i * q + t)] * b[static_cast<size_t>(j * q + t)];
        c[static_cast<size_t>(i * p + j)] += v;
        mag[static_cast<size_t>(i * p + j)] += std::fabs(v);
      }
    }
  }
}

std::vector<double> widened(const std::vector<float>& x) { return {x.begin(), x.end()}; }

::testing::AssertionResult equal_up_to_f32_sums(const std::vector<float>& got,
                                                const std::vector<double>& want,
                                                const std::vector<double>& mag) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 * mag[i] + 1e-30)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want "
                                           << want[i] << ", |terms| " << mag[i];
    }
  }
  return ::testing::AssertionSuccess();
}

struct Shapes {
  int64_t m = 64, k = 64, n = 32;  // tokens, in, out
};

// The TE model's three GEMMs of a Linear (no SR): y, dX, dW, each with its sum |terms|.
struct Model {
  std::vector<double> y, y_mag, dx, dx_mag, dw, dw_mag;
};
Model te_linear(const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>& bias, const std::vector<float>& g, const Shapes& s,
                bool tiles_2d, bool rht) {
  Model r;
  // fprop: X row-wise 1x16, W row-wise (16x16 tiles), both along K.
  const std::vector<double> xq = te_nvfp4(x, s.m, s.k, false);
  const std::vector<double> wq = te_nvfp4(w, s.n, s.k, tiles_2d);
  nt_product(xq, wq, s.m, s.n, s.k, r.y, r.y_mag);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) r.y[static_cast<size_t>(i * s.n + j)] += bias[j];
  }
  // dgrad: dY row-wise 1x16 along N; W column-wise: Wᵀ (K, N) blocked along N.
  const std::vector<double> gq = te_nvfp4(g, s.m, s.n, false);
  const std::vector<double> wtq = te_nvfp4(transposed(w, s.n, s.k), s.k, s.n, tiles_2d);
  nt_product(gq, wtq, s.m, s.k, s.n, r.dx, r.dx_mag);
  // wgrad: dYᵀ (N, M) and Xᵀ (K, M), transformed along M when RHT is on, then 1x16 along M.
  std::vector<float> gt = transposed(g, s.m, s.n), xt = transposed(x, s.m, s.k);
  if (rht) {
    gt = rht_rows(gt, s.n, s.m);
    xt = rht_rows(xt, s.k, s.m);
  }
  nt_product(te_nvfp4(gt, s.n, s.m, false), te_nvfp4(xt, s.k, s.m, false), s.n, s.k, s.m, r.dw,
             r.dw_mag);
  return r;
}

struct LinearRun {
  std::vector<float> y, dx, dw;
};
LinearRun run_linear(Linear& lin, const Tensor& x_in, const Tensor& g, const Recipe& recipe) {
  Tensor x = x_in.clone();
  const Tensor y = test::linear_forward(lin, x, recipe);
  autograd::backward(y, g);
  return {y.to_floats(), autograd::grad(x).to_floats(), autograd::grad(lin.weight()).to_floats()};
}

TEST(NVFP4Linear, EachGemmQuantizesItsOperandsAsTeDoes) {
  const Shapes s;
  const Tensor x = test::random_tensor({s.m, s.k}, DType::kF32, 31);
  // Gradients with a wide range from row to row, as a loss's are.
  Tensor g = test::random_tensor({s.m, s.n}, DType::kF32, 32);
  {
    float* p = g.data_as<float>();
    for (int64_t i = 0; i < s.m * s.n; ++i) p[i] = std::ldexp(p[i], static_cast<int>(i % 7) - 3);
  }
  for (bool tiles : {true, false}) {
    for (bool rht : {true, false}) {
      SCOPED_TRACE(std::string(tiles ? "16x16 weights" : "1x16 weights") +
                   (rht ? ", rht" : ", no rht"));
      Recipe recipe = Recipe::nvfp4();
      recipe.stochastic_rounding = false;
      recipe.weight_2d_quantization = tiles;
      recipe.random_hadamard_transform = rht;
      LinearOptions options;
      options.seed = 3;
      Linear lin(s.k, s.n, options);
      const LinearRun got = run_linear(lin, x, g, recipe);
      const Model want = te_linear(x.to_floats(), lin.weight().to_floats(), lin.bias().to_floats(),
                                   g.to_floats(), s, tiles, rht);
      EXPECT_TRUE(equal_up_to_f32_sums(got.y, want.y, want.y_mag)) << "fprop";
      EXPECT_TRUE(equal_up_to_f32_sums(got.dx, want.dx, want.dx_mag)) << "dgrad";
      EXPECT_TRUE(equal_up_to_f32_sums(got.dw, want.dw, want.dw_mag)) << "wgrad";
    }
  }
}

using test::relative_rms;

TEST(NVFP4Linear, StochasticRoundingOfGradientsIsUnbiasedThroughDgradAndWgrad) {
  // dgrad's mean over many backwards tends to dY · Ŵ with dY unquantized; wgrad's to
  // RHT(dYᵀ) · RHT(Xᵀ)^ with the transformed dY unquantized (bf16, as TE's transform writes).
  const Shapes s;
  const Tensor x = test::random_tensor({s.m, s.k}, DType::kF32, 41);
  const Tensor g = test::random_tensor({s.m, s.n}, DType::kF32, 42);
  LinearOptions options;
  options.seed = 4;
  Linear lin(s.k, s.n, options);
  const std::vector<float> xv = x.to_floats(), gv = g.to_floats(), w = lin.weight().to_floats();
  std::vector<double> dx_want, dw_want, mag;
  nt_product(widened(gv), te_nvfp4(transposed(w, s.n, s.k), s.k, s.n, true), s.m, s.k, s.n, dx_want,
             mag);
  nt_product(widened(rht_rows(transposed(gv, s.m, s.n), s.n, s.m)),
             te_nvfp4(rht_rows(transposed(xv, s.m, s.k), s.k, s.m), s.k, s.m, false), s.n, s.k, s.m,
             dw_want, mag);

  const int reps = 256;
  std::vector<double> dx_mean(dx_want.size(), 0), dw_mean(dw_want.size(), 0);
  double dx_single = 0, dw_single = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const LinearRun got = run_linear(lin, x, g, Recipe::nvfp4());
    if (rep == 0) {
      dx_single = relative_rms(widened(got.dx), dx_want);
      dw_single = relative_rms(widened(got.dw), dw_want);
    }
    for (size_t i = 0; i < dx_mean.size(); ++i) dx_mean[i] += got.dx[i] / double{reps};
    for (size_t i = 0; i < dw_mean.size(); ++i) dw_mean[i] += got.dw[i] / double{reps};
  }
  // Unbiased: the error of the mean falls as 1 / sqrt(reps) (16 here); a bias would stay.
  const double dx_err = relative_rms(dx_mean, dx_want), dw_err = relative_rms(dw_mean, dw_want);
  EXPECT_LT(dx_err, dx_single / 8) << "dgrad: one backward " << dx_single << ", mean " << dx_err;
  EXPECT_LT(dw_err, dw_single / 8) << "wgrad: one backward " << dw_single << ", mean " << dw_err;
}

}  // namespace
}  // namespace octet::modules
