// GEMM on CUDA (cuBLASLt) against the CPU backend: f32 in every transpose combination with bias,
// alpha and accumulation, bf16 operands, raw FP8 operands in e4m3/e5m2 mixes, and the FP8 GEMM
// layouts (fprop, dgrad, wgrad) on per-tensor and MXFP8 operands with f32 and bf16 outputs. Both
// sides multiply the same operand values; they differ only in how the products are summed, so the
// bound is a multiple of sum_k |a_ik b_kj| that grows with K (see accumulation_bound).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quantizer.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::Accumulate;
using ops::GemmOptions;
using ops::Transpose;
using test::on_cpu;
using test::on_gpu;

// Element (i, j) of op(x), x a row-major (rows, cols) f64 matrix.
double at(const std::vector<double>& x, int64_t cols, Transpose t, int64_t i, int64_t j) {
  return t == Transpose::kYes ? x[static_cast<size_t>(j * cols + i)]
                              : x[static_cast<size_t>(i * cols + j)];
}

// |alpha| * sum_k |op(a)_ik| |op(b)_kj| for out (M, N) = op(a) · op(b), in f64, from CPU tensors
// viewed as 2-D (FP8 data as its code values times `a_scale` / `b_scale`).
std::vector<double> magnitude(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                              double alpha = 1, double a_scale = 1, double b_scale = 1) {
  const std::vector<double> av = test::to_doubles(a), bv = test::to_doubles(b);
  const bool a_t = ta == Transpose::kYes, b_t = tb == Transpose::kYes;
  const int64_t m = a_t ? a.cols() : a.rows(), k = a_t ? a.rows() : a.cols();
  const int64_t n = b_t ? b.rows() : b.cols();
  std::vector<double> mag(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) {
        s += std::fabs(at(av, a.cols(), ta, i, l) * at(bv, b.cols(), tb, l, j));
      }
      mag[static_cast<size_t>(i * n + j)] = std::fabs(alpha * a_scale * b_scale) * s;
    }
  }
  return mag;
}

// Adds |bias_j| (broadcast over rows) or |old_ij| to the magnitudes: terms of the output's sum.
void add_row_terms(std::vector<double>& mag, const Tensor& bias) {
  const std::vector<double> b = test::to_doubles(bias);
  for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(b[i % b.size()]);
}
void add_terms(std::vector<double>& mag, const Tensor& old) {
  const std::vector<double> o = test::to_doubles(old);
  for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(o[i]);
}

// How far a CUDA GEMM may be from the CPU's, per output element, as a multiple of
// sum_k |a_ik b_kj|:
// - f32 and bf16 operands: both backends accumulate in f32 (a product of two bf16 values is exact
//   in f32), and any order of a length-K f32 sum is within K u (u = 2^-24) of the exact sum, so
//   the two results are within 2 K u of each other (cuBLASLt's f32 compute, no TF32).
// - FP8 operands: Hopper's FP8 tensor cores keep about 14 bits of the running sum between
//   promotions to f32 (DeepSeek-V3 report, section 3.3.2), and the forward's fast accumulation
//   does not promote at all; errors of ~2^-13 relative per addition add up like a random walk,
//   sqrt(K). 4 sqrt(K) 2^-13 leaves several times the expected worst case, and still fails a
//   wrong layout, a missing scale or a missing bias by orders of magnitude.
double accumulation_bound(bool fp8, int64_t k) {
  const double kd = static_cast<double>(k);
  return fp8 ? 4 * std::sqrt(kd) * std::ldexp(1.0, -13) : 2 * kd * std::ldexp(1.0, -24);
}

