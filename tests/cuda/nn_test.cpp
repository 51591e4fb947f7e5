// The nn operations (kernels/nn.h) on CUDA against the CPU backend: activations and their gated
// forms, softmax, LayerNorm / RMSNorm and the norm fused with its FP8 cast, embedding, dropout,
// cross-entropy and causal attention (cuDNN where it runs, and octet's own fallback kernels),
// forward and backward. Gathers, masks and FP8 bytes compare bit for bit, the rest within the
// parity tolerance of the dtype the GPU computed in.
#include "kernels/nn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/cuda.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

#if OCTET_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"  // the attention fallback, and which path ran
#endif

namespace octet {
namespace {

using ops::Activation;
using ops::NormKind;
using ops::ZeroCenteredGamma;
using test::on_cpu;
using test::on_gpu;
using test::parity_tolerance;

const test::Tolerance kF32 = parity_tolerance(DType::kF32);

constexpr Activation kActivations[] = {Activation::kGelu, Activation::kRelu,
                                       Activation::kSquaredRelu, Activation::kSilu};

// ---- activations ----

TEST(CudaActivation, ForwardAndBackwardMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{7, 13, 37}, Shape{257, 1031}}) {
    const Tensor x = test::random_tensor(shape, DType::kF32, 101, 3.f);
    const Tensor dy = test::random_tensor(shape, DType::kF32, 102);
    for (Activation act : kActivations) {
      SCOPED_TRACE(std::string(ops::activation_name(act)) + " " + shape_str(shape));
      EXPECT_TRUE(test::close_to(ops::activation(act, on_gpu(x)), ops::activation(act, x), kF32));
      EXPECT_TRUE(test::close_to(ops::activation_backward(act, on_gpu(dy), on_gpu(x)),
                                 ops::activation_backward(act, dy, x), kF32));
    }
  }
  // Extreme inputs: a saturated tanh or exp must stay finite on the GPU too.
  const Tensor x = Tensor::from_floats(
      {-1e4f, -100.f, -30.f, -9.f, -0.75f, -1e-8f, 0.f, 1e-8f, 0.5f, 9.f, 30.f, 100.f}, {12});
  const Tensor ones = Tensor::full({12}, 1.f, DType::kF32);
  for (Activation act : kActivations) {
    EXPECT_TRUE(test::close_to(ops::activation(act, on_gpu(x)), ops::activation(act, x), kF32))
        << ops::activation_name(act);
    EXPECT_TRUE(test::close_to(ops::activation_backward(act, on_gpu(ones), on_gpu(x)),
                               ops::activation_backward(act, ones, x), kF32))
        << ops::activation_name(act);
  }
  // A bf16 input is read as its f32 values (its bf16 output:
  // tests/devices/activation_dtype_test.cpp).
  const Tensor xb = test::random_tensor({5, 33}, DType::kBF16, 103);
  EXPECT_TRUE(test::close_to(ops::activation(Activation::kGelu, on_gpu(xb)),
                             ops::activation(Activation::kGelu, xb), kF32));
}

TEST(CudaActivation, GatedForwardAndBackwardMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  // (3, 5, 38): halves of 19; (64, 3072): halves of a TE-sized FFN row.
  for (const Shape& shape : {Shape{3, 5, 38}, Shape{64, 3072}}) {
    const Tensor x = test::random_tensor(shape, DType::kF32, 104, 2.f);
    Shape half = shape;
    half.back() /= 2;
    const Tensor dy = test::random_tensor(half, DType::kF32, 105);
    for (Activation act : kActivations) {
      SCOPED_TRACE(std::string(ops::activation_name(act)) + " " + shape_str(shape));
      EXPECT_TRUE(test::close_to(ops::gated_activation(act, on_gpu(x)),
                                 ops::gated_activation(act, x), kF32));
      EXPECT_TRUE(test::close_to(ops::gated_activation_backward(act, on_gpu(dy), on_gpu(x)),
                                 ops::gated_activation_backward(act, dy, x), kF32));
    }
  }
}

// ---- softmax ----

TEST(CudaSoftmax, ForwardBackwardMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  // Short rows, rows longer than a block of threads, and a vocabulary-sized row.
  for (const Shape& shape : {Shape{3, 11, 77}, Shape{64, 1500}, Shape{4, 50257}}) {
    const Tensor x = test::random_tensor(shape, DType::kF32, 411, 4.f);
    const Tensor dy = test::random_tensor(shape, DType::kF32, 412);
    const Tensor y = ops::softmax(x), y_g = ops::softmax(on_gpu(x));
    EXPECT_TRUE(test::close_to(y_g, y, kF32)) << shape_str(shape);
    // Backward from each backend's own y (as autograd saves it).
    EXPECT_TRUE(
        test::close_to(ops::softmax_backward(on_gpu(dy), y_g), ops::softmax_backward(dy, y), kF32))
        << shape_str(shape);
  }
  // Huge logits: shifted by the row max, nothing overflows.
  const Tensor big = Tensor::from_floats({1000.f, 1001.f, 999.f, -1e30f, 3e38f, 3e38f}, {2, 3});
  EXPECT_TRUE(test::close_to(ops::softmax(on_gpu(big)), ops::softmax(big), kF32));
}

