// Which library path the CUDA backend took: cuDNN's fused attention (forward and backward, head
// dims 64 and 128) and cuBLASLt's native FP8 GEMM at the benchmark shapes. A silent fallback
// (octet's f32 attention kernels, FP8 through bf16 copies) gives right numbers but none of the
// speed, so these assert the path itself. The GPU-only ones skip in the emulation build (cuDNN is
// not emulated; the benchmark shapes are hours of emulated GEMM) and tools/gpu-check fails when
// a test labelled cuda skipped on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/attention_cudnn.h"
#if OCTET_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"  // gemm_choices
#endif
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::on_cpu;
using test::on_gpu;

#if defined(OCTET_CUDA_EMULATION) && OCTET_CUDA_EMULATION
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

#if OCTET_WITH_CUDA
#define OCTET_REQUIRE_REAL_GPU(why)                                                 \
  do {                                                                              \
    OCTET_REQUIRE_CUDA();                                                           \
    if (kEmulated)                                                                  \
      GTEST_SKIP() << "skipped: GPU-only test, not in the emulation build (" << why \
                   << "); tools/gpu-check runs it on a GPU";                        \
  } while (0)

// The choice gemm made for (m, n, k) with these dtypes, or null when it planned none.
const cuda::GemmChoice* find_choice(const std::vector<cuda::GemmChoice>& choices, int64_t m,
                                    int64_t n, int64_t k, DType a, DType b, DType out) {
  for (const cuda::GemmChoice& c : choices) {
    if (c.m == m && c.n == n && c.k == k && c.a == a && c.b == b && c.out == out) return &c;
  }
  return nullptr;
}

// out (m, n) = a (m, k) · b (n, k)ᵀ in e4m3 (or `fp8`) with bf16 out, as octet bench gemm does.
void fp8_gemm_tn(int64_t m, int64_t n, int64_t k, DType fp8, uint64_t seed) {
  const Tensor one = test::scalar(1.f, test::gpu());
  auto quantized = [&](const Shape& shape, uint64_t s) {
    const Tensor x = on_gpu(test::random_tensor(shape, DType::kF32, s));
    Tensor q = Tensor::empty(shape, fp8, test::gpu());
    ops::quantize_fp8(x, one, &q, nullptr, nullptr);
    return q;
  };
  const Tensor a = quantized({m, k}, seed), b = quantized({n, k}, seed + 1);
  Tensor out = Tensor::empty({m, n}, DType::kBF16, test::gpu());
  ops::GemmOptions options;
  options.a_scale_inv = &one;
  options.b_scale_inv = &one;
  options.fp8_accumulation = ops::FP8Accumulation::kFast;
  ops::gemm(a, ops::Transpose::kNo, b, ops::Transpose::kYes, out, options);
}

#endif  // OCTET_WITH_CUDA

// ---- cuDNN attention ----

TEST(CudaCudnnAttention, DeclineRulesByVersion) {
  using cuda::cudnn::cudnn_rule;
  using cuda::cudnn::CudnnRule;
  EXPECT_EQ(cudnn_rule(8907, false, 128), CudnnRule::kDeclineOldVersion);
  EXPECT_EQ(cudnn_rule(90100, true, 1), CudnnRule::kUse);  // before 9.18 length 1 is fine
  EXPECT_EQ(cudnn_rule(90900, false, 128), CudnnRule::kUse);
  EXPECT_EQ(cudnn_rule(91000, false, 128), CudnnRule::kDeclineVersion);  // 9.10.0
  EXPECT_EQ(cudnn_rule(91001, true, 128), CudnnRule::kDeclineVersion);   // 9.10.1
  EXPECT_EQ(cudnn_rule(91002, false, 128), CudnnRule::kUse);             // 9.10.2
  EXPECT_EQ(cudnn_rule(91700, true, 1), CudnnRule::kUse);
  EXPECT_EQ(cudnn_rule(91800, true, 1), CudnnRule::kDeclineBackwardKvLength1);
  EXPECT_EQ(cudnn_rule(91800, false, 1), CudnnRule::kUse);  // forward with length 1 is fine
  EXPECT_EQ(cudnn_rule(91800, true, 2), CudnnRule::kUse);
  EXPECT_EQ(cudnn_rule(100000, true, 1), CudnnRule::kDeclineBackwardKvLength1);
}

#if OCTET_WITH_CUDA

TEST(CudaCudnnAttention, RunsForHeadDims64And128AndMatchesTheCpu) {
  OCTET_REQUIRE_REAL_GPU("cuDNN is not emulated");
  const char* env = std::getenv("OCTET_CUDNN_ATTENTION");
  ASSERT_FALSE(env != nullptr && std::string(env) == "0")
      << "OCTET_CUDNN_ATTENTION=0 forces octet's own kernels";
  for (int64_t d : {64, 128}) {
    SCOPED_TRACE("head dim " + std::to_string(d));
    const int64_t B = 2, T = 128, H = 4;
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    const Tensor qkv = test::random_tensor({B, T, 3 * H * d}, DType::kF32, 40 + d);
    const Tensor dout = test::random_tensor({B, T, H * d}, DType::kF32, 41 + d);
    const ops::AttentionForward want = ops::causal_attention(qkv, H, scale);
    const Tensor want_dqkv =
        ops::causal_attention_backward(dout, qkv, want.out, want.lse, H, scale);

    const cuda::cudnn::AttentionRuns before = cuda::cudnn::attention_runs();
    const Tensor qkv_g = on_gpu(qkv);
    const ops::AttentionForward got = ops::causal_attention(qkv_g, H, scale);
    const Tensor dqkv =
        ops::causal_attention_backward(on_gpu(dout), qkv_g, got.out, got.lse, H, scale);
    const cuda::cudnn::AttentionRuns after = cuda::cudnn::attention_runs();
    EXPECT_EQ(after.forward, before.forward + 1) << "cuDNN's forward did not run (see the log)";
    EXPECT_EQ(after.backward, before.backward + 1) << "cuDNN's backward did not run";
    // cuDNN computes in bf16 (the tolerance table's bf16 row); the backward chains two more
    // products of length T through the same roundings.
    const test::Tolerance bf16 = test::parity_tolerance(DType::kBF16);
    EXPECT_TRUE(test::close_to(on_cpu(got.out), want.out, bf16)) << "out";
    EXPECT_TRUE(test::close_to(on_cpu(got.lse), want.lse, bf16)) << "lse";
    EXPECT_TRUE(test::close_to(on_cpu(dqkv), want_dqkv, test::scaled(bf16, 2))) << "dqkv";
  }
}