// |got - want| <= per_magnitude * mag + the output's own rounding: a few f32 ulps (alpha, bias
// and accumulation each round once), or one bf16 step (2^-7 relative) for a bf16 output whose
// f32 value differs slightly between the backends.
::testing::AssertionResult within_bound(const Tensor& got, const Tensor& want,
                                        const std::vector<double>& mag, double per_magnitude) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  }
  if (!got.device().is_cuda()) return ::testing::AssertionFailure() << "got " << got;
  const std::vector<float> g = on_cpu(got).to_floats(), w = want.to_floats();
  const double out_rounding =
      want.dtype() == DType::kBF16 ? std::ldexp(1.0, -7) : 4 * std::ldexp(1.0, -24);
  size_t bad = 0, first = 0;
  double first_tol = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = per_magnitude * mag[i] + out_rounding * std::fabs(w[i]) + 1e-30;
    if (!(std::fabs(static_cast<double>(g[i]) - w[i]) <= tol) && bad++ == 0) {
      first = i;
      first_tol = tol;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements differ; first at " << first << ": got "
         << g[first] << ", want " << w[first] << " (tolerance " << first_tol << ", sum |terms| "
         << mag[first] << ")";
}

Shape stored(int64_t rows, int64_t cols, Transpose t) {
  return t == Transpose::kYes ? Shape{cols, rows} : Shape{rows, cols};
}

const char* name_of(Transpose t) { return t == Transpose::kYes ? "T" : "N"; }

struct Problem {
  int64_t m, n, k;
};

TEST(CudaGemm, F32AllTransposesWithBiasAlphaAndAccumulate) {
  OCTET_REQUIRE_CUDA();
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      for (const Problem& p : {Problem{37, 53, 71}, Problem{128, 96, 768}, Problem{1, 1000, 64}}) {
        SCOPED_TRACE(std::string(name_of(ta)) + name_of(tb) + " M=" + std::to_string(p.m) +
                     " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k));
        const Tensor a = test::random_tensor(stored(p.m, p.k, ta), DType::kF32, 11);
        const Tensor b = test::random_tensor(stored(p.k, p.n, tb), DType::kF32, 12);
        const double bound = accumulation_bound(false, p.k);

        // Plain product into a poisoned output (every element must be written).
        Tensor out = Tensor::empty({p.m, p.n}, DType::kF32);
        Tensor out_g = Tensor::full({p.m, p.n}, std::nanf(""), DType::kF32, test::gpu());
        ops::gemm(a, ta, b, tb, out);
        ops::gemm(on_gpu(a), ta, on_gpu(b), tb, out_g);
        std::vector<double> mag = magnitude(a, ta, b, tb);
        EXPECT_TRUE(within_bound(out_g, out, mag, bound)) << "plain";

        // alpha and an f32 bias, then a second product accumulated onto it.
        const Tensor bias = test::random_tensor({p.n}, DType::kF32, 13);
        GemmOptions o;
        o.alpha = 0.5f;
        o.bias = &bias;
        const Tensor bias_g = on_gpu(bias);
        GemmOptions og = o;
        og.bias = &bias_g;
        Tensor y = ops::gemm(a, ta, b, tb, DType::kF32, o);
        Tensor y_g = ops::gemm(on_gpu(a), ta, on_gpu(b), tb, DType::kF32, og);
        mag = magnitude(a, ta, b, tb, 0.5);
        add_row_terms(mag, bias);
        EXPECT_TRUE(within_bound(y_g, y, mag, bound)) << "alpha + bias";

        o.accumulate = og.accumulate = Accumulate::kYes;
        o.bias = og.bias = nullptr;
        const uint64_t version = y_g.version();
        const std::vector<double> before = mag;
        ops::gemm(a, ta, b, tb, y, o);
        ops::gemm(on_gpu(a), ta, on_gpu(b), tb, y_g, og);
        EXPECT_GT(y_g.version(), version);
        for (size_t i = 0; i < mag.size(); ++i) mag[i] += before[i];
        EXPECT_TRUE(within_bound(y_g, y, mag, bound)) << "accumulate";
      }
    }
  }
}