// ---- norms ----

struct NormCase {
  int64_t rows, C;
  float mean, std;
  bool with_beta;
  ZeroCenteredGamma zc;
};

// y, mean, rsigma and the backward's dx, dgamma, dbeta of LayerNorm (or RMSNorm) on both sides.
void check_norm(NormKind kind, const NormCase& c, test::Tolerance tol) {
  const bool layer = kind == NormKind::kLayerNorm;
  SCOPED_TRACE(std::string(layer ? "layernorm" : "rmsnorm") + " (" + std::to_string(c.rows) + ", " +
               std::to_string(c.C) + ") mean " + std::to_string(c.mean) +
               (c.with_beta ? " beta" : "") + (c.zc == ZeroCenteredGamma::kYes ? " zc" : ""));
  const Tensor x = ops::add(test::random_tensor({c.rows, c.C}, DType::kF32, 201, c.std),
                            Tensor::full({c.C}, c.mean, DType::kF32));
  const Tensor gamma = test::random_tensor({c.C}, DType::kF32, 202, 0.5f);
  const Tensor beta = test::random_tensor({c.C}, DType::kF32, 203);
  const Tensor dy = test::random_tensor({c.rows, c.C}, DType::kF32, 204);
  const Tensor xg = on_gpu(x), gg = on_gpu(gamma), bg = on_gpu(beta), dyg = on_gpu(dy);
  const bool beta_used = layer && c.with_beta;
  const ops::NormForward f =
      layer ? ops::layernorm(x, gamma, beta_used ? &beta : nullptr, 1e-5f, c.zc)
            : ops::rmsnorm(x, gamma, 1e-5f, c.zc);
  const ops::NormForward fg = layer ? ops::layernorm(xg, gg, beta_used ? &bg : nullptr, 1e-5f, c.zc)
                                    : ops::rmsnorm(xg, gg, 1e-5f, c.zc);
  EXPECT_TRUE(test::close_to(fg.y, f.y, tol)) << "y";
  EXPECT_TRUE(test::close_to(fg.rsigma, f.rsigma, tol)) << "rsigma";
  if (layer) {
    EXPECT_TRUE(test::close_to(fg.mean, f.mean, tol)) << "mean";
  } else {
    EXPECT_FALSE(fg.mean.defined());
  }
  // Each backend's backward from its own statistics.
  const ops::NormBackward b = layer ? ops::layernorm_backward(dy, x, f.mean, f.rsigma, gamma, c.zc)
                                    : ops::rmsnorm_backward(dy, x, f.rsigma, gamma, c.zc);
  const ops::NormBackward bg_ = layer
                                    ? ops::layernorm_backward(dyg, xg, fg.mean, fg.rsigma, gg, c.zc)
                                    : ops::rmsnorm_backward(dyg, xg, fg.rsigma, gg, c.zc);
  // dx subtracts row means of dy * gamma and of dy * gamma * xhat (cancellation), and dgamma,
  // dbeta sum over every row: an order of magnitude above one f32 reduction.
  const test::Tolerance btol = test::scaled(tol, 10);
  EXPECT_TRUE(test::close_to(bg_.dx, b.dx, btol)) << "dx";
  EXPECT_TRUE(test::close_to(bg_.dgamma, b.dgamma, btol)) << "dgamma";
  if (layer) {
    EXPECT_TRUE(test::close_to(bg_.dbeta, b.dbeta, btol)) << "dbeta";
  } else {
    EXPECT_FALSE(bg_.dbeta.defined());
  }
}

TEST(CudaNorm, LayerNormAndRmsNormForwardBackwardMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  const NormCase cases[] = {
      {37, 129, 0.f, 1.f, true, ZeroCenteredGamma::kNo},
      {37, 129, 0.f, 1.f, false, ZeroCenteredGamma::kNo},
      {5, 7, 0.3f, 2.f, true, ZeroCenteredGamma::kYes},
      {100, 768, 0.f, 1.f, true, ZeroCenteredGamma::kNo},
      {301, 96, 0.f, 1.f, false, ZeroCenteredGamma::kYes},
      {8, 8192, 0.f, 1.f, true, ZeroCenteredGamma::kNo},  // a row longer than a block's threads
  };
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRMSNorm}) {
    for (const NormCase& c : cases) check_norm(kind, c, kF32);
  }
}

