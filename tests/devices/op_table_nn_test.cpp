// The op table's neural-network cases (tests/devices/op_table_test.cpp runs them): activations,
// softmax, norms, embedding, dropout, cross entropy and attention.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/nn.h"
#include "kernels/ops.h"
#include "runtime/fp8_meta.h"
#include "runtime/rng.h"
#include "tests/support/op_table_cases.h"

#if OCTET_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"  // which attention path ran
#endif

namespace octet::op_table {
namespace {

constexpr Activation kActivations[] = {Activation::kGelu, Activation::kRelu,
                                       Activation::kSquaredRelu, Activation::kSilu};

void activation_case(OpRun& r) {
  const DType d = r.dtype();
  for (const Shape& shape : {Shape{7, 13, 37}, Shape{257, 1031}}) {
    const Tensor x = r.random(shape, 101, 3.f, d), dy = r.random(shape, 102, 1.f, d);
    for (Activation act : kActivations) {
      auto s = r.scope(std::string(ops::activation_name(act)) + " " + shape_str(shape));
      r.close("forward", ops::activation(act, x));
      r.close("backward", ops::activation_backward(act, dy, x));
    }
  }
  // Extreme inputs: a saturated tanh or exp stays finite.
  const Tensor x = r.in(Tensor::from_floats(
      {-1e4f, -100.f, -30.f, -9.f, -0.75f, -1e-8f, 0.f, 1e-8f, 0.5f, 9.f, 30.f, 100.f}, {12}, d));
  const Tensor ones = r.in(Tensor::full({12}, 1.f, d));
  for (Activation act : kActivations) {
    auto s = r.scope(std::string(ops::activation_name(act)) + " extremes");
    r.close("forward", ops::activation(act, x));
    r.close("backward", ops::activation_backward(act, ones, x));
  }
  for (const Shape& shape : kVectorShapes) {
    const Tensor vx = random_tensor(shape, d, 21, 2.f), vdy = random_tensor(shape, d, 22);
    for (Activation act : {Activation::kGelu, Activation::kSilu}) {
      auto s =
          r.scope(std::string(ops::activation_name(act)) + " vector paths " + shape_str(shape));
      const Tensor y = ops::activation(act, r.in(vx));
      const Tensor dx = ops::activation_backward(act, r.in(vdy), r.in(vx));
      r.close("forward", y);
      r.close("backward", dx);
      r.same("forward, misaligned", ops::activation(act, r.misaligned(vx)), y);
      r.same("backward, misaligned",
             ops::activation_backward(act, r.misaligned(vdy), r.misaligned(vx)), dx);
    }
  }
}

void gated_activation_case(OpRun& r) {
  const DType d = r.dtype();
  // (3, 5, 38): halves of 19; (64, 3072): halves of a TE-sized FFN row.
  for (const Shape& shape : {Shape{3, 5, 38}, Shape{64, 3072}}) {
    Shape half = shape;
    half.back() /= 2;
    const Tensor x = r.random(shape, 104, 2.f, d), dy = r.random(half, 105, 1.f, d);
    for (Activation act : kActivations) {
      auto s = r.scope(std::string(ops::activation_name(act)) + " " + shape_str(shape));
      r.close("forward", ops::gated_activation(act, x));
      r.close("backward", ops::gated_activation_backward(act, dy, x));
    }
  }
  // Halves of 32 (whole groups of 4) and of 35 (none: h is not a multiple of 4).
  for (int64_t h : {32, 35}) {
    const Tensor x = random_tensor({6, 2 * h}, d, 23, 2.f), dy = random_tensor({6, h}, d, 24);
    for (Activation act : {Activation::kGelu, Activation::kRelu}) {
      auto s =
          r.scope(std::string(ops::activation_name(act)) + " vector paths, halves of " + str(h));
      const Tensor y = ops::gated_activation(act, r.in(x));
      const Tensor dx = ops::gated_activation_backward(act, r.in(dy), r.in(x));
      r.close("forward", y);
      r.close("backward", dx);
      r.same("forward, misaligned", ops::gated_activation(act, r.misaligned(x)), y);
      r.same("backward, misaligned",
             ops::gated_activation_backward(act, r.misaligned(dy), r.misaligned(x)), dx);
    }
  }
}

void softmax_case(OpRun& r) {
  const DType d = r.dtype();
  // Short rows, rows longer than a block of threads, a vocabulary-sized row.
  for (const Shape& shape : {Shape{3, 11, 77}, Shape{64, 1500}, Shape{4, 50257}}) {
    auto s = r.scope(shape_str(shape));
    const Tensor y = ops::softmax(r.random(shape, 411, 4.f, d));
    r.close("forward", y);
    r.close("backward", ops::softmax_backward(r.random(shape, 412, 1.f, d), y));  // its own y
  }
  // Huge logits: shifted by the row max, nothing overflows (3e38 is beyond f16).
  if (d != kF16) {
    r.close("huge logits", ops::softmax(r.in(Tensor::from_floats(
                               {1000.f, 1001.f, 999.f, -1e30f, 3e38f, 3e38f}, {2, 3}, d))));
  }
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor x = random_tensor(shape, d, 31, 2.f), dy = random_tensor(shape, d, 32);
    const Tensor y = ops::softmax(r.in(x));
    const Tensor dx = ops::softmax_backward(r.in(dy), y);
    r.close("forward", y);
    r.close("backward", dx);
    r.same("forward, misaligned", ops::softmax(r.misaligned(x)), y);
    r.same("backward, misaligned", ops::softmax_backward(r.misaligned(dy), r.misaligned(y)), dx);
  }
}

struct NormCase {
  int64_t rows, C;
  float mean, std;
  bool with_beta;
  ZeroCenteredGamma zc;
};

void norm_case(OpRun& r) {
  const NormCase cases[] = {
      {37, 129, 0.f, 1.f, true, ZeroCenteredGamma::kNo},
      {37, 129, 0.f, 1.f, false, ZeroCenteredGamma::kNo},
      {5, 7, 0.3f, 2.f, true, ZeroCenteredGamma::kYes},
      {100, 768, 0.f, 1.f, true, ZeroCenteredGamma::kNo},
      {301, 96, 0.f, 1.f, false, ZeroCenteredGamma::kYes},
      {8, 8192, 0.f, 1.f, true, ZeroCenteredGamma::kNo},  // a row longer than a block's threads
      // 1000 + N(0, 1): each backend rounds its f32 mean near 1000 (steps of 2^-14), and every
      // xhat moves with that last bit: the cancelling row for the forward too.
      {16, 768, 1000.f, 1.f, true, ZeroCenteredGamma::kNo},
  };
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRMSNorm}) {
    const bool layer = kind == NormKind::kLayerNorm;
    for (const NormCase& c : cases) {
      if (!layer && c.mean != 0.f && c.mean != 0.3f) continue;  // the large mean: LayerNorm's case
      auto s =
          r.scope(std::string(layer ? "layernorm (" : "rmsnorm (") + str(c.rows) + ", " + str(c.C) +
                  ") mean " + std::to_string(c.mean) + (c.with_beta ? " beta" : "") +
                  (c.zc == ZeroCenteredGamma::kYes ? " zc" : ""));
      const Tensor x = r.in(ops::cast(ops::add(random_tensor({c.rows, c.C}, kF32, 201, c.std),
                                               Tensor::full({c.C}, c.mean, kF32)),
                                      r.dtype()));
      const Tensor gamma = r.random({c.C}, 202, 0.5f), beta = r.random({c.C}, 203);
      const Tensor dy = r.random({c.rows, c.C}, 204, 1.f, r.dtype());
      const Tensor* b = layer && c.with_beta ? &beta : nullptr;
      const ops::NormForward f =
          layer ? ops::layernorm(x, gamma, b, 1e-5f, c.zc) : ops::rmsnorm(x, gamma, 1e-5f, c.zc);
      const Within fwd{c.mean > 100 ? OpClass::kCancelling : OpClass::kPointwise};
      r.close("y", f.y, fwd);
      r.close("rsigma", f.rsigma, fwd);
      if (layer) r.close("mean", f.mean, fwd);
      r.expect("a mean where there is one", f.mean.defined() == layer);
      // From the run's own statistics.
      const ops::NormBackward g =
          layer ? ops::layernorm_backward(dy, x, f.mean, f.rsigma, gamma, c.zc)
                : ops::rmsnorm_backward(dy, x, f.rsigma, gamma, c.zc);
      r.close("dx", g.dx, {OpClass::kCancelling});
      r.close("dgamma", g.dgamma, {OpClass::kCancelling});
      if (layer) r.close("dbeta", g.dbeta, {OpClass::kCancelling});
      r.expect("a dbeta where there is one", g.dbeta.defined() == layer);
    }
  }
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor x = random_tensor(shape, r.dtype(), 31, 2.f);
    const Tensor gamma = random_tensor({shape[1]}, kF32, 33),
                 beta = random_tensor({shape[1]}, kF32, 34);
    const Tensor bd = r.in(beta), bm = r.misaligned(beta);
    const ops::NormForward f =
        ops::layernorm(r.in(x), r.in(gamma), &bd, 1e-5f, ZeroCenteredGamma::kYes);
    const ops::NormForward fm =
        ops::layernorm(r.misaligned(x), r.misaligned(gamma), &bm, 1e-5f, ZeroCenteredGamma::kYes);
    r.close("y", f.y);
    r.same("y, misaligned", fm.y, f.y);
    r.same("rsigma, misaligned", fm.rsigma, f.rsigma);
  }
}

