// Activations keep their dtype through every nn op (kernels/nn.h), on every device: a bf16 or
// f16 input gives an output of its dtype equal, bit for bit, to the f32 op on the same values
// rounded once, and the f32 statistics, loss and parameter gradients equal the f32 op's. On CUDA
// the bf16 operands are read and written by the kernels themselves (ActIn / ActOut), so this is
// the test of those paths; f16 goes through f32 copies there as on the CPU. The f32 ops are
// checked against f64 in tests/kernels/nn_*_test.cpp. A bf16 layer saves half the bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "modules/gpt.h"
#include "runtime/memory.h"
#include "runtime/rng.h"
#include "tests/support/devices.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::Activation;
using ops::ZeroCenteredGamma;

class ActivationDtypes : public test::DeviceTest {
 protected:
  // Random values of `dtype` on the test's device, and the same values as f32 (exact widening).
  struct Pair {
    Tensor lo, f32;
  };
  Pair values(const Shape& shape, DType dtype, uint64_t seed, float std = 1.f) const {
    const Tensor lo = ops::cast(random(shape, seed, std), dtype);
    return {lo, ops::cast(lo, DType::kF32)};
  }
  Tensor ids(const std::vector<int32_t>& v, const Shape& shape) const {
    Tensor t = Tensor::empty(shape, DType::kI32);
    std::copy(v.begin(), v.end(), t.data_as<int32_t>());
    return here(t);
  }
};

// `got` has `dtype` and is `f32` rounded to it.
::testing::AssertionResult rounded_once(const Tensor& got, const Tensor& f32, DType dtype) {
  if (got.dtype() != dtype) return ::testing::AssertionFailure() << "dtype of " << got;
  return test::same_bits(got, ops::cast(f32, dtype));
}

const Activation kActs[] = {Activation::kGelu, Activation::kRelu, Activation::kSquaredRelu,
                            Activation::kSilu};
const DType kLow[] = {DType::kBF16, DType::kF16};
// Odd rows (the scalar loops and tails) and a multiple of 4 (the vectorised ones).
const int64_t kCols[] = {37, 64};

TEST_P(ActivationDtypes, ActivationsSoftmaxAndDropout) {
  for (DType d : kLow) {
    for (int64_t cols : kCols) {
      SCOPED_TRACE(std::string(dtype_name(d)) + ", cols " + std::to_string(cols));
      const Pair x = values({5, cols}, d, 1, 2.f), dy = values({5, cols}, d, 2);
      for (Activation a : kActs) {
        SCOPED_TRACE(ops::activation_name(a));
        EXPECT_TRUE(rounded_once(ops::activation(a, x.lo), ops::activation(a, x.f32), d));
        EXPECT_TRUE(rounded_once(ops::activation_backward(a, dy.lo, x.lo),
                                 ops::activation_backward(a, dy.f32, x.f32), d));
        // An f32 gradient meeting a low-precision activation: dx has the activation's dtype.
        EXPECT_TRUE(rounded_once(ops::activation_backward(a, dy.f32, x.lo),
                                 ops::activation_backward(a, dy.f32, x.f32), d));
        const Pair gx = values({5, cols / 2 * 2}, d, 3, 2.f), h = values({5, cols / 2}, d, 4);
        EXPECT_TRUE(
            rounded_once(ops::gated_activation(a, gx.lo), ops::gated_activation(a, gx.f32), d));
        EXPECT_TRUE(rounded_once(ops::gated_activation_backward(a, h.lo, gx.lo),
                                 ops::gated_activation_backward(a, h.f32, gx.f32), d));
      }
      const Tensor y = ops::softmax(x.lo);
      EXPECT_TRUE(rounded_once(y, ops::softmax(x.f32), d));
      EXPECT_TRUE(rounded_once(ops::softmax_backward(dy.lo, y),
                               ops::softmax_backward(dy.f32, ops::cast(y, DType::kF32)), d));
      Generator g1(7), g2(7);
      const ops::DropoutForward lo = ops::dropout(x.lo, 0.3f, g1);
      const ops::DropoutForward hi = ops::dropout(x.f32, 0.3f, g2);
      EXPECT_TRUE(rounded_once(lo.y, hi.y, d));
      EXPECT_TRUE(test::same_bits(lo.mask, hi.mask));
      EXPECT_TRUE(rounded_once(ops::dropout_backward(dy.lo, lo.mask, 0.3f),
                               ops::dropout_backward(dy.f32, hi.mask, 0.3f), d));
    }
  }
}

