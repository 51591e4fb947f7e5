// LayerNorm and RMSNorm, forward and backward, against f64 references written out here: the
// statistics from their definitions and the input gradient as the explicit Jacobian-vector
// product. Also: a large mean, zero-centred gamma, thread-count independence, bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/nn.h"
#include "kernels/ops.h"
#include "tests/kernels/nn_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::ZeroCenteredGamma;

struct RefNorm {
  std::vector<double> y, mean, rsigma;    // forward
  std::vector<double> dx, dgamma, dbeta;  // backward
};

// f64 LayerNorm (rms = false) or RMSNorm (rms = true) of x (rows, C), forward and backward.
// scale_j = gamma_j (or 1 + gamma_j); xhat = (x - mean) * rsigma; y = xhat * scale + beta.
// dx_i = sum_j dy_j scale_j dxhat_j/dx_i with
//   dxhat_j/dx_i = rsigma * (delta_ij - 1/C - xhat_i xhat_j / C)   (LayerNorm)
//   dxhat_j/dx_i = rsigma * (delta_ij - xhat_i xhat_j / C)         (RMSNorm)
RefNorm reference(const std::vector<double>& x, const std::vector<double>& dy,
                  const std::vector<double>& gamma, const std::vector<double>* beta, int64_t rows,
                  int64_t C, double eps, bool rms, bool zero_centered) {
  RefNorm r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dgamma.assign(static_cast<size_t>(C), 0.0);
  r.dbeta.assign(static_cast<size_t>(C), 0.0);
  std::vector<double> xhat(static_cast<size_t>(C));
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = x.data() + i * C;
    const double* dr = dy.data() + i * C;
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < C; ++j) mean += xr[j];
      mean /= static_cast<double>(C);
    }
    for (int64_t j = 0; j < C; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= static_cast<double>(C);
    const double rs = 1 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.rsigma.push_back(rs);
    for (int64_t j = 0; j < C; ++j) {
      const double s =
          zero_centered ? 1 + gamma[static_cast<size_t>(j)] : gamma[static_cast<size_t>(j)];
      xhat[static_cast<size_t>(j)] = (xr[j] - mean) * rs;
      r.y[static_cast<size_t>(i * C + j)] =
          xhat[static_cast<size_t>(j)] * s + (beta ? (*beta)[static_cast<size_t>(j)] : 0.0);
      r.dgamma[static_cast<size_t>(j)] += dr[j] * xhat[static_cast<size_t>(j)];
      r.dbeta[static_cast<size_t>(j)] += dr[j];
    }
    for (int64_t k = 0; k < C; ++k) {  // dx_k
      double acc = 0;
      for (int64_t j = 0; j < C; ++j) {
        const double s =
            zero_centered ? 1 + gamma[static_cast<size_t>(j)] : gamma[static_cast<size_t>(j)];
        const double jac = rs * ((j == k ? 1.0 : 0.0) - (rms ? 0.0 : 1.0 / static_cast<double>(C)) -
                                 xhat[static_cast<size_t>(k)] * xhat[static_cast<size_t>(j)] /
                                     static_cast<double>(C));
        acc += dr[j] * s * jac;
      }
      r.dx[static_cast<size_t>(i * C + k)] = acc;
    }
  }
  return r;
}

struct Case {
  int64_t rows, C;
  float mean, std;
  bool with_beta;
  ZeroCenteredGamma zc;
};

void check_layernorm(const Case& c, test::Tolerance fwd, test::Tolerance bwd) {
  const Tensor x = ops::add(test::random_tensor({c.rows, c.C}, DType::kF32, 201, c.std),
                            Tensor::full({c.C}, c.mean, DType::kF32));
  const Tensor gamma = test::random_tensor({c.C}, DType::kF32, 202, 0.5f);
  const Tensor beta = test::random_tensor({c.C}, DType::kF32, 203);
  const Tensor dy = test::random_tensor({c.rows, c.C}, DType::kF32, 204);
  const std::vector<double> bv = test::to_doubles(beta);
  const RefNorm want = reference(test::to_doubles(x), test::to_doubles(dy), test::to_doubles(gamma),
                                 c.with_beta ? &bv : nullptr, c.rows, c.C, 1e-5, false,
                                 c.zc == ZeroCenteredGamma::kYes);
  test::recycle_poisoned(x.nbytes());
  const ops::NormForward f = ops::layernorm(x, gamma, c.with_beta ? &beta : nullptr, 1e-5f, c.zc);
  EXPECT_EQ(f.mean.shape(), Shape({c.rows}));
  EXPECT_EQ(f.rsigma.shape(), Shape({c.rows}));
  EXPECT_TRUE(test::all_finite(f.y));
  EXPECT_TRUE(test::all_close(f.y.to_floats(), want.y, fwd));
  EXPECT_TRUE(test::all_close(f.mean.to_floats(), want.mean, {1e-7, 1e-6}));
  EXPECT_TRUE(test::all_close(f.rsigma.to_floats(), want.rsigma, {0, fwd.rel}));
  test::recycle_poisoned(x.nbytes());
  const ops::NormBackward b = ops::layernorm_backward(dy, x, f.mean, f.rsigma, gamma, c.zc);
  EXPECT_TRUE(test::all_finite(b.dx));
  EXPECT_TRUE(test::all_close(b.dx.to_floats(), want.dx, bwd));
  EXPECT_TRUE(test::all_close(b.dgamma.to_floats(), want.dgamma, bwd));
  EXPECT_TRUE(test::all_close(b.dbeta.to_floats(), want.dbeta, {1e-5, 1e-6}));
}