// The norm fused with its FP8 cast: in every run the bytes, amax and statistics of its own
// unfused norm (of x's values in f32) cast by quantize_fp8; against the CPU, whose f32 norm
// differs in the last bits, a code may move to the neighbouring FP8 value.
void norm_quantize_fp8_case(OpRun& r) {
  const int64_t rows = 130, C = 768;  // 130: ragged column-wise tiles
  const Tensor x = r.random({rows, C}, 3, 2.f, r.dtype()), x32 = ops::cast(x, kF32);
  const Tensor gamma = r.random({C}, 4), beta = r.random({C}, 5);
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRMSNorm}) {
    const bool layer = kind == NormKind::kLayerNorm;
    const Tensor* b = layer ? &beta : nullptr;
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (ZeroCenteredGamma zc : {ZeroCenteredGamma::kNo, ZeroCenteredGamma::kYes}) {
        auto s = r.scope(std::string(layer ? "layernorm " : "rmsnorm ") + name(fp8) +
                         (zc == ZeroCenteredGamma::kYes ? " zc" : ""));
        const float scale_value = fp8 == kE4M3 ? 3.f : 200.f;
        const Tensor scale = r.scalar(scale_value);
        Tensor row = r.poisoned({rows, C}, fp8), col = r.poisoned({C, rows}, fp8);
        Tensor amax = r.scalar(0.5f);
        const ops::NormForward got =
            ops::norm_fp8(kind, x, gamma, b, 1e-5f, zc, scale, &row, &col, &amax);
        r.expect("no high-precision y", !got.y.defined());
        r.close("row-wise", row, {.scale = scale_value});
        r.close("column-wise", col, {.scale = scale_value});
        r.close("amax", amax);
        r.close("rsigma", got.rsigma);
        if (layer) r.close("mean", got.mean);

        const ops::NormForward ref =
            layer ? ops::layernorm(x32, gamma, b, 1e-5f, zc) : ops::rmsnorm(x32, gamma, 1e-5f, zc);
        Tensor want_row = r.empty({rows, C}, fp8), want_col = r.empty({C, rows}, fp8);
        Tensor want_amax = r.scalar(0.5f);
        ops::quantize_fp8(ref.y, scale, &want_row, &want_col, &want_amax);
        r.same("row-wise as the unfused cast", row, want_row);
        r.same("column-wise as the unfused cast", col, want_col);
        r.same("amax as the unfused cast", amax, want_amax);
        r.same("rsigma as the unfused norm", got.rsigma, ref.rsigma);
        if (layer) r.same("mean as the unfused norm", got.mean, ref.mean);
      }
    }
  }
  // The amax slot's start of every sign and NaN: the CPU's merge rule applied to max |y| of the
  // run's own unfused norm.
  const uint32_t starts[] = {0x00000000u, 0x80000000u, 0xBF800000u,
                             0x7FC00000u, 0xFFC00000u, 0x7F7FFFFFu};
  const Tensor g96 = r.random({96}, 25);
  for (bool zeros : {false, true}) {
    const Tensor xs =
        zeros ? r.in(Tensor::zeros({40, 96}, r.dtype())) : r.random({40, 96}, 24, 3.f, r.dtype());
    const float m =
        ops::amax(ops::rmsnorm(ops::cast(xs, kF32), g96, 1e-5f, ZeroCenteredGamma::kNo).y).item();
    for (uint32_t start : starts) {
      Tensor row = r.empty({40, 96}, kE4M3), amax = r.scalar(test::float_from_bits(start));
      ops::norm_fp8(NormKind::kRMSNorm, xs, g96, nullptr, 1e-5f, ZeroCenteredGamma::kNo,
                    r.scalar(1.f), &row, nullptr, &amax);
      const float st = test::float_from_bits(start);
      r.same(std::string(zeros ? "zeros" : "random") + ", amax from " + hex(start), amax,
             Tensor::from_floats({m > st ? m : st}, {1}));
    }
  }
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor xv = random_tensor(shape, r.dtype(), 31, 2.f),
                 gv = random_tensor({shape[1]}, kF32, 33);
    Tensor row = r.empty(shape, kE4M3), col = r.empty({shape[1], shape[0]}, kE4M3);
    Tensor amax = r.scalar(0.f);
    ops::norm_fp8(NormKind::kRMSNorm, r.in(xv), r.in(gv), nullptr, 1e-5f, ZeroCenteredGamma::kNo,
                  r.scalar(8.f), &row, &col, &amax);
    Tensor row_m = r.misaligned_empty(shape, kE4M3), col_m = r.empty({shape[1], shape[0]}, kE4M3);
    Tensor amax_m = r.scalar(0.f);
    ops::norm_fp8(NormKind::kRMSNorm, r.misaligned(xv), r.misaligned(gv), nullptr, 1e-5f,
                  ZeroCenteredGamma::kNo, r.scalar(8.f), &row_m, &col_m, &amax_m);
    r.close("row-wise", row, {.scale = 8});
    r.same("row-wise, misaligned", row_m, row);
    r.same("column-wise, misaligned", col_m, col);
    r.same("amax, misaligned", amax_m, amax);
  }
}

