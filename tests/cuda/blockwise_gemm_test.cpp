// The blockwise FP8 GEMM on CUDA: cuBLASLt's native block-scaled path (VEC128 / BLK128x128 scale
// modes, kernels/cuda/gemm.cu) against the f32 expansion fallback and an f64 reference of the
// block-scaled product, which path runs where (device, cuBLASLt version, shape), and the refusal
// of 2D x 2D. In the emulation build the native path runs on tests/cuda_emu/cublaslt.cpp, written
// from cuBLAS's documentation; BlockwiseGemmGpu.NativeEqualsFallback checks it on a real GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/blockwise.h"
#include "kernels/cuda/cuda_ops.h"  // which path ran: blockwise_gemm_counts
#include "kernels/ops.h"
#include "runtime/blockwise_tensor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::on_cpu;
using test::on_gpu;

struct BlockOperand {
  Tensor data;       // (rows, K) e4m3
  Tensor scale_inv;  // blockwise_scale_shape(blocks, rows, K)
  BlockScaling blocks;
};

// Values over many magnitudes, so that blocks get very different power-of-two scales.
BlockOperand block_operand(int64_t rows, int64_t k, BlockScaling blocks, uint64_t seed) {
  std::vector<float> v = test::random_tensor({rows, k}, DType::kF32, seed, 1.f).to_floats();
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / k, c = static_cast<int64_t>(i) % k;
    v[i] *= std::ldexp(1.f, static_cast<int>((r * 5 + (c / 128) * 3) % 17) - 8);
  }
  const Tensor x = Tensor::from_floats(v, {rows, k});
  BlockOperand op{Tensor::empty({rows, k}, DType::kE4M3),
                  Tensor::empty(blockwise_scale_shape(blocks, rows, k), DType::kF32), blocks};
  ops::quantize_blockwise(x, {blocks, kE4M3Max, true, 0.f}, op.data, op.scale_inv);
  return op;
}

using test::ScopedEnv;

struct GemmRun {
  Tensor out;  // on the CPU
  int64_t native = 0, fallback = 0;
};

// ops::blockwise_gemm on cuda:0, with the paths it took.
GemmRun run_on_gpu(const BlockOperand& a, const BlockOperand& b, const Tensor& init,
                   const Tensor* bias, ops::Accumulate acc) {
  const cuda::BlockwiseGemmCounts before = cuda::blockwise_gemm_counts();
  Tensor out = on_gpu(init);
  const Tensor bias_g = bias != nullptr ? on_gpu(*bias) : Tensor();
  ops::blockwise_gemm(on_gpu(a.data), on_gpu(a.scale_inv), a.blocks, on_gpu(b.data),
                      on_gpu(b.scale_inv), b.blocks, out, bias != nullptr ? &bias_g : nullptr, acc);
  const cuda::BlockwiseGemmCounts after = cuda::blockwise_gemm_counts();
  return {on_cpu(out), after.native - before.native, after.fallback - before.fallback};
}

GemmRun run_fallback(const BlockOperand& a, const BlockOperand& b, const Tensor& init,
                     const Tensor* bias, ops::Accumulate acc) {
  ScopedEnv force("OCTET_CUBLASLT_BLOCK_SCALING", "0");
  return run_on_gpu(a, b, init, bias, acc);
}

// How far a result may be from the exact value of the block-scaled product, per element, for an
// exact sum `magnitude` of |terms| and an exact value `want`: the f32 row of the GEMM tolerance
// table, as (K + 8) f32 roundings of the magnitude; the FP8 tensor-core row on top where the
// native path ran on a real GPU (tests/cuda/cuda_test_util.h); for a bf16 out one bf16 rounding
// of the result and one of the terms (cuBLASLt's bf16 epilogue, as in gemm_test.cpp).
double bound_of(const GemmRun& run, int64_t k, double magnitude, double want) {
  double per_magnitude = static_cast<double>(k + 8) * std::ldexp(1.0, -24);
  if (run.native > 0 && test::fp8_tensor_cores()) {
    per_magnitude += test::gemm_accumulation_bound(true, k);
  }
  double rounding = 0;
  if (run.out.dtype() == DType::kBF16) {
    per_magnitude += std::ldexp(1.0, -8);
    rounding = std::ldexp(1.0, -8) * std::fabs(want);
  }
  return per_magnitude * magnitude + rounding + 1e-30;
}

