// GEMM on CUDA (cuBLASLt) against the CPU backend: f32 in every transpose combination with bias,
// alpha and accumulation, bf16 operands, raw FP8 operands in e4m3/e5m2 mixes, the GELU epilogue
// and FP8 outputs with their amax, and the FP8 GEMM layouts (fprop, dgrad, wgrad) on per-tensor
// and MXFP8 operands with f32 and bf16 outputs. Both sides multiply the same operand values; they
// differ only in how the products are summed, so the bound is a multiple of sum_k |a_ik b_kj|
// that grows with K (see accumulation_bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quantized.h"
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
// sum_k |a_ik b_kj|: the GEMM rows of the tolerance table (tests/cuda/cuda_test_util.h).
double accumulation_bound(bool fp8, int64_t k) { return test::gemm_accumulation_bound(fp8, k); }

// |got - want| <= per_magnitude * mag + the output's own rounding: a few f32 ulps (alpha, bias
// and accumulation each round once), or for a bf16 output one bf16 step (2^-7 relative) where the
// f32 values differ slightly between the backends, plus one bf16 rounding (2^-8) of the sum of
// the terms: cuBLASLt's bf16 epilogue may round the product to bf16 before it adds C and the
// bias (results 2 bf16 steps from the CPU's where C and the bias cancel most of the product),
// where the CPU rounds once.
::testing::AssertionResult within_bound(const Tensor& got, const Tensor& want,
                                        const std::vector<double>& mag, double per_magnitude) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  }
  if (!got.device().is_cuda()) return ::testing::AssertionFailure() << "got " << got;
  const std::vector<float> g = on_cpu(got).to_floats(), w = want.to_floats();
  const bool bf16 = want.dtype() == DType::kBF16;
  const double out_rounding = bf16 ? std::ldexp(1.0, -7) : 4 * std::ldexp(1.0, -24);
  const double epilogue_rounding = bf16 ? std::ldexp(1.0, -8) : 0.0;
  size_t bad = 0, first = 0;
  double first_tol = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol =
        (per_magnitude + epilogue_rounding) * mag[i] + out_rounding * std::fabs(w[i]) + 1e-30;
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

// ---- the GELU epilogue and FP8 outputs ----

// GELU's slope lies in [-0.13, 1.13]: inputs that differ by e give outputs within 1.13 e.
constexpr double kGeluLipschitz = 1.13;

// One GEMM out = epilogue(a (M, K) · b (N, K)ᵀ [+ bias]) as CPU tensors; each backend runs it on
// its own copies.
struct GemmCase {
  std::string name;
  Tensor a, b;
  Tensor a_scale_inv, b_scale_inv;  // FP8 operands only
  double a_scale = 1, b_scale = 1;  // logical value = code * these
  Tensor bias;                      // undefined: none
  ops::Epilogue epilogue = ops::Epilogue::kNone;
  Tensor out_scale;  // FP8 out only
  float amax_start = 0.25f;

  bool fp8() const { return is_fp8(a.dtype()); }
  std::vector<double> mag() const {
    std::vector<double> m = magnitude(a, Transpose::kNo, b, Transpose::kYes, 1, a_scale, b_scale);
    if (bias.defined()) add_row_terms(m, bias);
    return m;
  }
  // Bound on |cuda - cpu| per unit of mag: the accumulation's, through the GELU's slope.
  double per_magnitude() const {
    const double acc = accumulation_bound(fp8(), a.cols());  // a is (M, K)
    return epilogue == ops::Epilogue::kGelu ? kGeluLipschitz * acc : acc;
  }
};

struct GemmRun {
  Tensor out;  // on the device it ran on
  float amax = 0;
};

GemmRun run_case(const GemmCase& c, DType out_dtype, Device device) {
  auto here = [&](const Tensor& t) { return device.is_cpu() || !t.defined() ? t : on_gpu(t); };
  const Tensor a = here(c.a), b = here(c.b), ia = here(c.a_scale_inv), ib = here(c.b_scale_inv);
  const Tensor bias = here(c.bias), scale = here(c.out_scale);
  Tensor amax = test::scalar(c.amax_start, device);
  GemmOptions o;
  if (c.fp8()) {
    o.a_scale_inv = &ia;
    o.b_scale_inv = &ib;
  }
  if (bias.defined()) o.bias = &bias;
  o.epilogue = c.epilogue;
  if (is_fp8(out_dtype)) {
    o.out_scale = &scale;
    o.out_amax = &amax;
  }
  GemmRun run;
  run.out = ops::gemm(a, Transpose::kNo, b, Transpose::kYes, out_dtype, o);
  run.amax = on_cpu(amax).item();
  return run;
}