// The forward gathers rows; the backward sums each id's positions in position order (sorted on
// a GPU, no atomics), so it is the CPU's bits whatever order a GPU runs threads and blocks in
// (ctest's cuda.embedding_any_order runs this case with the emulator's order shuffled). 2048
// positions sort in one block's shared memory; 4500 (padded to 8192) need the global merge passes.
void embedding_case(OpRun& r) {
  const int64_t V = 1000, C = 96;
  const Tensor table = r.in(random_tensor({V, C}, r.dtype(), 431));
  for (const Shape& id_shape : {Shape{8, 256}, Shape{3, 1500}, Shape{1, 1}}) {
    for (DType id_dtype : {DType::kI32, DType::kI64}) {
      auto s = r.scope(shape_str(id_shape) + " " + name(id_dtype) + " ids");
      // A quarter of the ids are id 0 (a row summed up to 1125 times), the rest spread, the last
      // row of the table used too.
      std::vector<int64_t> v(static_cast<size_t>(shape_numel(id_shape)));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = i % 4 == 0 ? 0 : (static_cast<int64_t>(i) * 379 + 7) % V;
      if (v.size() > 5) v[5] = V - 1;
      const Tensor ids = r.in(integers(v, id_shape, id_dtype));
      Shape out_shape = id_shape;
      out_shape.push_back(C);
      r.bits("forward", ops::embedding(table, ids));
      r.bits("backward", ops::embedding_backward(r.random(out_shape, 432), ids, V));
    }
  }
}