// f64 reference: sum over K-blocks of the partial products times both block scales (the
// expansion is exact for power-of-two scales, so this is the sum of value * value in f64), with
// the bias and the old out, each element held to bound_of. With `other` (the same GEMM by the
// other path), |got - other| is held to the sum of both bounds: the two paths sum in different
// orders, and with cancellation that is more than a relative tolerance.
void check_against_f64(const GemmRun& got, const BlockOperand& a, const BlockOperand& b,
                       const Tensor& init, const Tensor* bias, ops::Accumulate acc,
                       const GemmRun* other = nullptr) {
  const int64_t m = a.data.rows(), n = b.data.rows(), k = a.data.cols();
  const std::vector<float> ax =
      ops::dequantize_blockwise(a.data, a.scale_inv, a.blocks, DType::kF32).to_floats();
  const std::vector<float> bx =
      ops::dequantize_blockwise(b.data, b.scale_inv, b.blocks, DType::kF32).to_floats();
  const std::vector<float> old = init.to_floats();
  const std::vector<float> bv =
      bias != nullptr ? bias->to_floats() : std::vector<float>(static_cast<size_t>(n), 0.f);
  const std::vector<float> out = got.out.to_floats();
  const std::vector<float> alt = other != nullptr ? other->out.to_floats() : out;
  int64_t bad = 0, apart = 0;
  std::string first, first_apart;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = double{ax[i * k + l]} * double{bx[j * k + l]};
        sum += p;
        magnitude += std::fabs(p);
      }
      const double keep = acc == ops::Accumulate::kYes ? double{old[i * n + j]} : 0.0;
      const double want = sum + bv[j] + keep;
      magnitude += std::fabs(bv[j]) + std::fabs(keep);
      const double bound = bound_of(got, k, magnitude, want);
      const double other_bound = other != nullptr ? bound_of(*other, k, magnitude, want) : bound;
      const double err = std::fabs(double{out[i * n + j]} - want);
      if (!(err <= bound)) {
        if (bad++ == 0) {
          first =
              fmt::format("({}, {}): got {}, f64 {}, bound {}", i, j, out[i * n + j], want, bound);
        }
      }
      const double gap = std::fabs(double{out[i * n + j]} - double{alt[i * n + j]});
      if (!(gap <= bound + other_bound) && apart++ == 0) {
        first_apart = fmt::format("({}, {}): {} and {}", i, j, out[i * n + j], alt[i * n + j]);
      }
    }
  }
  EXPECT_EQ(bad, 0) << bad << " elements off the f64 reference, first " << first;
  EXPECT_EQ(apart, 0) << apart << " elements differ between the two paths, first " << first_apart;
}

struct Case {
  int64_t m, n, k;
  BlockScaling a, b;
};

// Legal for the native path (M, N multiples of 4, K of 16), with partial K-blocks and tiles.
const Case kNativeCases[] = {{32, 48, 256, BlockScaling::k1D, BlockScaling::k1D},
                             {20, 136, 400, BlockScaling::k1D, BlockScaling::k2D},
                             {132, 12, 144, BlockScaling::k2D, BlockScaling::k1D},
                             {4, 260, 16, BlockScaling::k1D, BlockScaling::k2D}};

std::string name_of(const Case& c) {
  auto b = [](BlockScaling s) { return s == BlockScaling::k2D ? "2D" : "1D"; };
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " " +
         b(c.a) + "x" + b(c.b);
}