TEST_P(ActivationDtypes, NormsKeepTheirActivationDtypeAndF32Statistics) {
  for (DType d : kLow) {
    for (int64_t cols : kCols) {
      SCOPED_TRACE(std::string(dtype_name(d)) + ", cols " + std::to_string(cols));
      const Pair x = values({6, cols}, d, 4, 3.f), dy = values({6, cols}, d, 5);
      const Tensor gamma = random({cols}, 6), beta = random({cols}, 7);
      for (bool layer : {true, false}) {
        SCOPED_TRACE(layer ? "layernorm" : "rmsnorm");
        const ops::NormForward lo =
            layer ? ops::layernorm(x.lo, gamma, &beta, 1e-5f, ZeroCenteredGamma::kNo)
                  : ops::rmsnorm(x.lo, gamma, 1e-5f, ZeroCenteredGamma::kYes);
        const ops::NormForward hi =
            layer ? ops::layernorm(x.f32, gamma, &beta, 1e-5f, ZeroCenteredGamma::kNo)
                  : ops::rmsnorm(x.f32, gamma, 1e-5f, ZeroCenteredGamma::kYes);
        EXPECT_TRUE(rounded_once(lo.y, hi.y, d));
        EXPECT_TRUE(test::same_bits(lo.rsigma, hi.rsigma));
        if (layer) {
          EXPECT_TRUE(test::same_bits(lo.mean, hi.mean));
        }
        const ops::NormBackward blo =
            layer ? ops::layernorm_backward(dy.lo, x.lo, lo.mean, lo.rsigma, gamma,
                                            ZeroCenteredGamma::kNo)
                  : ops::rmsnorm_backward(dy.lo, x.lo, lo.rsigma, gamma, ZeroCenteredGamma::kYes);
        const ops::NormBackward bhi =
            layer ? ops::layernorm_backward(dy.f32, x.f32, hi.mean, hi.rsigma, gamma,
                                            ZeroCenteredGamma::kNo)
                  : ops::rmsnorm_backward(dy.f32, x.f32, hi.rsigma, gamma, ZeroCenteredGamma::kYes);
        EXPECT_TRUE(rounded_once(blo.dx, bhi.dx, d));
        EXPECT_TRUE(test::same_bits(blo.dgamma, bhi.dgamma));
        if (layer) {
          EXPECT_TRUE(test::same_bits(blo.dbeta, bhi.dbeta));
        }
        // The norm fused with its FP8 cast reads the low-precision x itself and casts the f32
        // normalization: the bytes and amax of the f32 input's.
        const ops::NormKind kind = layer ? ops::NormKind::kLayerNorm : ops::NormKind::kRMSNorm;
        const ZeroCenteredGamma zc = layer ? ZeroCenteredGamma::kNo : ZeroCenteredGamma::kYes;
        Tensor q[2], qt[2], amax[2];
        for (int i = 0; i < 2; ++i) {
          q[i] = here(Tensor::empty({6, cols}, DType::kE4M3));
          qt[i] = here(Tensor::empty({cols, 6}, DType::kE4M3));
          amax[i] = scalar(0.f);
          ops::norm_fp8(kind, i == 0 ? x.lo : x.f32, gamma, layer ? &beta : nullptr, 1e-5f, zc,
                        scalar(16.f), &q[i], &qt[i], &amax[i]);
        }
        EXPECT_TRUE(test::same_bits(q[0], q[1]));
        EXPECT_TRUE(test::same_bits(qt[0], qt[1]));
        EXPECT_TRUE(test::same_bits(amax[0], amax[1]));
      }
    }
  }
}

TEST_P(ActivationDtypes, EmbeddingAttentionAndCrossEntropy) {
  for (DType d : kLow) {
    SCOPED_TRACE(dtype_name(d));
    // Embedding: rows of a low-precision table in its dtype; dtable f32.
    const Pair table = values({9, 12}, d, 8);
    const Tensor tok = ids({3, 0, 8, 3, 5, 1}, {2, 3});
    EXPECT_TRUE(rounded_once(ops::embedding(table.lo, tok), ops::embedding(table.f32, tok), d));
    const Pair dy = values({2, 3, 12}, d, 9);
    EXPECT_TRUE(test::same_bits(ops::embedding_backward(dy.lo, tok, 9),
                                ops::embedding_backward(dy.f32, tok, 9)));

    // Attention: out in qkv's dtype, lse f32; the backward reads the forward's out.
    for (int64_t head_dim : {8, 13}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim));
      const int64_t heads = 2, C = heads * head_dim;
      const float scale = 0.3f;
      const Pair qkv = values({2, 7, 3 * C}, d, 10), dout = values({2, 7, C}, d, 11);
      const ops::AttentionForward lo = ops::causal_attention(qkv.lo, heads, scale);
      const ops::AttentionForward hi = ops::causal_attention(qkv.f32, heads, scale);
      EXPECT_TRUE(rounded_once(lo.out, hi.out, d));
      EXPECT_TRUE(test::same_bits(lo.lse, hi.lse));
      EXPECT_TRUE(rounded_once(
          ops::causal_attention_backward(dout.lo, qkv.lo, lo.out, lo.lse, heads, scale),
          ops::causal_attention_backward(dout.f32, qkv.f32, ops::cast(lo.out, DType::kF32), lo.lse,
                                         heads, scale),
          d));
    }

    // Cross-entropy: loss and lse f32, dlogits in the logits' dtype.
    for (int64_t classes : kCols) {
      const Pair logits = values({6, classes}, d, 12, 3.f);
      const Tensor targets = ids({1, -100, 0, 30, 5, 2}, {6});
      const ops::CrossEntropyForward lo = ops::cross_entropy(logits.lo, targets, -100);
      const ops::CrossEntropyForward hi = ops::cross_entropy(logits.f32, targets, -100);
      EXPECT_TRUE(test::same_bits(lo.loss, hi.loss));
      EXPECT_TRUE(test::same_bits(lo.lse, hi.lse));
      const Tensor dloss = scalar(0.75f);
      EXPECT_TRUE(rounded_once(
          ops::cross_entropy_backward(dloss, logits.lo, targets, lo.lse, -100, lo.counted),
          ops::cross_entropy_backward(dloss, logits.f32, targets, hi.lse, -100, hi.counted), d));
    }
  }
}