void dropout_case(OpRun& r) {
  for (const Shape& shape : {Shape{37, 101}, Shape{1 << 20}}) {
    const Tensor x = r.random(shape, 441, 1.f, r.dtype()),
                 dy = r.random(shape, 442, 1.f, r.dtype());
    for (float p : {0.1f, 0.3f, 0.5f}) {
      auto s = r.scope(shape_str(shape) + " p " + std::to_string(p));
      Generator gen(1234);
      gen.set_state({1234, 6});  // not a multiple of the 4-word Philox block
      const ops::DropoutForward f = ops::dropout(x, p, gen);
      r.bits("mask", f.mask);
      r.close("y", f.y);
      r.fact("generator offset", static_cast<int64_t>(gen.state().offset));
      r.bits("second mask", ops::dropout(x, p, gen).mask);  // the generator moved on
      r.close("backward", ops::dropout_backward(dy, f.mask, p));
    }
  }
  // p = 0 keeps everything unchanged, p = 1 drops everything.
  const Tensor x = r.random({1000}, 443, 1.f, r.dtype());
  Generator gen(5);
  const ops::DropoutForward keep = ops::dropout(x, 0.f, gen);
  r.same("p 0 keeps x", keep.y, x);
  r.same("p 0 keeps every element", keep.mask, Tensor::full({1000}, 1.f, DType::kU8));
  const ops::DropoutForward drop = ops::dropout(x, 1.f, gen);
  r.expect("p 1 leaves zeros", ops::amax(drop.y).item() == 0.f);
  r.same("p 1 drops every element", drop.mask, Tensor::zeros({1000}, DType::kU8));
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor xv = random_tensor(shape, r.dtype(), 51);
    // Offsets that are multiples of the Philox block (the vector path when aligned).
    for (uint64_t offset : {0, 8}) {
      Generator g1(7), g2(7);
      g1.set_state({7, offset});
      g2.set_state({7, offset});
      const ops::DropoutForward f = ops::dropout(r.in(xv), 0.3f, g1);
      const ops::DropoutForward fm = ops::dropout(r.misaligned(xv), 0.3f, g2);
      r.bits("mask at " + std::to_string(offset), f.mask);
      r.same("mask at " + std::to_string(offset) + ", misaligned", fm.mask, f.mask);
      r.same("y at " + std::to_string(offset) + ", misaligned", fm.y, f.y);
      if (offset == 0) {
        const Tensor dx = ops::dropout_backward(r.in(xv), f.mask, 0.3f);
        r.close("backward", dx);
        r.same("backward, misaligned",
               ops::dropout_backward(r.misaligned(xv), r.misaligned(f.mask), 0.3f), dx);
      }
    }
  }
}