// Operands of one kind for M x N x K: f32, bf16, or FP8 codes with non-trivial scale_inv
// (e4m3 x e4m3 and e4m3 x e5m2 reach cuBLASLt's FP8 kernels; e5m2 x e5m2 goes through bf16).
GemmCase make_case(DType a_dtype, DType b_dtype, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  GemmCase c;
  c.name = std::string(dtype_name(a_dtype)) + " x " + std::string(dtype_name(b_dtype));
  const Tensor a_hp = test::random_tensor({m, k}, DType::kF32, seed, 2.f);
  const Tensor b_hp = test::random_tensor({n, k}, DType::kF32, seed + 1, 0.5f);
  if (!is_fp8(a_dtype)) {
    c.a = a_dtype == DType::kF32 ? a_hp : ops::cast(a_hp, a_dtype);
    c.b = b_dtype == DType::kF32 ? b_hp : ops::cast(b_hp, b_dtype);
    return c;
  }
  const float sa = 64.f, sb = 256.f;
  c.a = Tensor::empty({m, k}, a_dtype);
  c.b = Tensor::empty({n, k}, b_dtype);
  ops::quantize_fp8(a_hp, test::scalar(sa), &c.a, nullptr, nullptr);
  ops::quantize_fp8(b_hp, test::scalar(sb), &c.b, nullptr, nullptr);
  c.a_scale_inv = test::scalar(1.f / sa);
  c.b_scale_inv = test::scalar(1.f / sb);
  c.a_scale = 1.0 / sa;
  c.b_scale = 1.0 / sb;
  return c;
}

const std::pair<DType, DType> kOperandKinds[] = {{DType::kF32, DType::kF32},
                                                 {DType::kBF16, DType::kBF16},
                                                 {DType::kE4M3, DType::kE4M3},
                                                 {DType::kE4M3, DType::kE5M2},
                                                 {DType::kE5M2, DType::kE5M2}};
// No bias, a bf16 bias (cuBLASLt's epilogue takes it with FP8 operands), an f32 one.
const std::optional<DType> kBiasKinds[] = {std::nullopt, DType::kBF16, DType::kF32};
std::string name_of(std::optional<DType> bias) {
  return bias ? std::string(dtype_name(*bias)) : std::string("none");
}

TEST(CudaGemm, GeluEpilogueMatchesTheCpu) {
  OCTET_REQUIRE_CUDA();
  // 64 x 96 x 128 meets cuBLASLt's FP8 alignment rules; 37 x 53 x 71 does not (FP8 falls back).
  for (const Problem& p : {Problem{64, 96, 128}, Problem{37, 53, 71}}) {
    for (const auto& [da, db] : kOperandKinds) {
      for (std::optional<DType> bias_dtype : kBiasKinds) {
        for (DType out : {DType::kF32, DType::kBF16}) {
          GemmCase c = make_case(da, db, p.m, p.n, p.k, 101);
          if (bias_dtype) c.bias = test::random_tensor({p.n}, *bias_dtype, 103);
          c.epilogue = ops::Epilogue::kGelu;
          SCOPED_TRACE(c.name + " M=" + std::to_string(p.m) + " bias " + name_of(bias_dtype) +
                       " -> " + std::string(dtype_name(out)));
          const GemmRun want = run_case(c, out, Device::cpu());
          const GemmRun got = run_case(c, out, test::gpu());
          EXPECT_TRUE(within_bound(got.out, want.out, c.mag(), c.per_magnitude()));
        }
      }
    }
  }
}