TEST(CudaGemm, Bf16OperandsIntoF32AndBf16OutputsWithBf16Bias) {
  OCTET_REQUIRE_CUDA();
  for (const Problem& p : {Problem{24, 40, 64}, Problem{256, 384, 512}}) {
    for (DType out_dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE("M=" + std::to_string(p.m) + " " + std::string(dtype_name(out_dtype)));
      const Tensor a = test::random_tensor({p.m, p.k}, DType::kBF16, 31);
      const Tensor b = test::random_tensor({p.n, p.k}, DType::kBF16, 32);
      const Tensor bias = test::random_tensor({p.n}, DType::kBF16, 33);
      const Tensor old = test::random_tensor({p.m, p.n}, out_dtype, 34);
      const Tensor bias_g = on_gpu(bias);
      GemmOptions o, og;
      o.bias = &bias;
      og.bias = &bias_g;
      o.accumulate = og.accumulate = Accumulate::kYes;
      Tensor y = old.clone(), y_g = on_gpu(old);
      ops::gemm(a, Transpose::kNo, b, Transpose::kYes, y, o);
      ops::gemm(on_gpu(a), Transpose::kNo, on_gpu(b), Transpose::kYes, y_g, og);
      std::vector<double> mag = magnitude(a, Transpose::kNo, b, Transpose::kYes);
      add_row_terms(mag, bias);
      add_terms(mag, old);
      EXPECT_TRUE(within_bound(y_g, y, mag, accumulation_bound(false, p.k)));
    }
  }
  // A 3-D operand folds its leading dimensions into rows.
  const Tensor x = test::random_tensor({2, 8, 32}, DType::kBF16, 35);
  const Tensor w = test::random_tensor({24, 32}, DType::kBF16, 36);
  const Tensor y = ops::gemm(x, Transpose::kNo, w, Transpose::kYes, DType::kBF16);
  const Tensor y_g = ops::gemm(on_gpu(x), Transpose::kNo, on_gpu(w), Transpose::kYes, DType::kBF16);
  EXPECT_TRUE(within_bound(y_g, y, magnitude(x.flatten_2d(), Transpose::kNo, w, Transpose::kYes),
                           accumulation_bound(false, 32)));
}

TEST(CudaGemm, RawFp8OperandsInEveryFormatMixAndTranspose) {
  OCTET_REQUIRE_CUDA();
  const Problem p{64, 48, 96};
  const float sa = 16.f, sb = 2048.f;  // non-trivial scales: scale_inv must be applied
  for (const auto& [da, db] :
       {std::pair{DType::kE4M3, DType::kE4M3}, std::pair{DType::kE4M3, DType::kE5M2},
        std::pair{DType::kE5M2, DType::kE4M3}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (ops::FP8Accumulation acc :
             {ops::FP8Accumulation::kSplit, ops::FP8Accumulation::kFast}) {
          SCOPED_TRACE(std::string(dtype_name(da)) + " x " + std::string(dtype_name(db)) + " " +
                       name_of(ta) + name_of(tb) +
                       (acc == ops::FP8Accumulation::kFast ? " fast" : " split"));
          const Tensor a_hp = test::random_tensor(stored(p.m, p.k, ta), DType::kF32, 21, 3.f);
          const Tensor b_hp = test::random_tensor(stored(p.k, p.n, tb), DType::kF32, 22, 0.05f);
          Tensor a = Tensor::empty(a_hp.shape(), da), b = Tensor::empty(b_hp.shape(), db);
          ops::quantize_fp8(a_hp, test::scalar(sa), &a, nullptr, nullptr);
          ops::quantize_fp8(b_hp, test::scalar(sb), &b, nullptr, nullptr);
          const Tensor ia = test::scalar(1.f / sa), ib = test::scalar(1.f / sb);
          const Tensor ia_g = on_gpu(ia), ib_g = on_gpu(ib);
          const Tensor bias = test::random_tensor({p.n}, DType::kF32, 23);
          const Tensor bias_g = on_gpu(bias);
          GemmOptions o, og;
          o.a_scale_inv = &ia;
          o.b_scale_inv = &ib;
          o.bias = &bias;
          og.a_scale_inv = &ia_g;
          og.b_scale_inv = &ib_g;
          og.bias = &bias_g;
          o.fp8_accumulation = og.fp8_accumulation = acc;
          std::vector<double> mag = magnitude(a, ta, b, tb, 1, 1.0 / sa, 1.0 / sb);
          add_row_terms(mag, bias);
          for (DType out : {DType::kF32, DType::kBF16}) {
            const Tensor y = ops::gemm(a, ta, b, tb, out, o);
            const Tensor y_g = ops::gemm(on_gpu(a), ta, on_gpu(b), tb, out, og);
            EXPECT_TRUE(within_bound(y_g, y, mag, accumulation_bound(true, p.k))) << out;
          }
        }
      }
    }
  }
}