TEST(CudaNorm, LayerNormWithALargeMean) {
  OCTET_REQUIRE_CUDA();
  // x = 1000 + N(0, 1): each backend rounds its f32 mean near 1000 (steps of 2^-14 = 6e-5), and
  // every xhat moves with that last bit: ten times the f32 tolerance.
  check_norm(NormKind::kLayerNorm, {16, 768, 1000.f, 1.f, true, ZeroCenteredGamma::kNo},
             test::scaled(kF32, 10));
}

TEST(CudaNorm, NormFp8EqualsTheCastOfTheGpusOwnNormAndIsCloseToTheCpu) {
  OCTET_REQUIRE_CUDA();
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRMSNorm}) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      for (ZeroCenteredGamma zc : {ZeroCenteredGamma::kNo, ZeroCenteredGamma::kYes}) {
        const bool layer = kind == NormKind::kLayerNorm;
        SCOPED_TRACE(std::string(layer ? "layernorm " : "rmsnorm ") + std::string(dtype_name(fp8)) +
                     (zc == ZeroCenteredGamma::kYes ? " zc" : ""));
        const int64_t rows = 130, C = 768;  // 130: ragged column-wise tiles
        const Tensor x = on_gpu(test::random_tensor({rows, C}, DType::kF32, 3, 2.f));
        const Tensor gamma = on_gpu(test::random_tensor({C}, DType::kF32, 4));
        const Tensor beta = on_gpu(test::random_tensor({C}, DType::kF32, 5));
        const Tensor* b = layer ? &beta : nullptr;
        const Tensor scale = test::scalar(fp8 == DType::kE4M3 ? 3.f : 200.f, test::gpu());

        // The GPU's unfused norm, cast by the GPU: the fused kernel must give the same bytes.
        const ops::NormForward ref =
            layer ? ops::layernorm(x, gamma, b, 1e-5f, zc) : ops::rmsnorm(x, gamma, 1e-5f, zc);
        Tensor want_row = Tensor::empty({rows, C}, fp8, test::gpu());
        Tensor want_col = Tensor::empty({C, rows}, fp8, test::gpu());
        Tensor want_amax = test::scalar(0.5f, test::gpu());
        ops::quantize_fp8(ref.y, scale, &want_row, &want_col, &want_amax);

        Tensor row = Tensor::empty({rows, C}, fp8, test::gpu());
        Tensor col = Tensor::empty({C, rows}, fp8, test::gpu());
        Tensor amax = test::scalar(0.5f, test::gpu());
        const ops::NormForward got =
            ops::norm_fp8(kind, x, gamma, b, 1e-5f, zc, scale, &row, &col, &amax);
        EXPECT_FALSE(got.y.defined());
        EXPECT_TRUE(test::same_bits(row, want_row)) << "row-wise";
        EXPECT_TRUE(test::same_bits(col, want_col)) << "column-wise";
        EXPECT_TRUE(test::same_bits(amax, want_amax)) << "amax";
        EXPECT_TRUE(test::same_bits(got.rsigma, ref.rsigma)) << "rsigma";
        if (layer) {
          EXPECT_TRUE(test::same_bits(got.mean, ref.mean)) << "mean";
        }

        // Against the CPU's fused norm: the f32 norm outputs differ in the last bits, which can
        // move a value across an FP8 rounding boundary, so compare the dequantized values within
        // one FP8 step (2^-3 relative for e4m3, 2^-2 for e5m2) and the smallest subnormal step.
        Tensor row_c = Tensor::empty({rows, C}, fp8), col_c = Tensor::empty({C, rows}, fp8);
        Tensor amax_c = test::scalar(0.5f);
        const Tensor beta_c = on_cpu(beta);
        ops::norm_fp8(kind, on_cpu(x), on_cpu(gamma), layer ? &beta_c : nullptr, 1e-5f, zc,
                      on_cpu(scale), &row_c, &col_c, &amax_c);
        const Tensor scale_inv = test::scalar(1.f / on_cpu(scale).item());
        const double step = fp8 == DType::kE4M3 ? 0.125 : 0.25;
        const double smallest = fp8 == DType::kE4M3 ? 0x1p-9 : 0x1p-16;
        const test::Tolerance one_step{smallest * scale_inv.item(), step};
        EXPECT_TRUE(test::close_to(ops::dequantize_fp8(on_cpu(row), scale_inv, DType::kF32),
                                   ops::dequantize_fp8(row_c, scale_inv, DType::kF32), one_step))
            << "row-wise vs CPU";
        EXPECT_TRUE(test::close_to(amax, amax_c, kF32)) << "amax vs CPU";
      }
    }
  }
}

// ---- embedding ----