void cross_entropy_case(OpRun& r) {
  const int64_t ignore = -100;
  for (const auto& [n, v] : {std::pair<int64_t, int64_t>{23, 1001}, {64, 50257}, {512, 16}}) {
    for (DType target_dtype : {DType::kI32, DType::kI64}) {
      auto s = r.scope("N=" + str(n) + " V=" + str(v) + " " + name(target_dtype) + " targets");
      std::vector<int64_t> t(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        t[static_cast<size_t>(i)] = i % 4 == 1 ? ignore : (i * 379) % v;
      const Tensor logits = r.random({n, v}, 421, 3.f, r.dtype());
      const Tensor targets = r.in(integers(t, {n}, target_dtype));
      const ops::CrossEntropyForward f = ops::cross_entropy(logits, targets, ignore);
      r.bits("counted", f.counted);
      r.close("loss", f.loss);
      r.close("lse", f.lse);
      // dloss and the count on the device, as autograd passes them.
      const Tensor d =
          ops::cross_entropy_backward(r.scalar(0.7f), logits, targets, f.lse, ignore, f.counted);
      r.close("dlogits", d, {OpClass::kSmallGradient});
      r.bits("dlogits of an ignored row", d.slice(1, 2));
    }
  }
  // Every row ignored: loss 0, gradient 0.
  const Tensor logits = r.random({4, 9}, 422, 1.f, r.dtype());
  const Tensor targets = r.in(Tensor::full({4}, -1.f, DType::kI32));
  const ops::CrossEntropyForward f = ops::cross_entropy(logits, targets, -1);
  r.bits("all ignored: counted", f.counted);
  r.bits("all ignored: loss", f.loss);
  r.bits("all ignored: dlogits", ops::cross_entropy_backward(1.f, logits, targets, f.lse, -1, 0));
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    // Row 2 ignored; the other targets in the first group, a middle one and the last column.
    const Tensor lg = random_tensor(shape, r.dtype(), 61, 3.f);
    const Tensor tg = r.in(integers({3, 37, -1, 0, shape[1] - 1}, {5}, DType::kI32));
    const ops::CrossEntropyForward fv = ops::cross_entropy(r.in(lg), tg, -1);
    const Tensor d = ops::cross_entropy_backward(0.7f, r.in(lg), tg, fv.lse, -1, 4);
    r.close("dlogits", d, {OpClass::kSmallGradient});
    r.same("dlogits, misaligned",
           ops::cross_entropy_backward(0.7f, r.misaligned(lg), tg, fv.lse, -1, 4), d);
  }
}

// ---- attention ----