TEST(CudaBlockwiseGemm, NativeMatchesFallbackAndF64) {
  OCTET_REQUIRE_CUDA();
  for (const Case& c : kNativeCases) {
    // No bias; a bf16 bias (cuBLASLt's epilogue); an f32 bias (octet's own kernel after it).
    for (int bias_kind : {0, 1, 2}) {
      for (ops::Accumulate acc : {ops::Accumulate::kNo, ops::Accumulate::kYes}) {
        SCOPED_TRACE(name_of(c) +
                     (bias_kind == 1   ? " bf16 bias"
                      : bias_kind == 2 ? " f32 bias"
                                       : "") +
                     (acc == ops::Accumulate::kYes ? " accumulate" : ""));
        const BlockOperand a = block_operand(c.m, c.k, c.a, 91);
        const BlockOperand b = block_operand(c.n, c.k, c.b, 92);
        const Tensor init = test::random_tensor({c.m, c.n}, DType::kF32, 93);
        Tensor bias;
        if (bias_kind != 0) {
          bias = test::random_tensor({c.n}, bias_kind == 1 ? DType::kBF16 : DType::kF32, 94);
        }
        const Tensor* bias_p = bias.defined() ? &bias : nullptr;
        const GemmRun native = run_on_gpu(a, b, init, bias_p, acc);
        EXPECT_EQ(native.native, 1) << "the native path did not run";
        EXPECT_EQ(native.fallback, 0);
        const GemmRun fallback = run_fallback(a, b, init, bias_p, acc);
        EXPECT_EQ(fallback.native, 0);
        EXPECT_EQ(fallback.fallback, 1);
        check_against_f64(native, a, b, init, bias_p, acc, &fallback);
        check_against_f64(fallback, a, b, init, bias_p, acc);
      }
    }
  }
}

TEST(CudaBlockwiseGemm, NativeBf16OutMatchesFallback) {
  OCTET_REQUIRE_CUDA();
  const Case c = kNativeCases[1];
  const BlockOperand a = block_operand(c.m, c.k, c.a, 95);
  const BlockOperand b = block_operand(c.n, c.k, c.b, 96);
  const Tensor init = test::random_tensor({c.m, c.n}, DType::kBF16, 97);
  const Tensor bias = test::random_tensor({c.n}, DType::kBF16, 98);
  for (const Tensor* bias_p : {static_cast<const Tensor*>(nullptr), &bias}) {
    const GemmRun native = run_on_gpu(a, b, init, bias_p, ops::Accumulate::kNo);
    EXPECT_EQ(native.native, 1);
    const GemmRun fallback = run_fallback(a, b, init, bias_p, ops::Accumulate::kNo);
    EXPECT_EQ(native.out.dtype(), DType::kBF16);
    check_against_f64(native, a, b, init, bias_p, ops::Accumulate::kNo, &fallback);
    check_against_f64(fallback, a, b, init, bias_p, ops::Accumulate::kNo);
  }
}

// Shapes and devices the native path must not take: the expansion runs, with the same result.
TEST(CudaBlockwiseGemm, FallsBackWhereNativeIsRuledOut) {
  OCTET_REQUIRE_CUDA();
  struct Rule {
    const char* why;
    Case c;
    const char* env = nullptr;  // an emulated device or library that rules it out
    const char* value = nullptr;
  };
  const Rule rules[] = {
      {"M not a multiple of 4", {33, 48, 256, BlockScaling::k1D, BlockScaling::k1D}},
      {"N not a multiple of 4", {32, 18, 256, BlockScaling::k1D, BlockScaling::k2D}},
      {"K not a multiple of 16", {32, 48, 300, BlockScaling::k2D, BlockScaling::k1D}},
      {"compute capability 8.9",
       {36, 40, 128, BlockScaling::k1D, BlockScaling::k1D},
       "OCTET_EMU_COMPUTE_CAPABILITY",
       "89"},
      {"compute capability 10.0",
       {40, 36, 128, BlockScaling::k1D, BlockScaling::k1D},
       "OCTET_EMU_COMPUTE_CAPABILITY",
       "100"},
      {"cuBLASLt 12.8",
       {44, 40, 128, BlockScaling::k1D, BlockScaling::k2D},
       "OCTET_EMU_CUBLASLT_VERSION",
       "120800"},
  };
  for (const Rule& rule : rules) {
#if !OCTET_CUDA_EMULATION
    if (rule.env != nullptr) continue;  // only the emulated device can pretend to be another
#endif
    SCOPED_TRACE(std::string(rule.why) + ": " + name_of(rule.c));
    const BlockOperand a = block_operand(rule.c.m, rule.c.k, rule.c.a, 99);
    const BlockOperand b = block_operand(rule.c.n, rule.c.k, rule.c.b, 100);
    const Tensor init = test::random_tensor({rule.c.m, rule.c.n}, DType::kF32, 101);
    GemmRun got;
    for (int call = 0; call < 2; ++call) {  // the second from the plan cache's decision
      if (rule.env != nullptr) {
        ScopedEnv device(rule.env, rule.value);
        got = run_on_gpu(a, b, init, nullptr, ops::Accumulate::kNo);
      } else {
        got = run_on_gpu(a, b, init, nullptr, ops::Accumulate::kNo);
      }
      EXPECT_EQ(got.native, 0) << "call " << call;
      EXPECT_EQ(got.fallback, 1) << "call " << call;
    }
    check_against_f64(got, a, b, init, nullptr, ops::Accumulate::kNo);
  }
}