TEST(LayerNorm, ForwardBackwardMatchF64WithAndWithoutBeta) {
  check_layernorm({37, 129, 0.f, 1.f, true, ZeroCenteredGamma::kNo}, {1e-5, 1e-5}, {1e-5, 1e-5});
  check_layernorm({37, 129, 0.f, 1.f, false, ZeroCenteredGamma::kNo}, {1e-5, 1e-5}, {1e-5, 1e-5});
  check_layernorm({5, 7, 0.3f, 2.f, true, ZeroCenteredGamma::kYes}, {1e-5, 1e-5}, {1e-5, 1e-5});
  check_layernorm({100, 768, 0.f, 1.f, true, ZeroCenteredGamma::kNo}, {1e-5, 1e-5}, {1e-5, 1e-5});
}

TEST(LayerNorm, LargeMeanStaysAccurate) {
  // x = 1000 + N(0, 1): E[x^2] - E[x]^2 in f32 would lose every digit of the variance (10^6 vs
  // 1). The output stays within f32 rounding of the deviations; the backward reads the saved
  // f32 mean (rounded at 2^-14 near 1000), so it gets a few 1e-5 relative.
  check_layernorm({16, 768, 1000.f, 1.f, true, ZeroCenteredGamma::kNo}, {1e-5, 1e-5}, {2e-4, 2e-4});
}

TEST(LayerNorm, ZeroCenteredGammaEqualsOnePlusGamma) {
  const Tensor x = test::random_tensor({9, 65}, DType::kF32, 205);
  const Tensor g = test::random_tensor({65}, DType::kF32, 206, 0.1f);
  const Tensor one_plus = ops::add(g, Tensor::full({65}, 1.f, DType::kF32));
  const Tensor dy = test::random_tensor({9, 65}, DType::kF32, 207);
  const ops::NormForward zc = ops::layernorm(x, g, nullptr, 1e-5f, ZeroCenteredGamma::kYes);
  const ops::NormForward plain =
      ops::layernorm(x, one_plus, nullptr, 1e-5f, ZeroCenteredGamma::kNo);
  EXPECT_TRUE(test::all_close(zc.y.to_floats(), test::to_doubles(plain.y), {1e-6, 1e-6}));
  const ops::NormBackward bz =
      ops::layernorm_backward(dy, x, zc.mean, zc.rsigma, g, ZeroCenteredGamma::kYes);
  const ops::NormBackward bp =
      ops::layernorm_backward(dy, x, plain.mean, plain.rsigma, one_plus, ZeroCenteredGamma::kNo);
  EXPECT_TRUE(test::all_close(bz.dx.to_floats(), test::to_doubles(bp.dx), {1e-6, 1e-6}));
  // d(1 + gamma)/dgamma = 1: the same gamma gradient.
  EXPECT_TRUE(test::all_close(bz.dgamma.to_floats(), test::to_doubles(bp.dgamma), {1e-6, 1e-6}));
}

TEST(RmsNorm, ForwardBackwardMatchF64) {
  for (const ZeroCenteredGamma zc : {ZeroCenteredGamma::kNo, ZeroCenteredGamma::kYes}) {
    const int64_t rows = 41, C = 97;
    const Tensor x = test::random_tensor({rows, C}, DType::kF32, 208, 1.5f);
    const Tensor gamma = test::random_tensor({C}, DType::kF32, 209, 0.5f);
    const Tensor dy = test::random_tensor({rows, C}, DType::kF32, 210);
    const RefNorm want =
        reference(test::to_doubles(x), test::to_doubles(dy), test::to_doubles(gamma), nullptr, rows,
                  C, 1e-6, true, zc == ZeroCenteredGamma::kYes);
    const ops::NormForward f = ops::rmsnorm(x, gamma, 1e-6f, zc);
    EXPECT_FALSE(f.mean.defined());
    EXPECT_TRUE(test::all_close(f.y.to_floats(), want.y, {1e-5, 1e-5}));
    EXPECT_TRUE(test::all_close(f.rsigma.to_floats(), want.rsigma, {0, 1e-5}));
    test::recycle_poisoned(x.nbytes());
    const ops::NormBackward b = ops::rmsnorm_backward(dy, x, f.rsigma, gamma, zc);
    EXPECT_FALSE(b.dbeta.defined());
    EXPECT_TRUE(test::all_finite(b.dx));
    EXPECT_TRUE(test::all_close(b.dx.to_floats(), want.dx, {1e-5, 1e-5}));
    EXPECT_TRUE(test::all_close(b.dgamma.to_floats(), want.dgamma, {1e-5, 1e-5}));
  }
}