struct Heads {
  int64_t B, T, H, G, D;
  std::string str() const {
    return "B=" + op_table::str(B) + " T=" + op_table::str(T) + " H=" + op_table::str(H) +
           " G=" + op_table::str(G) + " D=" + op_table::str(D);
  }
};
// Head dims 64 and 128 (cuDNN's), T not a multiple of 64, one token, and head dims that only the
// own kernels take (20: not a multiple of 8; 192: above cuDNN's 128); grouped key/value heads
// (4 and 8 query heads per key/value head, and 2 with a head dim of 20).
const Heads kHeads[] = {{2, 70, 3, 3, 64},  {1, 131, 2, 2, 128}, {2, 64, 4, 4, 64},
                        {1, 1, 2, 2, 64},   {2, 256, 4, 4, 64},  {1, 200, 2, 2, 128},
                        {3, 5, 1, 1, 8},    {2, 70, 3, 3, 24},   {2, 37, 2, 2, 20},
                        {1, 66, 1, 1, 192}, {2, 70, 4, 2, 64},   {1, 128, 8, 1, 128},
                        {2, 37, 6, 3, 20}};

bool cudnn_ran([[maybe_unused]] const OpRun& r) {
#if OCTET_WITH_CUDA
  return !r.on_cpu() && cuda::last_attention_used_cudnn();
#else
  return false;
#endif
}

// Forward and backward on whichever path the backend takes (cuDNN's in bf16 where it runs on a
// GPU, else the own f32 kernels); a key or value gradient also sums H / G heads' gradients.
void attention(OpRun& r) {
  for (const Heads& s : kHeads) {
    auto sc = r.scope(s.str());
    const Tensor qkv = r.random({s.B, s.T, (s.H + 2 * s.G) * s.D}, 301);
    const Tensor dout = r.random({s.B, s.T, s.H * s.D}, 302);
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    const ops::AttentionForward f = ops::causal_attention(qkv, s.H, s.G, scale);
    const bool cudnn = cudnn_ran(r);
    const double heads_per_group = static_cast<double>(s.H / s.G);
    r.close("out", f.out, {cudnn ? OpClass::kCudnnAttention : OpClass::kPointwise});
    r.close("lse", f.lse, {cudnn ? OpClass::kCudnnAttention : OpClass::kPointwise});
    r.close("dqkv", ops::causal_attention_backward(dout, qkv, f.out, f.lse, s.H, s.G, scale),
            {cudnn ? OpClass::kCudnnAttention : OpClass::kAttentionBackward, heads_per_group});
  }
  // A token never sees a later token's key or value.
  const int64_t B = 2, T = 150, H = 2, C = 128, t = 97;  // t: in the second block of 64 queries
  Tensor qkv = random_tensor({B, T, 3 * C}, kF32, 321);
  const Tensor before = test::on_cpu(ops::causal_attention(r.in(qkv), H, 0.125f).out);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = C; i < 3 * C; ++i) qkv.data_as<float>()[(b * T + t) * 3 * C + i] += 5.f;
  }
  const Tensor after = test::on_cpu(ops::causal_attention(r.in(qkv), H, 0.125f).out);
  int64_t changed_early = 0, changed_at_t = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i <= t; ++i) {
      for (int64_t c = 0; c < C; ++c) {
        const int64_t at = (b * T + i) * C + c;
        (i < t ? changed_early : changed_at_t) +=
            before.data_as<float>()[at] != after.data_as<float>()[at];
      }
    }
  }
  r.expect("earlier outputs unchanged by a later token", changed_early == 0);
  r.expect("the token's own output changed", changed_at_t > 0);
}

void causal_attention_case(OpRun& r) { attention(r); }

// The own f32 kernels (the fallback where cuDNN declines a shape, and the reference its path is
// held to), called directly on a GPU so that cuDNN cannot take the shapes it would take: the f32
// rows on every shape without grouped heads.
void own_attention_kernels_case(OpRun& r) {
  for (const Heads& s : kHeads) {
    if (s.G != s.H) continue;
    auto sc = r.scope(s.str());
    const Tensor qkv = r.random({s.B, s.T, 3 * s.H * s.D}, 311);
    const Tensor dout = r.random({s.B, s.T, s.H * s.D}, 312);
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    Tensor out, lse, dqkv;
#if OCTET_WITH_CUDA
    if (!r.on_cpu()) {
      out = r.poisoned({s.B, s.T, s.H * s.D}, kF32);
      lse = r.poisoned({s.B, s.H, s.T}, kF32);
      dqkv = r.poisoned(qkv.shape(), kF32);
      cuda::causal_attention_fallback(qkv, s.H, scale, out, lse);
      cuda::causal_attention_backward_fallback(dout, qkv, out, lse, s.H, scale, dqkv);
    }
#endif
    if (r.on_cpu()) {
      const ops::AttentionForward f = ops::causal_attention(qkv, s.H, scale);
      out = f.out;
      lse = f.lse;
      dqkv = ops::causal_attention_backward(dout, qkv, out, lse, s.H, scale);
    }
    r.close("out", out);
    r.close("lse", lse);
    r.close("dqkv", dqkv, {OpClass::kAttentionBackward});
  }
}

