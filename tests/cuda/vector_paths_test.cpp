// The memory-bound CUDA kernels move kVec elements per access when every buffer
// is aligned and fall back to one element per step otherwise
// (kernels/cuda/common.cuh). Both paths must give the same bits: each operation
// runs on aligned tensors (the vector loop, with a tail when the size is not a
// multiple of kVec) and on the same values in views that start one element into
// their storage (the scalar loop), and the two results are compared bit for
// bit; where the CPU applies the same rule (one IEEE operation, an FP8 cast)
// the CPU result must match too.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/nn.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ops::Activation;
using ops::NormKind;
using ops::ZeroCenteredGamma;
using test::on_cpu;
using test::on_gpu;
using test::same_bits;

// An uninitialised tensor on the GPU whose data starts one element into its
// storage, so it is never Vec-aligned.
Tensor misaligned_empty(const Shape &shape, DType dtype) {
  const int64_t n = shape_numel(shape);
  return Tensor::empty({n + 1}, dtype, test::gpu()).slice(1, n + 1).reshape(shape);
}

// t's values (any dtype) on the GPU in a misaligned view.
Tensor misaligned(const Tensor &t) {
  const Tensor c = on_cpu(t);
  const int64_t n = c.numel();
  Tensor big = Tensor::zeros({n + 1}, c.dtype());
  std::memcpy(static_cast<uint8_t *>(big.data()) + c.element_size(), c.data(), c.nbytes());
  return on_gpu(big).slice(1, n + 1).reshape(c.shape());
}

// (5, 64): every group whole; (5, 67): a tail of 3 after the groups, rows not a
// multiple of kVec.
const std::vector<Shape> kShapes = {Shape{5, 64}, Shape{5, 67}};

std::string name_of(const Shape &s) { return shape_str(s); }

TEST(CudaVectorPaths, ElementwiseOpsEqualTheScalarLoopAndTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (const Shape &shape : kShapes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(name_of(shape) + " " + std::string(dtype_name(dtype)));
      const Tensor a = test::random_tensor(shape, dtype, 11, 3.f);
      const Tensor b = ops::cast(ops::add(test::random_tensor(shape, DType::kF32, 12),
                                          Tensor::full(shape, 4.f, DType::kF32)),
                                 dtype);
      const Tensor row = ops::cast(test::random_tensor({shape[1]}, DType::kF32, 13), dtype);
      const Tensor ag = on_gpu(a), bg = on_gpu(b), rg = on_gpu(row);
      const Tensor am = misaligned(a), bm = misaligned(b), rm = misaligned(row);
      EXPECT_TRUE(same_bits(ops::mul(ag, bg), ops::mul(a, b))) << "same shape, aligned";
      EXPECT_TRUE(same_bits(ops::mul(am, bm), ops::mul(a, b))) << "same shape, misaligned";
      EXPECT_TRUE(same_bits(ops::div(ag, rg), ops::div(a, row))) << "row, aligned";
      EXPECT_TRUE(same_bits(ops::div(am, rm), ops::div(a, row))) << "row, misaligned";
      EXPECT_TRUE(same_bits(ops::scale(ag, 0.37f), ops::scale(a, 0.37f))) << "scale";
      EXPECT_TRUE(same_bits(ops::scale(am, 0.37f), ops::scale(a, 0.37f))) << "scale, misaligned";
      const DType other = dtype == DType::kF32 ? DType::kBF16 : DType::kF32;
      EXPECT_TRUE(same_bits(ops::cast(ag, other), ops::cast(a, other))) << "cast";
      EXPECT_TRUE(same_bits(ops::cast(am, other), ops::cast(a, other))) << "cast, misaligned";

      // In place into aligned and misaligned destinations: the GPU's two paths
      // agree.
      Tensor d1 = on_gpu(a), d2 = misaligned(a);
      ops::add_(d1, bg, -0.75f);
      ops::add_(d2, bm, -0.75f);
      EXPECT_TRUE(same_bits(d2, d1)) << "add_";
      ops::fill_(d1, 1.5f);
      ops::fill_(d2, 1.5f);
      EXPECT_TRUE(same_bits(d2, on_cpu(d1))) << "fill_";
    }
  }
}