// The backward is the CPU's bits: each id's positions summed in position order (sorted on the
// device, no atomics), so it does not depend on the order the GPU runs threads and blocks in
// (ctest's cuda.embedding_any_order runs this again with the emulator's blocks and threads
// shuffled). 2048 positions sort in one block's shared memory; 4500 (padded to 8192) need the
// global merge passes as well.
TEST(CudaEmbedding, ForwardGathersBitForBitAndBackwardSumsPerIdInPositionOrder) {
  OCTET_REQUIRE_CUDA();
  const int64_t V = 1000, C = 96;
  for (const Shape& id_shape : {Shape({8, 256}), Shape({3, 1500}), Shape({1, 1})}) {
    for (DType table_dtype : {DType::kF32, DType::kBF16}) {
      for (DType id_dtype : {DType::kI32, DType::kI64}) {
        SCOPED_TRACE(std::to_string(shape_numel(id_shape)) + " positions, " +
                     std::string(dtype_name(table_dtype)) + " table, " +
                     std::string(dtype_name(id_dtype)) + " ids");
        const Tensor table = test::random_tensor({V, C}, table_dtype, 431);
        // A quarter of the ids are id 0 (a row summed up to 1125 times), the rest spread, the
        // last row of the table used too.
        Tensor ids = Tensor::empty(id_shape, id_dtype);
        for (int64_t i = 0; i < ids.numel(); ++i) {
          const int64_t id = i % 4 == 0 ? 0 : (i * 379 + 7) % V;
          store_from_f32(id_dtype, ids.data(), static_cast<size_t>(i), static_cast<float>(id));
        }
        if (ids.numel() > 5) {
          store_from_f32(id_dtype, ids.data(), 5, static_cast<float>(V - 1));
        }
        const Tensor out = ops::embedding(on_gpu(table), on_gpu(ids));
        Shape out_shape = id_shape;
        out_shape.push_back(C);
        EXPECT_EQ(out.shape(), out_shape);
        EXPECT_TRUE(test::same_bits(out, ops::embedding(table, ids))) << "forward";

        const Tensor dy = test::random_tensor(out_shape, DType::kF32, 432);
        const Tensor dtable = ops::embedding_backward(on_gpu(dy), on_gpu(ids), V);
        EXPECT_EQ(dtable.shape(), Shape({V, C}));
        EXPECT_TRUE(test::same_bits(dtable, ops::embedding_backward(dy, ids, V))) << "backward";
      }
    }
  }
}

// Ids are checked on the device, so a step copies none back: a bad id is the CPU's clear error
// (the first bad launch in stream order, its lowest position), raised at the host's next read
// from the device, and the kernels never read outside the table.
TEST(CudaEmbedding, OutOfRangeIdsAreRaisedAtTheNextRead) {
  OCTET_REQUIRE_CUDA();
  Tensor bad = Tensor::empty({5}, DType::kI64);
  for (int64_t i = 0; i < 5; ++i) bad.data_as<int64_t>()[i] = i;
  bad.data_as<int64_t>()[2] = 12;
  bad.data_as<int64_t>()[4] = -3;
  const Tensor table = on_gpu(test::random_tensor({10, 4}, DType::kF32, 433));
  const Tensor ids = on_gpu(bad);
  const Tensor dy = test::random_tensor({5, 4}, DType::kF32, 434);
  const cuda::HostSyncCounts before = cuda::host_sync_counts();
  const Tensor out = ops::embedding(table, ids);                              // no error yet,
  const Tensor dtable = ops::embedding_backward(on_gpu(dy), ids, 7);          // nor here,
  EXPECT_EQ(cuda::host_sync_counts().device_to_host, before.device_to_host);  // and no copy back
  const std::string what = test::error_of([&] { (void)out.to(Device::cpu()); });
  EXPECT_NE(what.find("embedding: id 12 at position 2 is out of range for a table of 10 rows"),
            std::string::npos)
      << what;
  // Raised once: the next read is clean, and so is the bad rows' output (zeros, no wild read).
  const std::vector<float> got = on_cpu(out).to_floats();
  for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(got[static_cast<size_t>(2 * 4 + c)], 0.f);
  // The backward's table of 7 rows: ids 12 and -3 add nothing; a second bad launch raises anew.
  (void)ops::embedding_backward(on_gpu(Tensor::zeros({5, 4}, DType::kF32)), ids, 7);
  const std::string again = test::error_of([&] { cuda::check_device_errors(test::gpu()); });
  EXPECT_NE(again.find("embedding_backward: id 12 at position 2"), std::string::npos) << again;
  EXPECT_NO_THROW(cuda::check_device_errors(test::gpu()));
  // The good ids' rows got their gradient (positions 0, 1, 3 into rows 0, 1, 3), nothing else.
  const std::vector<float> d = on_cpu(dtable).to_floats(), g = dy.to_floats();
  for (int64_t r = 0; r < 7; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const float want = (r == 0 || r == 1 || r == 3) ? g[static_cast<size_t>(r * 4 + c)] : 0.f;
      EXPECT_EQ(d[static_cast<size_t>(r * 4 + c)], want) << r << ", " << c;
    }
  }
}