TEST(CudaBlockwiseGemm, TwoDByTwoDIsRefused) {
  OCTET_REQUIRE_CUDA();
  const BlockOperand a = block_operand(32, 256, BlockScaling::k2D, 102);
  const BlockOperand b = block_operand(48, 256, BlockScaling::k2D, 103);
  Tensor out = on_gpu(Tensor::zeros({32, 48}, DType::kF32));
  const cuda::BlockwiseGemmCounts before = cuda::blockwise_gemm_counts();
  EXPECT_THROW(ops::blockwise_gemm(on_gpu(a.data), on_gpu(a.scale_inv), a.blocks, on_gpu(b.data),
                                   on_gpu(b.scale_inv), b.blocks, out),
               std::exception);
  const cuda::BlockwiseGemmCounts after = cuda::blockwise_gemm_counts();
  EXPECT_EQ(after.native, before.native);
  EXPECT_EQ(after.fallback, before.fallback);
}

// On a real Hopper GPU: cuBLASLt's own block-scaled kernels against the expansion. Tensor-core
// FP8 accumulation and cuBLASLt's scale application are what the emulation cannot tell.
TEST(BlockwiseGemmGpu, NativeEqualsFallback) {
  OCTET_REQUIRE_CUDA();
#if OCTET_CUDA_EMULATION
  GTEST_SKIP() << "needs a real GPU: in the emulation build the native path runs on the emulated "
                  "cuBLASLt (CudaBlockwiseGemm.* test that); run tools/gpu-check on an H100/H200";
#else
  const Case cases[] = {{256, 512, 1024, BlockScaling::k1D, BlockScaling::k1D},
                        {512, 256, 1040, BlockScaling::k1D, BlockScaling::k2D},
                        {260, 384, 768, BlockScaling::k2D, BlockScaling::k1D}};
  for (const Case& c : cases) {
    SCOPED_TRACE(name_of(c));
    const BlockOperand a = block_operand(c.m, c.k, c.a, 104);
    const BlockOperand b = block_operand(c.n, c.k, c.b, 105);
    const Tensor init = test::random_tensor({c.m, c.n}, DType::kF32, 106);
    const Tensor bias = test::random_tensor({c.n}, DType::kBF16, 107);
    const GemmRun native = run_on_gpu(a, b, init, &bias, ops::Accumulate::kYes);
    if (native.native == 0) {
      GTEST_SKIP() << "cuBLASLt's block scale modes are not available here (Hopper and cuBLAS "
                      "12.9+ only; see the log line of the first call)";
    }
    const GemmRun fallback = run_fallback(a, b, init, &bias, ops::Accumulate::kYes);
    check_against_f64(native, a, b, init, &bias, ops::Accumulate::kYes, &fallback);
  }
#endif
}

}  // namespace
}  // namespace octet