TEST(CudaVectorPaths, ActivationsEqualTheScalarLoop) {
  OCTET_REQUIRE_CUDA();
  for (const Shape &shape : kShapes) {
    const Tensor x = test::random_tensor(shape, DType::kF32, 21, 2.f);
    const Tensor dy = test::random_tensor(shape, DType::kF32, 22);
    for (Activation act : {Activation::kGelu, Activation::kSilu}) {
      SCOPED_TRACE(name_of(shape) + " " + std::string(ops::activation_name(act)));
      EXPECT_TRUE(same_bits(ops::activation(act, misaligned(x)), ops::activation(act, on_gpu(x))));
      EXPECT_TRUE(same_bits(ops::activation_backward(act, misaligned(dy), misaligned(x)),
                            ops::activation_backward(act, on_gpu(dy), on_gpu(x))));
    }
  }
  // Gated: halves of 32 (whole groups) and of 35 (no groups: h is not a
  // multiple of kVec).
  for (int64_t h : {int64_t{32}, int64_t{35}}) {
    const Tensor x = test::random_tensor({6, 2 * h}, DType::kF32, 23, 2.f);
    const Tensor dy = test::random_tensor({6, h}, DType::kF32, 24);
    for (Activation act : {Activation::kGelu, Activation::kRelu}) {
      SCOPED_TRACE("gated h " + std::to_string(h) + " " + std::string(ops::activation_name(act)));
      EXPECT_TRUE(same_bits(ops::gated_activation(act, misaligned(x)),
                            ops::gated_activation(act, on_gpu(x))));
      EXPECT_TRUE(same_bits(ops::gated_activation_backward(act, misaligned(dy), misaligned(x)),
                            ops::gated_activation_backward(act, on_gpu(dy), on_gpu(x))));
    }
  }
}

TEST(CudaVectorPaths, SoftmaxAndNormsEqualTheScalarLoop) {
  OCTET_REQUIRE_CUDA();
  for (const Shape &shape : kShapes) {
    SCOPED_TRACE(name_of(shape));
    const Tensor x = test::random_tensor(shape, DType::kF32, 31, 2.f);
    const Tensor dy = test::random_tensor(shape, DType::kF32, 32);
    const Tensor y = ops::softmax(on_gpu(x));
    EXPECT_TRUE(same_bits(ops::softmax(misaligned(x)), y)) << "softmax";
    EXPECT_TRUE(same_bits(ops::softmax_backward(misaligned(dy), misaligned(y)),
                          ops::softmax_backward(on_gpu(dy), y)))
        << "softmax_backward";

    const Tensor gamma = test::random_tensor({shape[1]}, DType::kF32, 33);
    const Tensor beta = test::random_tensor({shape[1]}, DType::kF32, 34);
    const Tensor bg = on_gpu(beta), bm = misaligned(beta);
    const ops::NormForward f =
        ops::layernorm(on_gpu(x), on_gpu(gamma), &bg, 1e-5f, ZeroCenteredGamma::kYes);
    const ops::NormForward fm =
        ops::layernorm(misaligned(x), misaligned(gamma), &bm, 1e-5f, ZeroCenteredGamma::kYes);
    EXPECT_TRUE(same_bits(fm.y, f.y)) << "layernorm";
    EXPECT_TRUE(same_bits(fm.rsigma, f.rsigma)) << "layernorm rsigma";

    // The fused norm + FP8 cast, row-wise and column-wise bytes and the amax.
    const Tensor scale = test::scalar(8.f, test::gpu());
    Tensor row = Tensor::empty(shape, DType::kE4M3, test::gpu());
    Tensor col = Tensor::empty({shape[1], shape[0]}, DType::kE4M3, test::gpu());
    Tensor amax = test::scalar(0.f, test::gpu());
    ops::norm_fp8(NormKind::kRMSNorm, on_gpu(x), on_gpu(gamma), nullptr, 1e-5f,
                  ZeroCenteredGamma::kNo, scale, &row, &col, &amax);
    Tensor row_m = misaligned_empty(shape, DType::kE4M3);
    Tensor col_m = Tensor::empty({shape[1], shape[0]}, DType::kE4M3, test::gpu());
    Tensor amax_m = test::scalar(0.f, test::gpu());
    ops::norm_fp8(NormKind::kRMSNorm, misaligned(x), misaligned(gamma), nullptr, 1e-5f,
                  ZeroCenteredGamma::kNo, scale, &row_m, &col_m, &amax_m);
    EXPECT_TRUE(same_bits(row_m, on_cpu(row))) << "norm_fp8 row-wise";
    EXPECT_TRUE(same_bits(col_m, on_cpu(col))) << "norm_fp8 column-wise";
    EXPECT_TRUE(same_bits(amax_m, on_cpu(amax))) << "norm_fp8 amax";
  }
}

TEST(CudaVectorPaths, CrossEntropyBackwardEqualsTheScalarLoop) {
  OCTET_REQUIRE_CUDA();
  for (const Shape &shape : kShapes) {
    SCOPED_TRACE(name_of(shape));
    const Tensor logits = test::random_tensor(shape, DType::kF32, 61, 3.f);
    // Row 2 ignored (-1); the other targets fall in the first group, a middle one and the last
    // column (the tail when V = 67).
    Tensor targets = Tensor::empty({5}, DType::kI32);
    const float ts[5] = {3.f, 37.f, -1.f, 0.f, static_cast<float>(shape[1] - 1)};
    for (size_t i = 0; i < 5; ++i) store_from_f32(DType::kI32, targets.data(), i, ts[i]);
    const Tensor tg = on_gpu(targets);
    const ops::CrossEntropyForward f = ops::cross_entropy(on_gpu(logits), tg, -1);
    const Tensor d = ops::cross_entropy_backward(0.7f, on_gpu(logits), tg, f.lse, -1, 4);
    EXPECT_TRUE(
        same_bits(ops::cross_entropy_backward(0.7f, misaligned(logits), tg, f.lse, -1, 4), d));
  }
}