TEST(CudaCrossEntropy, OutOfRangeTargetsAreRaisedAtTheNextRead) {
  OCTET_REQUIRE_CUDA();
  Tensor targets = Tensor::empty({3}, DType::kI32);
  targets.data_as<int32_t>()[0] = 1;
  targets.data_as<int32_t>()[1] = 10;
  targets.data_as<int32_t>()[2] = -100;
  const ops::CrossEntropyForward f =
      ops::cross_entropy(on_gpu(Tensor::zeros({3, 10}, DType::kF32)), on_gpu(targets), -100);
  const std::string what = test::error_of([&] { (void)f.loss.item(); });
  EXPECT_NE(what.find("cross_entropy: target 10 at row 1 is out of range for 10 classes (and is "
                      "not ignore_index -100)"),
            std::string::npos)
      << what;
  EXPECT_TRUE(std::isnan(f.loss.item())) << "the bad row's loss is NaN";
}

// ---- dropout ----

TEST(CudaDropout, MaskIsTheCpusPhiloxStreamBitForBit) {
  OCTET_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{37, 101}, Shape{1 << 20}}) {
    for (float p : {0.1f, 0.3f, 0.5f}) {
      SCOPED_TRACE(shape_str(shape) + " p " + std::to_string(p));
      const Tensor x = test::random_tensor(shape, DType::kF32, 441);
      // An offset that is not a multiple of the 4-word Philox block.
      Generator cpu_gen(1234), gpu_gen(1234);
      cpu_gen.set_state({1234, 6});
      gpu_gen.set_state({1234, 6});
      const ops::DropoutForward want = ops::dropout(x, p, cpu_gen);
      const ops::DropoutForward got = ops::dropout(on_gpu(x), p, gpu_gen);
      EXPECT_EQ(gpu_gen.state().offset, cpu_gen.state().offset);
      EXPECT_TRUE(test::same_bits(got.mask, want.mask)) << "mask";
      EXPECT_TRUE(test::close_to(got.y, want.y, kF32)) << "y";
      // The generator moved on: a second call draws new numbers, the same on both sides.
      const ops::DropoutForward want2 = ops::dropout(x, p, cpu_gen);
      const ops::DropoutForward got2 = ops::dropout(on_gpu(x), p, gpu_gen);
      EXPECT_TRUE(test::same_bits(got2.mask, want2.mask)) << "second mask";

      const Tensor dy = test::random_tensor(shape, DType::kF32, 442);
      EXPECT_TRUE(test::close_to(ops::dropout_backward(on_gpu(dy), got.mask, p),
                                 ops::dropout_backward(dy, want.mask, p), kF32))
          << "backward";
    }
  }
  // p = 0 keeps everything unchanged, p = 1 drops everything (zeros of either sign match).
  const Tensor x = test::random_tensor({1000}, DType::kF32, 443);
  Generator gen(5);
  const ops::DropoutForward keep_all = ops::dropout(on_gpu(x), 0.f, gen);
  EXPECT_TRUE(test::same_bits(keep_all.y, x));
  EXPECT_TRUE(test::same_bits(keep_all.mask, Tensor::full({1000}, 1.f, DType::kU8)));
  const ops::DropoutForward drop_all = ops::dropout(on_gpu(x), 1.f, gen);
  EXPECT_TRUE(test::close_to(drop_all.y, Tensor::zeros({1000}, DType::kF32), {0.0, 0.0}));
  EXPECT_TRUE(test::same_bits(drop_all.mask, Tensor::zeros({1000}, DType::kU8)));
}

// ---- cross-entropy ----