TEST(LayerNorm, GradientsDoNotDependOnThreadCount) {
  const Tensor x = test::random_tensor({301, 96}, DType::kF32, 211);
  const Tensor g = test::random_tensor({96}, DType::kF32, 212);
  const Tensor dy = test::random_tensor({301, 96}, DType::kF32, 213);
  const ops::NormForward f = ops::layernorm(x, g, nullptr, 1e-5f, ZeroCenteredGamma::kNo);
  ops::NormBackward one, two;
  {
    test::ThreadCount threads(1);
    one = ops::layernorm_backward(dy, x, f.mean, f.rsigma, g, ZeroCenteredGamma::kNo);
  }
  {
    test::ThreadCount threads(2);
    two = ops::layernorm_backward(dy, x, f.mean, f.rsigma, g, ZeroCenteredGamma::kNo);
  }
  EXPECT_TRUE(test::bitwise_equal(one.dx, two.dx));
  EXPECT_TRUE(test::bitwise_equal(one.dgamma, two.dgamma));
  EXPECT_TRUE(test::bitwise_equal(one.dbeta, two.dbeta));
}

TEST(LayerNorm, Bf16InputAndGammaAreAccepted) {
  const Tensor xb = test::random_tensor({6, 40}, DType::kBF16, 214);
  const Tensor gb = test::random_tensor({40}, DType::kBF16, 215);
  const ops::NormForward fb = ops::layernorm(xb, gb, nullptr, 1e-5f, ZeroCenteredGamma::kNo);
  const ops::NormForward ff = ops::layernorm(ops::cast(xb, DType::kF32), ops::cast(gb, DType::kF32),
                                             nullptr, 1e-5f, ZeroCenteredGamma::kNo);
  EXPECT_EQ(fb.y.dtype(), DType::kBF16);  // x's dtype: the f32 result rounded once
  EXPECT_TRUE(test::bitwise_equal(fb.y, ops::cast(ff.y, DType::kBF16)));
  EXPECT_TRUE(test::bitwise_equal(fb.rsigma, ff.rsigma));
}

TEST(LayerNorm, RejectsMismatchedArguments) {
  const Tensor x = Tensor::zeros({4, 16}, DType::kF32);
  const Tensor g = Tensor::zeros({15}, DType::kF32);
  try {
    ops::layernorm(x, g, nullptr, 1e-5f, ZeroCenteredGamma::kNo);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gamma must be (16,)"), std::string::npos) << e.what();
  }
  const Tensor g16 = Tensor::zeros({16}, DType::kF32);
  EXPECT_THROW(ops::layernorm(x, g16, nullptr, -1.f, ZeroCenteredGamma::kNo), Error);
  const Tensor stat = Tensor::zeros({3}, DType::kF32);
  EXPECT_THROW(ops::layernorm_backward(x, x, stat, stat, g16, ZeroCenteredGamma::kNo), Error);
  EXPECT_THROW(ops::rmsnorm_backward(Tensor::zeros({4, 8}, DType::kF32), x,
                                     Tensor::zeros({4}, DType::kF32), g16, ZeroCenteredGamma::kNo),
               Error);
}

}  // namespace
}  // namespace octet