TEST(CudaVectorPaths, Fp8CastAndDequantizeEqualTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (const Shape &shape : kShapes) {
    for (DType input : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(name_of(shape) + " " + std::string(dtype_name(input)));
      const Tensor x = test::random_tensor(shape, input, 41, 40.f);
      const Tensor scale = test::scalar(3.f);
      Tensor row = Tensor::empty(shape, DType::kE4M3);
      Tensor amax = test::scalar(0.f);
      ops::quantize_fp8(x, scale, &row, nullptr, &amax);
      for (bool aligned : {true, false}) {
        SCOPED_TRACE(aligned ? "aligned" : "misaligned");
        Tensor rg = aligned ? Tensor::empty(shape, DType::kE4M3, test::gpu())
                            : misaligned_empty(shape, DType::kE4M3);
        Tensor ag = test::scalar(0.f, test::gpu());
        ops::quantize_fp8(aligned ? on_gpu(x) : misaligned(x), on_gpu(scale), &rg, nullptr, &ag);
        EXPECT_TRUE(same_bits(rg, row)) << "bytes";
        EXPECT_TRUE(same_bits(ag, amax)) << "amax";
        const Tensor data = aligned ? on_gpu(row) : misaligned(row);
        for (DType out : {DType::kF32, DType::kBF16}) {
          EXPECT_TRUE(same_bits(ops::dequantize_fp8(data, on_gpu(test::scalar(0.25f)), out),
                                ops::dequantize_fp8(row, test::scalar(0.25f), out)))
              << "dequantize to " << dtype_name(out);
        }
      }
    }
  }
}

TEST(CudaVectorPaths, DropoutBackwardAndOptimizersEqualTheScalarLoop) {
  OCTET_REQUIRE_CUDA();
  for (const Shape &shape : kShapes) {
    SCOPED_TRACE(name_of(shape));
    const Tensor x = test::random_tensor(shape, DType::kF32, 51);
    // Forward at offsets that are multiples of the 4-word Philox block (the
    // vector path when aligned): the mask is the CPU's, y the scalar loop's.
    for (uint64_t offset : {uint64_t{0}, uint64_t{8}}) {
      SCOPED_TRACE("dropout offset " + std::to_string(offset));
      Generator cpu_gen(7), gpu_gen(7), gpu_gen_m(7);
      cpu_gen.set_state({7, offset});
      gpu_gen.set_state({7, offset});
      gpu_gen_m.set_state({7, offset});
      const ops::DropoutForward want = ops::dropout(x, 0.3f, cpu_gen);
      const ops::DropoutForward got = ops::dropout(on_gpu(x), 0.3f, gpu_gen);
      const ops::DropoutForward got_m = ops::dropout(misaligned(x), 0.3f, gpu_gen_m);
      EXPECT_TRUE(same_bits(got.mask, want.mask)) << "mask";
      EXPECT_TRUE(same_bits(got_m.mask, want.mask)) << "mask, misaligned";
      EXPECT_TRUE(same_bits(got_m.y, got.y)) << "y";
    }
    Generator gen(7);
    const ops::DropoutForward f = ops::dropout(on_gpu(x), 0.3f, gen);
    EXPECT_TRUE(same_bits(ops::dropout_backward(misaligned(x), misaligned(f.mask), 0.3f),
                          ops::dropout_backward(on_gpu(x), f.mask, 0.3f)))
        << "dropout_backward";

    const Tensor w0 = test::random_tensor(shape, DType::kF32, 52);
    const Tensor g = test::random_tensor(shape, DType::kF32, 53);
    const Tensor m0 = test::random_tensor(shape, DType::kF32, 54, 0.1f);
    const Tensor v0 = ops::mul(m0, m0);
    ops::AdamWHyper h;
    h.lr = 1e-2f;
    h.weight_decay = 0.1f;
    h.step = 3;
    Tensor w = on_gpu(w0), m = on_gpu(m0), v = on_gpu(v0);
    Tensor wm = misaligned(w0), mm = misaligned(m0), vm = misaligned(v0);
    ops::adamw_step(w, on_gpu(g), m, v, h);
    ops::adamw_step(wm, misaligned(g), mm, vm, h);
    EXPECT_TRUE(same_bits(wm, on_cpu(w))) << "adamw w";
    EXPECT_TRUE(same_bits(mm, on_cpu(m))) << "adamw m";
    EXPECT_TRUE(same_bits(vm, on_cpu(v))) << "adamw v";

    Tensor buf = on_gpu(m0), buf_m = misaligned(m0);
    ops::sgd_step(w, on_gpu(g), buf, 0.1f, 0.9f, 0.01f, 2);
    ops::sgd_step(wm, misaligned(g), buf_m, 0.1f, 0.9f, 0.01f, 2);
    EXPECT_TRUE(same_bits(wm, on_cpu(w))) << "sgd w";
    EXPECT_TRUE(same_bits(buf_m, on_cpu(buf))) << "sgd buffer";
  }
}

}  // namespace
}  // namespace octet