// FP8 outputs of the two backends as values (code / out_scale). The f32 values they were cast
// from differ by the accumulation (through the GELU's slope), so a code may lie one FP8 step from
// the CPU's, or more where that difference spans steps: |got - want| <= per_magnitude * mag + one
// step at the larger value (2^-3 relative for e4m3, 2^-2 for e5m2; the subnormal step near 0).
::testing::AssertionResult fp8_within_bound(const Tensor& got, const Tensor& want, float scale,
                                            const std::vector<double>& mag, double per_magnitude) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  }
  if (!got.device().is_cuda()) return ::testing::AssertionFailure() << "got " << got;
  const std::vector<float> g = on_cpu(got).to_floats(), w = want.to_floats();
  const bool e4m3 = want.dtype() == DType::kE4M3;
  const double rel_step = std::ldexp(1.0, e4m3 ? -3 : -2);
  const double min_step = std::ldexp(1.0, e4m3 ? -9 : -16);
  size_t bad = 0, first = 0, steps = 0;
  double first_tol = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double gv = g[i] / static_cast<double>(scale), wv = w[i] / static_cast<double>(scale);
    const double step = (rel_step * std::max(std::fabs(g[i]), std::fabs(w[i])) + min_step) / scale;
    const double tol = per_magnitude * mag[i] + step;
    steps += g[i] != w[i];
    if (!(std::fabs(gv - wv) <= tol) && bad++ == 0) {  // NaN (no saturation) fails here
      first = i;
      first_tol = tol;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess() << steps << " codes differ";
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements differ; first at " << first << ": code value "
         << g[first] << ", want " << w[first] << " (out_scale " << scale << ", tolerance "
         << first_tol << " before scaling, sum |terms| " << mag[first] << "); " << steps
         << " codes differ in all";
}

TEST(CudaGemm, Fp8OutputAndAmaxMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (const Problem& p : {Problem{64, 96, 128}, Problem{37, 53, 71}}) {
    for (const auto& [da, db] : kOperandKinds) {
      for (DType out : {DType::kE4M3, DType::kE5M2}) {
        for (std::optional<DType> bias_dtype : kBiasKinds) {
          for (ops::Epilogue epilogue : {ops::Epilogue::kNone, ops::Epilogue::kGelu}) {
            GemmCase c = make_case(da, db, p.m, p.n, p.k, 111);
            if (bias_dtype) c.bias = test::random_tensor({p.n}, *bias_dtype, 113);
            c.epilogue = epilogue;
            // Products reach ~4 sqrt(K): these scales saturate the largest ones (the CPU's rule
            // saturates; a cast that overflowed to NaN would fail the comparison).
            const float scale = out == DType::kE4M3 ? 16.f : 2048.f;
            c.out_scale = test::scalar(scale);
            SCOPED_TRACE(c.name + " M=" + std::to_string(p.m) + " -> " +
                         std::string(dtype_name(out)) + " bias " + name_of(bias_dtype) +
                         (epilogue == ops::Epilogue::kGelu ? " gelu" : ""));
            const GemmRun want = run_case(c, out, Device::cpu());
            const GemmRun got = run_case(c, out, test::gpu());
            const std::vector<double> mag = c.mag();
            EXPECT_TRUE(fp8_within_bound(got.out, want.out, scale, mag, c.per_magnitude()));
            // amax: max |value| before the scale, each backend's within the GEMM bound of the
            // other's (max-accumulated onto 0.25, below the result).
            const double max_mag = *std::max_element(mag.begin(), mag.end());
            EXPECT_GT(want.amax, c.amax_start);
            EXPECT_NEAR(got.amax, want.amax,
                        c.per_magnitude() * max_mag + 4 * std::ldexp(want.amax, -24));
          }
        }
      }
    }
  }
}

TEST(CudaGemm, Fp8OutputAmaxKeepsALargerValue) {
  OCTET_REQUIRE_CUDA();
  // cuBLASLt sets its amax; octet max-accumulates. Both the FP8 kernels' own D (e4m3 x e4m3 with
  // a bf16 bias) and the cast of a staged result (e5m2 x e5m2 through bf16) keep 1e6.
  for (DType operands : {DType::kE4M3, DType::kE5M2}) {
    GemmCase c = make_case(operands, operands, 64, 96, 128, 121);
    c.bias = test::random_tensor({96}, DType::kBF16, 123);
    c.out_scale = test::scalar(16.f);
    c.amax_start = 1e6f;
    const GemmRun got = run_case(c, DType::kE4M3, test::gpu());
    EXPECT_EQ(got.amax, 1e6f) << dtype_name(operands);
    const GemmRun want = run_case(c, DType::kE4M3, Device::cpu());
    EXPECT_TRUE(fp8_within_bound(got.out, want.out, 16.f, c.mag(), c.per_magnitude()));
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