TEST(CudaCrossEntropy, ForwardBackwardWithIgnoredRowsMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  const int64_t ignore = -100;
  for (const auto& [n, v] : {std::pair<int64_t, int64_t>{23, 1001}, {64, 50257}, {512, 16}}) {
    for (DType target_dtype : {DType::kI32, DType::kI64}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " V=" + std::to_string(v) + " " +
                   std::string(dtype_name(target_dtype)));
      const Tensor logits = test::random_tensor({n, v}, DType::kF32, 421, 3.f);
      Tensor targets = Tensor::empty({n}, target_dtype);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = i % 4 == 1 ? ignore : (i * 379) % v;
        store_from_f32(target_dtype, targets.data(), static_cast<size_t>(i), static_cast<float>(t));
      }
      const ops::CrossEntropyForward f = ops::cross_entropy(logits, targets, ignore);
      const ops::CrossEntropyForward fg =
          ops::cross_entropy(on_gpu(logits), on_gpu(targets), ignore);
      EXPECT_TRUE(test::same_bits(fg.counted, f.counted)) << "count";
      EXPECT_TRUE(fg.loss.device().is_cuda());
      EXPECT_TRUE(test::close_to(fg.loss, f.loss, kF32)) << "loss";
      EXPECT_TRUE(test::close_to(fg.lse, f.lse, kF32)) << "lse";
      const Tensor d = ops::cross_entropy_backward(Tensor::full({1}, 0.7f, DType::kF32), logits,
                                                   targets, f.lse, ignore, f.counted);
      // dloss and the count on the device, as autograd passes them.
      const Tensor dg =
          ops::cross_entropy_backward(on_gpu(Tensor::full({1}, 0.7f, DType::kF32)), on_gpu(logits),
                                      on_gpu(targets), fg.lse, ignore, fg.counted);
      // Gradients are tiny (1/count of a probability): the absolute floor scales with them.
      EXPECT_TRUE(test::close_to(dg, d, {1e-9, kF32.rel})) << "dlogits";
      // Ignored rows are exactly zero.
      const std::vector<float> dv = on_cpu(dg).to_floats();
      for (int64_t j = 0; j < v; ++j) ASSERT_EQ(dv[static_cast<size_t>(v + j)], 0.f) << j;
    }
  }
  // Every row ignored: loss 0, gradient 0.
  const Tensor logits = test::random_tensor({4, 9}, DType::kF32, 422);
  const Tensor targets = on_gpu(Tensor::full({4}, -1.f, DType::kI32));
  const ops::CrossEntropyForward f = ops::cross_entropy(on_gpu(logits), targets, -1);
  EXPECT_EQ(on_cpu(f.counted).data_as<int64_t>()[0], 0);
  EXPECT_EQ(f.loss.item(), 0.f);
  EXPECT_TRUE(
      test::same_bits(ops::cross_entropy_backward(1.f, on_gpu(logits), targets, f.lse, -1, 0),
                      Tensor::zeros({4, 9}, DType::kF32)));
}

// ---- causal attention ----

struct Dims {
  int64_t B, T, H, D;
  int64_t C() const { return H * D; }
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
           " D=" + std::to_string(D);
  }
};

// Head dims 64 and 128 (cuDNN's), T not a multiple of 64, one token, and head dims that only the
// fallback takes (20: not a multiple of 8; 192: above cuDNN's 128).
const Dims kAttentionShapes[] = {{2, 70, 3, 64},  {1, 131, 2, 128}, {2, 64, 4, 64}, {1, 1, 2, 64},
                                 {2, 256, 4, 64}, {1, 200, 2, 128}, {3, 5, 1, 8},   {2, 70, 3, 24},
                                 {2, 37, 2, 20},  {1, 66, 1, 192}};

TEST(CudaAttention, ForwardBackwardMatchTheCpuOnWhicheverPathRuns) {
  OCTET_REQUIRE_CUDA();
#if OCTET_WITH_CUDA
  for (const Dims& s : kAttentionShapes) {
    SCOPED_TRACE(s.str());
    const Tensor qkv = test::random_tensor({s.B, s.T, 3 * s.C()}, DType::kF32, 301);
    const Tensor dout = test::random_tensor({s.B, s.T, s.C()}, DType::kF32, 302);
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    const ops::AttentionForward f = ops::causal_attention(qkv, s.H, scale);
    const ops::AttentionForward fg = ops::causal_attention(on_gpu(qkv), s.H, scale);
    const bool cudnn = cuda::last_attention_used_cudnn();
    // cuDNN computes in bf16: bf16's tolerance. The fallback computes in f32; its backward sums
    // T terms each made of two length-D dot products, so it gets five times the f32 tolerance.
    const test::Tolerance fwd = cudnn ? parity_tolerance(DType::kBF16) : kF32;
    const test::Tolerance bwd = cudnn ? parity_tolerance(DType::kBF16) : test::scaled(kF32, 5);
    SCOPED_TRACE(cudnn ? "cuDNN" : "fallback");
    EXPECT_TRUE(test::close_to(fg.out, f.out, fwd)) << "out";
    EXPECT_TRUE(test::close_to(fg.lse, f.lse, fwd)) << "lse";
    const Tensor dqkv = ops::causal_attention_backward(dout, qkv, f.out, f.lse, s.H, scale);
    const Tensor dqkv_g =
        ops::causal_attention_backward(on_gpu(dout), on_gpu(qkv), fg.out, fg.lse, s.H, scale);
    EXPECT_TRUE(test::close_to(dqkv_g, dqkv, bwd)) << "dqkv";
  }
#endif
}