namespace octet {
namespace {

// The norm fused with its FP8 cast gives exactly the cast of the unfused norm's f32 output, and
// the same statistics, without making the high-precision output. A bf16 x: the cast of the f32
// norm of its values (the fused cast does not round y to bf16 first).
TEST(NormFp8, EqualsTheCastOfTheNormOutputBitForBit) {
  for (ops::NormKind kind : {ops::NormKind::kLayerNorm, ops::NormKind::kRMSNorm}) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      for (DType xd : {DType::kF32, DType::kBF16}) {
        const Tensor xin =
            ops::cast(test::random_tensor({70, 48}, DType::kF32, 3, 2.f), xd);  // 70: a ragged tile
        const Tensor x = ops::cast(xin, DType::kF32);
        const Tensor gamma = test::random_tensor({48}, DType::kF32, 4);
        const Tensor beta = test::random_tensor({48}, DType::kF32, 5);
        const bool layer = kind == ops::NormKind::kLayerNorm;
        const ops::NormForward ref =
            layer ? ops::layernorm(x, gamma, &beta, 1e-5f, ops::ZeroCenteredGamma::kYes)
                  : ops::rmsnorm(x, gamma, 1e-5f, ops::ZeroCenteredGamma::kYes);
        const Tensor scale = Tensor::from_floats({3.f}, {1});
        Tensor want_row = Tensor::empty({70, 48}, fp8), want_col = Tensor::empty({48, 70}, fp8);
        Tensor want_amax = Tensor::from_floats({0.5f}, {1});
        ops::quantize_fp8(ref.y, scale, &want_row, &want_col, &want_amax);

        Tensor row = Tensor::empty({70, 48}, fp8), col = Tensor::empty({48, 70}, fp8);
        Tensor amax = Tensor::from_floats({0.5f}, {1});
        const ops::NormForward got =
            ops::norm_fp8(kind, xin, gamma, layer ? &beta : nullptr, 1e-5f,
                          ops::ZeroCenteredGamma::kYes, scale, &row, &col, &amax);
        EXPECT_FALSE(got.y.defined());
        EXPECT_EQ(std::memcmp(row.data(), want_row.data(), row.nbytes()), 0);
        EXPECT_EQ(std::memcmp(col.data(), want_col.data(), col.nbytes()), 0);
        EXPECT_EQ(amax.item(), want_amax.item());
        EXPECT_EQ(got.rsigma.to_floats(), ref.rsigma.to_floats());
        if (layer) {
          EXPECT_EQ(got.mean.to_floats(), ref.mean.to_floats());
        }
      }
    }
  }
}

// The fused norm + cast counts saturated and flushed elements of the norm output exactly as a
// reference counted here from the unfused output (CUDA's host cast for the flush, f64 for the
// range): gamma has huge channels (saturate), tiny ones (flush) and a zero one (y = 0 exactly,
// not flushed).
TEST(NormFp8, CountsSaturatedAndFlushedElementsOfTheNormOutput) {
  for (ops::NormKind kind : {ops::NormKind::kLayerNorm, ops::NormKind::kRMSNorm}) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      const int64_t rows = 130, C = 48;  // 130: three row tiles, the last ragged
      const Tensor x = test::random_tensor({rows, C}, DType::kF32, 11, 2.f);
      std::vector<float> g(static_cast<size_t>(C), 1.f);
      g[0] = fp8 == DType::kE4M3 ? 1000.f : 1e6f;
      g[1] = 1e-9f;
      g[2] = 0.f;
      const Tensor gamma = Tensor::from_floats(g, {C});
      const Tensor beta = Tensor::zeros({C}, DType::kF32);
      const bool layer = kind == ops::NormKind::kLayerNorm;
      const ops::NormForward ref =
          layer ? ops::layernorm(x, gamma, &beta, 1e-5f, ZeroCenteredGamma::kNo)
                : ops::rmsnorm(x, gamma, 1e-5f, ZeroCenteredGamma::kNo);
      const float scale_value = 2.f;
      FP8CastCounts want;
      const double max = fp8 == DType::kE4M3 ? 448.0 : 57344.0;
      for (float y : ref.y.to_floats()) {
        ++want.total;
        if (std::isnan(y)) continue;
        want.saturated += std::fabs(static_cast<double>(y) * scale_value) > max;
        want.flushed += y != 0.f && (test::reference_cast(y * scale_value, fp8) & 0x7F) == 0;
      }
      ASSERT_GT(want.saturated, rows / 2) << "channel 0 should mostly saturate";
      ASSERT_GE(want.flushed, rows) << "channel 1 should flush";

      const Tensor scale = Tensor::from_floats({scale_value}, {1});
      Tensor row = Tensor::empty({rows, C}, fp8), col = Tensor::empty({C, rows}, fp8);
      FP8CastCounts got;
      ops::norm_fp8(kind, x, gamma, layer ? &beta : nullptr, 1e-5f, ZeroCenteredGamma::kNo, scale,
                    &row, &col, nullptr, &got);
      EXPECT_EQ(got.saturated, want.saturated) << (layer ? "layernorm " : "rmsnorm ") << fp8;
      EXPECT_EQ(got.flushed, want.flushed) << (layer ? "layernorm " : "rmsnorm ") << fp8;
      EXPECT_EQ(got.total, rows * C);
      // And the unfused cast of the same output counts the same.
      FP8CastCounts unfused;
      ops::quantize_fp8(ref.y, scale, &row, nullptr, nullptr, &unfused);
      EXPECT_EQ(unfused.saturated, got.saturated);
      EXPECT_EQ(unfused.flushed, got.flushed);
    }
  }
}

}  // namespace
}  // namespace octet