// Rotation and repetition of heads: the same f32 arithmetic (math/rope.h) and head sums in the
// same order, so the same bits, with and without a table.
void pack_heads_case(OpRun& r) {
  const int64_t B = 2, T = 5, H = 6, G = 2, D = 8;
  const Tensor rope_table = ops::rope_table(T, D, 10000.0);
  for (bool rotate : {false, true}) {
    auto s = r.scope(rotate ? "rotated" : "copied");
    const Tensor qkv = r.random({B, T, (H + 2 * G) * D}, 61, 1.f, r.dtype());
    const Tensor dy = r.random({B, T, 3 * H * D}, 62, 1.f, r.dtype());
    const Tensor rope = rotate ? r.in(rope_table) : Tensor();
    r.bits("packed", ops::pack_heads(qkv, H, G, rope));
    r.bits("dqkv", ops::pack_heads_backward(dy, H, G, rope));
    const Tensor roped = ops::rope_heads(qkv, H, G, rope);
    r.bits("rope_heads", roped);
    r.bits("rope_heads_backward", ops::rope_heads_backward(roped, H, G, rope));
  }
}

void cached_attention_case(OpRun& r) {
  const int64_t N = 2, T = 5, H = 4, D = 8, len = 12, pos = 4;
  for (int64_t G : {H, int64_t{2}, int64_t{1}}) {
    auto s = r.scope("G " + str(G));
    const int64_t W = (H + 2 * G) * D;
    Tensor k = r.in(Tensor::zeros({N, len, G, D}, kF32)),
           v = r.in(Tensor::zeros({N, len, G, D}, kF32));
    const Tensor packed = r.random({N, T, W}, 81, 1.f, r.dtype());
    ops::kv_cache_write(r.random({N, pos, W}, 82, 1.f, r.dtype()), k, v, 0);
    ops::kv_cache_write(packed, k, v, pos);
    r.bits("keys", k);
    r.bits("values", v);
    r.close("out",
            ops::cached_attention(packed, k, v, pos, 1.f / std::sqrt(static_cast<float>(D))));
  }
}

}  // namespace

std::vector<test::OpCase> nn_cases() {
  return {
      {"activation", {"activation", "activation_backward"}, kFloats, activation_case},
      {"gated_activation",
       {"gated_activation", "gated_activation_backward"},
       kFloats,
       gated_activation_case},
      {"softmax", {"softmax", "softmax_backward"}, kFloats, softmax_case},
      {"norm", {"norm_forward", "norm_backward"}, kCastInputs, norm_case},
      {"norm_quantize_fp8", {"norm_quantize_fp8"}, kCastInputs, norm_quantize_fp8_case},
      {"embedding", {"embedding", "embedding_backward"}, {kF32, kBF16, kF16}, embedding_case},
      {"dropout", {"dropout", "dropout_backward"}, kCastInputs, dropout_case},
      {"cross_entropy",
       {"cross_entropy", "cross_entropy_backward"},
       kCastInputs,
       cross_entropy_case},
      {"causal_attention",
       {"causal_attention", "causal_attention_backward", "grouped_attention",
        "grouped_attention_backward"},
       {kF32},
       causal_attention_case},
      {"own_attention_kernels",
       {"causal_attention", "causal_attention_backward"},
       {kF32},
       own_attention_kernels_case},
      {"pack_heads", {"pack_heads", "pack_heads_backward"}, kCastInputs, pack_heads_case},
      {"cached_attention",
       {"kv_cache_write", "cached_attention"},
       kCastInputs,
       cached_attention_case},
  };
}

}  // namespace octet::op_table