TEST(CudaAttention, FallbackKernelsMatchTheCpuInF32) {
  OCTET_REQUIRE_CUDA();
#if OCTET_WITH_CUDA
  for (const Dims& s : kAttentionShapes) {
    SCOPED_TRACE(s.str());
    const Tensor qkv = test::random_tensor({s.B, s.T, 3 * s.C()}, DType::kF32, 311);
    const Tensor dout = test::random_tensor({s.B, s.T, s.C()}, DType::kF32, 312);
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    const ops::AttentionForward f = ops::causal_attention(qkv, s.H, scale);
    const Tensor dqkv = ops::causal_attention_backward(dout, qkv, f.out, f.lse, s.H, scale);

    const Tensor qkv_g = on_gpu(qkv), dout_g = on_gpu(dout);
    Tensor out = Tensor::full({s.B, s.T, s.C()}, std::nanf(""), DType::kF32, test::gpu());
    Tensor lse = Tensor::full({s.B, s.H, s.T}, std::nanf(""), DType::kF32, test::gpu());
    cuda::causal_attention_fallback(qkv_g, s.H, scale, out, lse);
    EXPECT_TRUE(test::close_to(out, f.out, kF32)) << "out";
    EXPECT_TRUE(test::close_to(lse, f.lse, kF32)) << "lse";
    Tensor dqkv_g = Tensor::full(qkv.shape(), std::nanf(""), DType::kF32, test::gpu());
    cuda::causal_attention_backward_fallback(dout_g, qkv_g, out, lse, s.H, scale, dqkv_g);
    // See ForwardBackwardMatchTheCpuOnWhicheverPathRuns: five times the f32 tolerance.
    EXPECT_TRUE(test::close_to(dqkv_g, dqkv, test::scaled(kF32, 5))) << "dqkv";
  }
#endif
}

TEST(CudaAttention, GroupedQueryHeadsMatchTheCpuOnWhicheverPathRuns) {
  OCTET_REQUIRE_CUDA();
  // (B, T, H + 2G, D): cuDNN's grouped attention where it takes the shape (a GPU), else the key
  // and value heads repeated for the own kernels (the emulation build).
  struct Grouped {
    int64_t B, T, H, G, D;
  };
  for (const Grouped& s :
       {Grouped{2, 70, 4, 2, 64}, Grouped{1, 128, 8, 1, 128}, Grouped{2, 37, 6, 3, 20}}) {
    SCOPED_TRACE(testing::Message()
                 << "B " << s.B << " T " << s.T << " H " << s.H << " G " << s.G << " D " << s.D);
    const Tensor qkv = test::random_tensor({s.B, s.T, (s.H + 2 * s.G) * s.D}, DType::kF32, 331);
    const Tensor dout = test::random_tensor({s.B, s.T, s.H * s.D}, DType::kF32, 332);
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    const ops::AttentionForward f = ops::causal_attention(qkv, s.H, s.G, scale);
    const ops::AttentionForward fg = ops::causal_attention(on_gpu(qkv), s.H, s.G, scale);
    const bool cudnn = cuda::last_attention_used_cudnn();
    SCOPED_TRACE(cudnn ? "cuDNN" : "fallback");
    // As in ForwardBackwardMatchTheCpuOnWhicheverPathRuns; a key or value gradient also sums H/G
    // heads' gradients.
    const test::Tolerance fwd = cudnn ? parity_tolerance(DType::kBF16) : kF32;
    const test::Tolerance bwd =
        test::scaled(cudnn ? parity_tolerance(DType::kBF16) : test::scaled(kF32, 5),
                     static_cast<double>(s.H / s.G));
    EXPECT_TRUE(test::close_to(fg.out, f.out, fwd)) << "out";
    EXPECT_TRUE(test::close_to(fg.lse, f.lse, fwd)) << "lse";
    const Tensor dqkv = ops::causal_attention_backward(dout, qkv, f.out, f.lse, s.H, s.G, scale);
    const Tensor dqkv_g =
        ops::causal_attention_backward(on_gpu(dout), on_gpu(qkv), fg.out, fg.lse, s.H, s.G, scale);
    EXPECT_TRUE(test::close_to(dqkv_g, dqkv, bwd)) << "dqkv";
  }
}