// ---- the FP8 GEMM layouts on quantized tensors ----

struct Mode {
  const char* name;
  // A quantizer for forward or backward tensors whose state (if any) lives on `device`.
  std::function<std::shared_ptr<Quantizer>(FP8Direction, Device)> make;
};

std::shared_ptr<Quantizer> delayed(float scale, DType fp8, Device device) {
  return std::make_shared<DelayedScalingQuantizer>(test::scalar(scale, device),
                                                   Tensor::zeros({1}, DType::kF32, device), fp8);
}

const Mode kModes[] = {
    {"delayed_e4m3",
     [](FP8Direction d, Device device) {
       return delayed(d == FP8Direction::kForward ? 48.f : 96.f, DType::kE4M3, device);
     }},
    {"delayed_hybrid",
     [](FP8Direction d, Device device) {
       return d == FP8Direction::kForward ? delayed(40.f, DType::kE4M3, device)
                                          : delayed(4096.f, DType::kE5M2, device);
     }},
    {"current_hybrid",
     [](FP8Direction d, Device) {
       return make_quantizer(Recipe::current(FP8Format::kHybrid), nullptr, {d, 0});
     }},
    {"mxfp8", [](FP8Direction, Device) { return std::make_shared<MXFP8Quantizer>(DType::kE4M3); }},
};