// The workspace a bf16 or f16 op takes: none on a device whose kernels read and write 16-bit
// activations themselves (CUDA), and on the CPU exactly one f32 copy of each activation operand
// plus the f32 result that is rounded into the output. Counted by the allocator (its peak under
// MemTag::kWorkspace).
TEST_P(ActivationDtypes, SixteenBitOpsTakeNoF32CopiesWhereTheKernelsReadThem) {
  const int64_t n = 64 * 96;
  auto workspace_of = [&](const std::function<void()>& op) {
    const int64_t base = bytes(MemTag::kWorkspace);
    reset_peak_memory(device());
    op();
    return memory_stats(device()).peak_of(MemTag::kWorkspace) - base;
  };
  // f32 copies of `operands` activations and the f32 result on the CPU; nothing on CUDA.
  auto expected = [&](int operands) { return device().is_cuda() ? 0 : (operands + 1) * n * 4; };
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Pair x = values({64, 96}, dtype, 13), dy = values({64, 96}, dtype, 14);
    EXPECT_EQ(workspace_of([&] { ops::activation(Activation::kGelu, x.lo); }), expected(1));
    EXPECT_EQ(workspace_of([&] { ops::activation_backward(Activation::kGelu, dy.lo, x.lo); }),
              expected(2));
    EXPECT_EQ(workspace_of([&] { ops::softmax(x.lo); }), expected(1));
    Generator gen(3);
    EXPECT_EQ(workspace_of([&] { ops::dropout(x.lo, 0.2f, gen); }), expected(1));
  }
}

// The bytes a TransformerLayer's forward saves for its backward, of a model in `dtype` on the
// test's device, with its output.
struct LayerRun {
  int64_t saved;
  Tensor y;
};

TEST_P(ActivationDtypes, ABf16LayerSavesHalfTheActivationBytesOfAnF32One) {
  const int64_t B = 2, T = 16, C = 64, H = 4;
  auto run = [&](DType dtype) {
    modules::GPTConfig c;
    c.d_model = C;
    c.n_head = H;
    c.max_seq_len = T;
    c.dtype = dtype;
    modules::TransformerLayer layer(c, 3);
    layer.to(device());
    Tensor x = ops::cast(random({B, T, C}, 4), dtype);
    autograd::set_requires_grad(x);
    const int64_t base = saved_bytes();
    Tensor y = layer.forward(x, modules::FirstMicrobatch::kYes);
    return LayerRun{saved_bytes() - base, y};
  };
  const LayerRun f32 = run(DType::kF32), bf16 = run(DType::kBF16);
  EXPECT_EQ(f32.y.dtype(), DType::kF32);
  EXPECT_EQ(bf16.y.dtype(), DType::kBF16);
  // What stays f32 in both: each norm's mean and rsigma (the attention's and the MLP's
  // LayerNorm), and the attention's lse (B, H, T). Everything else saved is an activation or a
  // weight in the model's dtype, so it halves.
  const int64_t f32_stats = 2 * 2 * B * T * 4 + B * H * T * 4;
  EXPECT_GT(f32.saved, 10 * f32_stats);
  EXPECT_EQ(bf16.saved, (f32.saved - f32_stats) / 2 + f32_stats)
      << "f32 layer saved " << f32.saved << " bytes";
}

OCTET_DEVICE_TESTS(ActivationDtypes);

}  // namespace
}  // namespace octet