TEST(CudaCudnnAttention, RunsGroupedQueryHeadsAndMatchesTheCpu) {
  OCTET_REQUIRE_REAL_GPU("cuDNN is not emulated");
  // Key and value with G heads in cuDNN's graph (no repeated copies): forward and backward run
  // on cuDNN for 4 query heads per key/value head and for one key/value head.
  for (int64_t kv : {2, 1}) {
    SCOPED_TRACE("kv heads " + std::to_string(kv));
    const int64_t B = 2, T = 128, H = 8, D = 64;
    const float scale = 1.f / std::sqrt(static_cast<float>(D));
    const Tensor qkv = test::random_tensor({B, T, (H + 2 * kv) * D}, DType::kF32, 50 + kv);
    const Tensor dout = test::random_tensor({B, T, H * D}, DType::kF32, 60 + kv);
    const ops::AttentionForward want = ops::causal_attention(qkv, H, kv, scale);
    const Tensor want_dqkv =
        ops::causal_attention_backward(dout, qkv, want.out, want.lse, H, kv, scale);

    const cuda::cudnn::AttentionRuns before = cuda::cudnn::attention_runs();
    const Tensor qkv_g = on_gpu(qkv);
    const ops::AttentionForward got = ops::causal_attention(qkv_g, H, kv, scale);
    const Tensor dqkv =
        ops::causal_attention_backward(on_gpu(dout), qkv_g, got.out, got.lse, H, kv, scale);
    const cuda::cudnn::AttentionRuns after = cuda::cudnn::attention_runs();
    EXPECT_EQ(after.forward, before.forward + 1) << "cuDNN's grouped forward did not run (the log)";
    EXPECT_EQ(after.backward, before.backward + 1) << "cuDNN's grouped backward did not run";
    // bf16 as above; a key or value gradient sums H/G heads' bf16 gradients.
    const test::Tolerance bf16 = test::parity_tolerance(DType::kBF16);
    EXPECT_TRUE(test::close_to(on_cpu(got.out), want.out, bf16)) << "out";
    EXPECT_TRUE(test::close_to(on_cpu(got.lse), want.lse, bf16)) << "lse";
    EXPECT_TRUE(test::close_to(on_cpu(dqkv), want_dqkv,
                               test::scaled(bf16, 2.0 * static_cast<double>(H / kv))))
        << "dqkv";
  }
}

// ---- cuBLASLt FP8 ----

TEST(CudaGemm, ReportsTheNativeFp8PathAndTheBf16Fallback) {
  OCTET_REQUIRE_CUDA();
  // e4m3 x e4m3 TN has FP8 kernels (the emulated cuBLASLt keeps that rule); e5m2 x e5m2 has none
  // anywhere, so it goes through bf16 copies, and the choice says so.
  fp8_gemm_tn(64, 96, 128, DType::kE4M3, 50);
  fp8_gemm_tn(64, 96, 128, DType::kE5M2, 52);
  const std::vector<cuda::GemmChoice> choices = cuda::gemm_choices();
  const cuda::GemmChoice* e4m3 =
      find_choice(choices, 64, 96, 128, DType::kE4M3, DType::kE4M3, DType::kBF16);
  const cuda::GemmChoice* e5m2 =
      find_choice(choices, 64, 96, 128, DType::kE5M2, DType::kE5M2, DType::kBF16);
  ASSERT_NE(e4m3, nullptr);
  ASSERT_NE(e5m2, nullptr);
  EXPECT_TRUE(e4m3->fp8_native);
  EXPECT_FALSE(e4m3->fp8_via_bf16);
  EXPECT_FALSE(e5m2->fp8_native);
  EXPECT_TRUE(e5m2->fp8_via_bf16);
}

TEST(CudaGemm, NativeFp8AtTheBenchmarkShapes) {
  OCTET_REQUIRE_REAL_GPU("the benchmark shapes take hours in the emulated cuBLASLt");
  // octet bench gemm's shapes: 8192^3 and a GPT-2 layer's forward GEMMs over 8192 tokens.
  const int64_t shapes[][3] = {{8192, 8192, 8192},
                               {8192, 2304, 768},
                               {8192, 768, 768},
                               {8192, 3072, 768},
                               {8192, 768, 3072}};
  uint64_t seed = 60;
  for (const auto& s : shapes) fp8_gemm_tn(s[0], s[1], s[2], DType::kE4M3, seed += 2);
  const std::vector<cuda::GemmChoice> choices = cuda::gemm_choices();
  for (const auto& s : shapes) {
    SCOPED_TRACE(std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]));
    const cuda::GemmChoice* c =
        find_choice(choices, s[0], s[1], s[2], DType::kE4M3, DType::kE4M3, DType::kBF16);
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->fp8_native) << "cuBLASLt declined native FP8 (the log says why)";
  }
}

#endif  // OCTET_WITH_CUDA

}  // namespace
}  // namespace octet