TEST(CudaAttention, FutureTokensDoNotChangeEarlierOutputs) {
  OCTET_REQUIRE_CUDA();
  const Dims s{2, 150, 2, 64};
  const int64_t t = 97;  // in the second block of 64 queries
  Tensor qkv = test::random_tensor({s.B, s.T, 3 * s.C()}, DType::kF32, 321);
  const ops::AttentionForward before = ops::causal_attention(on_gpu(qkv), s.H, 0.125f);
  float* p = qkv.data_as<float>();
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t i = s.C(); i < 3 * s.C(); ++i) p[(b * s.T + t) * 3 * s.C() + i] += 5.f;
  }
  const ops::AttentionForward after = ops::causal_attention(on_gpu(qkv), s.H, 0.125f);
  const std::vector<float> o0 = on_cpu(before.out).to_floats(), o1 = on_cpu(after.out).to_floats();
  int64_t changed_early = 0, changed_at_t = 0;
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t i = 0; i <= t; ++i) {
      for (int64_t c = 0; c < s.C(); ++c) {
        const size_t at = static_cast<size_t>((b * s.T + i) * s.C() + c);
        (i < t ? changed_early : changed_at_t) += o0[at] != o1[at];
      }
    }
  }
  EXPECT_EQ(changed_early, 0) << "a token saw a later token's key or value";
  EXPECT_GT(changed_at_t, 0);
}

// ---- rotary positions and grouped-query heads ----

TEST(CudaPackHeads, ForwardAndBackwardEqualTheCpuBitForBit) {
  OCTET_REQUIRE_CUDA();
  // The same f32 arithmetic (math/rope.h) and head sums in the same order: identical bits, f32
  // and bf16, with and without rotation.
  const int64_t B = 2, T = 5, H = 6, G = 2, D = 8;
  const Tensor rope = ops::rope_table(T, D, 10000.0);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const bool rotate : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << (rotate ? " rotated" : " copied"));
      const Tensor qkv =
          ops::cast(test::random_tensor({B, T, (H + 2 * G) * D}, DType::kF32, 61), dtype);
      const Tensor dy = ops::cast(test::random_tensor({B, T, 3 * H * D}, DType::kF32, 62), dtype);
      const Tensor r = rotate ? rope : Tensor();
      const Tensor packed = ops::pack_heads(qkv, H, G, r);
      const Tensor packed_g = ops::pack_heads(on_gpu(qkv), H, G, on_gpu(r));
      EXPECT_TRUE(test::same_bits(on_cpu(packed_g), packed)) << "packed";
      const Tensor dqkv = ops::pack_heads_backward(dy, H, G, r);
      const Tensor dqkv_g = ops::pack_heads_backward(on_gpu(dy), H, G, on_gpu(r));
      EXPECT_TRUE(test::same_bits(on_cpu(dqkv_g), dqkv)) << "dqkv";
      // Rotation without repetition (rope_heads) and its gradient.
      const Tensor roped = ops::rope_heads(qkv, H, G, r);
      EXPECT_TRUE(test::same_bits(on_cpu(ops::rope_heads(on_gpu(qkv), H, G, on_gpu(r))), roped))
          << "roped";
      EXPECT_TRUE(test::same_bits(on_cpu(ops::rope_heads_backward(on_gpu(roped), H, G, on_gpu(r))),
                                  ops::rope_heads_backward(roped, H, G, r)))
          << "droped";
    }
  }
}

TEST(CudaCachedAttention, CacheWritesAndAttentionMatchTheCpu) {
  OCTET_REQUIRE_CUDA();
  const int64_t N = 2, T = 5, H = 4, D = 8, len = 12, pos = 4;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  for (const auto& [dtype, G] :
       {std::pair{DType::kF32, H}, std::pair{DType::kBF16, H}, std::pair{DType::kF32, int64_t{1}},
        std::pair{DType::kBF16, int64_t{2}}}) {
    SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " G " << G);
    const int64_t W = (H + 2 * G) * D;
    const Tensor packed = ops::cast(test::random_tensor({N, T, W}, DType::kF32, 81), dtype);
    const Tensor earlier = ops::cast(test::random_tensor({N, pos, W}, DType::kF32, 82), dtype);
    Tensor k = Tensor::zeros({N, len, G, D}, DType::kF32),
           v = Tensor::zeros({N, len, G, D}, DType::kF32);
    Tensor kg = on_gpu(k), vg = on_gpu(v);
    ops::kv_cache_write(earlier, k, v, 0);
    ops::kv_cache_write(on_gpu(earlier), kg, vg, 0);
    ops::kv_cache_write(packed, k, v, pos);
    ops::kv_cache_write(on_gpu(packed), kg, vg, pos);
    EXPECT_TRUE(test::same_bits(on_cpu(kg), k)) << "keys";
    EXPECT_TRUE(test::same_bits(on_cpu(vg), v)) << "values";
    const Tensor y = ops::cached_attention(packed, k, v, pos, scale);
    const Tensor yg = ops::cached_attention(on_gpu(packed), kg, vg, pos, scale);
    EXPECT_TRUE(test::close_to(yg, y, parity_tolerance(dtype))) << "out";
  }
}

}  // namespace
}  // namespace octet