class CudaFp8Gemm : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CudaFp8Gemm, AllLayoutsMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  const Mode& mode = kModes[std::get<0>(GetParam())];
  const DType out = std::get<1>(GetParam());
  // X (2, 64, 128): M = 128 tokens, K = 128; W (96, 128); dY (2, 64, 96). Multiples of 32, so
  // MXFP8 operands qualify too.
  const int64_t m = 128, k = 128, n = 96;
  const Tensor x = test::random_tensor({2, 64, k}, DType::kF32, 71, 2.f);
  const Tensor w = test::random_tensor({n, k}, DType::kBF16, 72, 0.5f);
  const Tensor dy = test::random_tensor({2, 64, n}, DType::kF32, 73, 0.01f);
  const Device cpu = Device::cpu(), gpu = test::gpu();
  auto quantize = [&](const Tensor& t, FP8Direction d, Device device) {
    return mode.make(d, device)->quantize(device.is_cpu() ? t : on_gpu(t), Usage::kBoth,
                                          Ownership::kInternal, AmaxRecording::kRecord);
  };
  auto qx = quantize(x, FP8Direction::kForward, cpu),
       qx_g = quantize(x, FP8Direction::kForward, gpu);
  auto qw = quantize(w, FP8Direction::kForward, cpu),
       qw_g = quantize(w, FP8Direction::kForward, gpu);
  auto qdy = quantize(dy, FP8Direction::kBackward, cpu);
  auto qdy_g = quantize(dy, FP8Direction::kBackward, gpu);
  // The operands themselves are equal bit for bit (fp8_test.cpp); here they let the GEMMs be
  // compared directly.
  ASSERT_TRUE(test::same_quantized(*qx_g, *qx));
  ASSERT_TRUE(test::same_quantized(*qw_g, *qw));
  ASSERT_TRUE(test::same_quantized(*qdy_g, *qdy));
  // Logical values of the operands, for the magnitudes of the terms.
  const Tensor xv = ops::dequantize(*qx, DType::kF32).reshape({m, k});
  const Tensor wv = ops::dequantize(*qw, DType::kF32);
  const Tensor dyv = ops::dequantize(*qdy, DType::kF32).reshape({m, n});

  // fprop: Y = X·Wᵀ + bias.
  const Tensor bias = test::random_tensor({n}, DType::kF32, 74);
  const Tensor bias_g = on_gpu(bias);
  ops::FP8GemmOptions o, og;
  o.bias = &bias;
  og.bias = &bias_g;
  const Tensor y = ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, out, o);
  const Tensor y_g = ops::fp8_gemm(*qx_g, *qw_g, ops::GemmLayout::kFprop, out, og);
  EXPECT_EQ(y_g.shape(), Shape({2, 64, n}));
  std::vector<double> mag = magnitude(xv, Transpose::kNo, wv, Transpose::kYes);
  add_row_terms(mag, bias);
  EXPECT_TRUE(within_bound(y_g, y, mag, accumulation_bound(true, k))) << "fprop";

  // dgrad: dX = dY·W.
  const Tensor dx = ops::fp8_gemm(*qdy, *qw, ops::GemmLayout::kDgrad, out);
  const Tensor dx_g = ops::fp8_gemm(*qdy_g, *qw_g, ops::GemmLayout::kDgrad, out);
  EXPECT_EQ(dx_g.shape(), Shape({2, 64, k}));
  EXPECT_TRUE(within_bound(dx_g, dx, magnitude(dyv, Transpose::kNo, wv, Transpose::kNo),
                           accumulation_bound(true, n)))
      << "dgrad";

  // wgrad: dW = dYᵀ·X, accumulated onto what the output holds.
  const Tensor old = test::random_tensor({n, k}, out, 75);
  Tensor dw = old.clone(), dw_g = on_gpu(old);
  ops::FP8GemmOptions acc;
  acc.accumulate = Accumulate::kYes;
  ops::fp8_gemm(*qdy, *qx, ops::GemmLayout::kWgrad, dw, acc);
  ops::fp8_gemm(*qdy_g, *qx_g, ops::GemmLayout::kWgrad, dw_g, acc);
  mag = magnitude(dyv, Transpose::kYes, xv, Transpose::kNo);
  add_terms(mag, old);
  EXPECT_TRUE(within_bound(dw_g, dw, mag, accumulation_bound(true, m))) << "wgrad";
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaFp8Gemm,
                         ::testing::Combine(::testing::Range(0, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const auto& info) {
                           return std::string(kModes[std::get<0>(info.param)].name) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

TEST(CudaGemm, Fp8GemmLargeShapesTrackTheCpu) {
  OCTET_REQUIRE_CUDA();
  // A layer-sized forward: 512 tokens, K = 1024, N = 768, per-tensor hybrid and MXFP8.
  const int64_t m = 512, k = 1024, n = 768;
  const Tensor x = test::random_tensor({m, k}, DType::kBF16, 81);
  const Tensor w = test::random_tensor({n, k}, DType::kBF16, 82, 0.02f);
  for (const Mode& mode : {kModes[1], kModes[3]}) {
    auto q_cpu = mode.make(FP8Direction::kForward, Device::cpu());
    auto q_gpu = mode.make(FP8Direction::kForward, test::gpu());
    auto qx = q_cpu->quantize(x, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    auto qw = q_cpu->quantize(w, Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    auto qx_g =
        q_gpu->quantize(on_gpu(x), Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    auto qw_g =
        q_gpu->quantize(on_gpu(w), Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    const Tensor y = ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, DType::kBF16);
    const Tensor y_g = ops::fp8_gemm(*qx_g, *qw_g, ops::GemmLayout::kFprop, DType::kBF16);
    const std::vector<double> mag = magnitude(ops::dequantize(*qx, DType::kF32), Transpose::kNo,
                                              ops::dequantize(*qw, DType::kF32), Transpose::kYes);
    EXPECT_TRUE(within_bound(y_g, y, mag, accumulation_bound(true, k))) << mode.name;
  }
}

}  // namespace
}  // namespace octet
