// Every backend op (kernels/backend.h) against the CPU backend, from one table (ggml's
// test-backend-ops is the model). A case makes its inputs on the CPU from fixed seeds, with shapes
// that leave tails (sizes that are not multiples of a warp, a block or a vector access, a single
// element, many blocks) and the values an op must handle (NaN of either sign, infinities, values
// that saturate or flush), runs the op through the public API on one device, and records its
// outputs with their rule (tests/support/op_table.h): bit for bit where both backends apply the
// same IEEE operations with RNE stores, else a row of the tolerance table
// (tests/support/tolerances.h). The cuda0 instance of a case x dtype compares the device's run
// with the CPU's; the cpu instance runs it twice on the CPU and expects the same bits (the CPU
// backend is deterministic). Properties every run must have (an aligned and a misaligned view
// give the same bits, a fused kernel equals its unfused form) are checked within each run.
#include "tests/support/op_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/blockwise.h"
#include "kernels/mxfp8.h"
#include "kernels/nn.h"
#include "kernels/nvfp4.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "kernels/rowwise.h"
#include "runtime/blockwise_tensor.h"
#include "runtime/float8_tensor.h"
#include "runtime/fp8_meta.h"
#include "runtime/fp8_stats.h"
#include "runtime/memory.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/nvfp4_tensor.h"
#include "runtime/rng.h"
#include "tests/support/scoped_env.h"
#include "tests/support/test_util.h"

#if OCTET_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"  // which attention path ran
#endif

namespace octet {
namespace {

using ops::Accumulate;
using ops::Activation;
using ops::NormKind;
using ops::Transpose;
using ops::ZeroCenteredGamma;
using test::OpClass;
using test::OpRun;
using test::random_tensor;
using test::Within;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16;
constexpr DType kE4M3 = DType::kE4M3, kE5M2 = DType::kE5M2;

std::string str(int64_t v) { return std::to_string(v); }
std::string name(DType d) { return std::string(dtype_name(d)); }
std::string hex(uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", u);
  return buf;
}

// (5, 64): every group of 4 whole; (5, 67): a tail of 3 after the groups, rows not a multiple of
// 4. Each in an aligned tensor (the kernels' vector loop) and a misaligned view (their
// one-element loop).
const Shape kVectorShapes[] = {{5, 64}, {5, 67}};

// NaNs of either sign and payload: the GPU's product makes a NaN canonical where x86 keeps its
// sign, so a cast must not depend on it.
const uint32_t kNaNBits[] = {0xFFC00000u, 0xFF800001u, 0x7FC00000u, 0xFFFFFFFFu};

// Random values (std `std`) with the casts' special cases planted over the whole tensor, so that
// several blocks and tiles meet them: values that saturate (above the format's max after
// scaling, +-inf), tiny values that flush to zero, NaN, signed zeros.
Tensor with_specials(const Shape& shape, DType input, uint64_t seed, float std) {
  std::vector<float> v = random_tensor(shape, kF32, seed, std).to_floats();
  const std::vector<float> planted = {1e9f, -1e9f, kInf, -kInf, 1e-9f, -1e-12f, kNaN, -0.f, 0.f};
  const size_t n = v.size();
  for (size_t k = 0; k < planted.size() && k < n; ++k) v[k * n / planted.size()] = planted[k];
  if (n > 2 * planted.size()) v[n - 1] = kNaN;  // the very last element, in the ragged tile
  return Tensor::from_floats(v, shape, input);
}

// Magnitudes that change from 32-block to 32-block in both directions (2^-40 .. 2^40), a zero
// block, blocks with +-inf and NaN, subnormals, and block maxima of exactly fp8_max times a power
// of two (the exponent must not round up).
Tensor mixed_magnitudes(const Shape& shape, DType input, uint64_t seed) {
  std::vector<float> v = random_tensor(shape, kF32, seed).to_floats();
  const int64_t cols = shape.back();
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / cols, c = static_cast<int64_t>(i) % cols;
    v[i] = std::ldexp(v[i], static_cast<int>((r / 32 * 13 + r * 5 + c / 32 * 7) % 81) - 40);
  }
  if (v.size() >= 8 * 32) {
    for (size_t i = 0; i < 32; ++i) v[i] = 0.f;
    v[35] = kInf;
    v[73] = -kInf;
    v[97] = kNaN;
    for (size_t i = 128; i < 160; ++i) v[i] = 1e-40f * static_cast<float>(i) - 5.6e-39f;
    v[165] = -448.f * 0x1p-3f;
    v[222] = 57344.f * 0x1p5f;
  }
  return Tensor::from_floats(v, shape, input);
}

// Values over many magnitudes (blocks get very different scales) with the block casts' special
// cases planted: values that saturate, values that flush next to their block's amax, NaN, signed
// zeros, subnormals, and one block of zeros.
Tensor block_input(const Shape& shape, DType input, uint64_t seed) {
  std::vector<float> v = random_tensor(shape, kF32, seed, 1.f).to_floats();
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.f, static_cast<int>((i * 7919) % 31) - 15);
  const std::vector<float> planted = {1e30f,   -1e30f, kInf, -kInf, 1e-30f,
                                      -1e-25f, kNaN,   -0.f, 0.f,   3e-40f};
  for (size_t k = 0; k < planted.size() && k < n; ++k) v[k * n / planted.size()] = planted[k];
  if (n >= 64) {
    for (size_t i = n / 2; i < n / 2 + 16; ++i) v[i] = 0.f;
  }
  if (n > 2 * planted.size()) v[n - 1] = kNaN;  // in the ragged last block
  return Tensor::from_floats(v, shape, input);
}

// 64 x 64 random values (one tile, two MXFP8 blocks per row) with the NaNs of kNaNBits at
// 5, 42, 79, 116.
Tensor with_negative_nans(DType input) {
  std::vector<float> v = random_tensor({64, 64}, kF32, 31).to_floats();
  for (size_t k = 0; k < std::size(kNaNBits); ++k)
    v[k * 37 + 5] = test::float_from_bits(kNaNBits[k]);
  return Tensor::from_floats(v, {64, 64}, input);
}
// The bytes of an FP8 cast of with_negative_nans where the NaNs were: 0x7F, whatever their sign.
void expect_nan_bytes(OpRun& r, const Tensor& q) {
  const Tensor h = test::on_cpu(q);
  for (size_t k = 0; k < std::size(kNaNBits); ++k) {
    r.expect(hex(kNaNBits[k]) + " casts to 0x7F", h.data_as<uint8_t>()[k * 37 + 5] == 0x7F);
  }
}

// Ids or targets of `dtype` from values.
Tensor integers(const std::vector<int64_t>& v, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i)
    store_from_f32(dtype, t.data(), i, static_cast<float>(v[i]));
  return t;
}

// Every buffer of a quantized tensor (data of each usage, scale_inv, exponents or E4M3 scales, an
// NVFP4 amax) bit for bit, and its usage.
void record(OpRun& r, const std::string& what, const QuantizedTensor& q) {
  auto s = r.scope(what);
  r.fact("usage", static_cast<int64_t>(q.usage()));
  const std::vector<Tensor> held = q.held_tensors();
  for (size_t i = 0; i < held.size(); ++i) r.bits("buffer " + std::to_string(i), held[i]);
}
void expect_same(OpRun& r, const std::string& what, const QuantizedTensor& got,
                 const QuantizedTensor& want) {
  auto s = r.scope(what);
  r.expect("usage", got.usage() == want.usage());
  const std::vector<Tensor> g = got.held_tensors(), w = want.held_tensors();
  r.expect("buffers", g.size() == w.size());
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    r.same("buffer " + std::to_string(i), g[i], w[i]);
  }
}

// ---- magnitudes: the sum of |terms| of each result, for the GEMM and sum rows ----

Tensor abs_f32(const Tensor& t) {
  std::vector<float> v = test::on_cpu(t).to_floats();
  for (float& e : v) e = std::fabs(e);
  return Tensor::from_floats(v, t.shape());
}
// factor * sum_k |op(a)_ik| |op(b)_kj| (a and b on the CPU, 2-D views; FP8 data as its code
// values), by an f32 GEMM of the absolute values: all terms positive, so within K u of exact.
std::vector<double> gemm_magnitude(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                                   double factor = 1) {
  const Tensor p = ops::gemm(abs_f32(a.flatten_2d()), ta, abs_f32(b.flatten_2d()), tb, kF32);
  std::vector<double> m;
  for (float e : p.to_floats()) m.push_back(std::fabs(factor) * e);
  return m;
}
// |bias_j| (broadcast over rows) or |old_ij| added: terms of the output's sum.
void add_row_terms(std::vector<double>& mag, const Tensor& bias) {
  const std::vector<float> b = test::on_cpu(bias).to_floats();
  for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(b[i % b.size()]);
}
void add_terms(std::vector<double>& mag, const Tensor& old) {
  const std::vector<float> o = test::on_cpu(old).to_floats();
  for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(o[i]);
}
double sum_abs(const Tensor& t) {
  double s = 0;
  for (float e : test::on_cpu(t).to_floats()) s += std::fabs(e);
  return s;
}

// ===================================== elementwise =====================================

void binary_case(OpRun& r) {
  const DType d = r.dtype();
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Fn> fns[] = {
      {"add", ops::add}, {"sub", ops::sub}, {"mul", ops::mul}, {"div", ops::div}};
  // (3, 50, 70): rows of 70 that do not divide a block of threads; b stays away from zero so
  // that div has no infinities.
  const Tensor b32 = ops::add(random_tensor({3, 50, 70}, kF32, 2), Tensor::full({70}, 4.f, kF32));
  const Tensor a = r.in(random_tensor({3, 50, 70}, d, 1, 3.f)), b = r.in(ops::cast(b32, d));
  const Tensor row = r.in(ops::cast(b32.reshape({150, 70}).slice(7, 8).reshape({70}), d));
  for (const auto& [op, fn] : fns) {
    auto s = r.scope(op);
    r.bits("same shape", fn(a, b));
    r.bits("row", fn(a, row));
  }
  // Another dtype on either side: math in f32, stored as a's dtype. A single element, less than
  // a warp, many blocks with a tail.
  const DType other = d == kF32 ? kBF16 : kF32;
  for (int64_t n : {1, 31, 100003}) {
    auto s = r.scope("n " + str(n));
    const Tensor x = r.in(random_tensor({n}, d, 3)), y = r.in(random_tensor({n}, other, 4));
    r.bits("mul " + name(d) + " x " + name(other), ops::mul(x, y));
    r.bits("sub " + name(other) + " - " + name(d), ops::sub(y, x));
  }
  r.bits("add of an " + name(other) + " row",
         ops::add(r.in(random_tensor({17, 33}, d, 6)), r.in(random_tensor({33}, other, 7))));
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor va = random_tensor(shape, d, 11, 3.f);
    const Tensor vb =
        ops::cast(ops::add(random_tensor(shape, kF32, 12), Tensor::full(shape, 4.f, kF32)), d);
    const Tensor vrow = ops::cast(random_tensor({shape[1]}, kF32, 13), d);
    const Tensor mul = ops::mul(r.in(va), r.in(vb)), div = ops::div(r.in(va), r.in(vrow));
    r.bits("mul", mul);
    r.same("mul, misaligned", ops::mul(r.misaligned(va), r.misaligned(vb)), mul);
    r.bits("div by a row", div);
    r.same("div by a row, misaligned", ops::div(r.misaligned(va), r.misaligned(vrow)), div);
  }
}

void scale_case(OpRun& r) {
  const Tensor x = random_tensor({129, 257}, r.dtype(), 8, 2.f);
  r.bits("scale", ops::scale(r.in(x), -0.3f));
  Tensor t = r.in(x);
  const uint64_t version = t.version();
  ops::scale_(t, 1.7f);
  r.bits("scale_", t);
  r.expect("scale_ bumps the version", t.version() > version);
  for (const Shape& shape : kVectorShapes) {
    const Tensor v = random_tensor(shape, r.dtype(), 11, 3.f);
    const Tensor want = ops::scale(r.in(v), 0.37f);
    r.bits(shape_str(shape), want);
    r.same(shape_str(shape) + ", misaligned", ops::scale(r.misaligned(v), 0.37f), want);
  }
}

void axpy_case(OpRun& r) {
  Tensor dst = r.in(random_tensor({1000, 77}, r.dtype(), 9));
  const uint64_t version = dst.version();
  ops::add_(dst, r.random({1000, 77}, 10), -0.25f);
  r.close("dst", dst);
  r.expect("add_ bumps the version", dst.version() > version);
  for (const Shape& shape : kVectorShapes) {
    const Tensor d0 = random_tensor(shape, r.dtype(), 11, 3.f);
    const Tensor src = random_tensor(shape, r.dtype(), 12);
    Tensor aligned = r.in(d0), mis = r.misaligned(d0);
    ops::add_(aligned, r.in(src), -0.75f);
    ops::add_(mis, r.misaligned(src), -0.75f);
    r.close(shape_str(shape), aligned);
    r.same(shape_str(shape) + ", misaligned", mis, aligned);
  }
}

void fill_case(OpRun& r) {
  const DType d = r.dtype();
  for (float value : {0.f, 7.f, 1.f / 3.f}) {
    Tensor t = r.poisoned({37, 1001}, d);
    ops::fill_(t, value);
    r.bits(std::to_string(value), t);
  }
  if (is_floating(d)) {  // negative and non-finite values
    for (float value : {-2.5f, kInf, 1e30f}) {
      Tensor t = r.poisoned({5, 3}, d);
      ops::fill_(t, value);
      r.bits(std::to_string(value), t);
    }
  }
  for (const Shape& shape : kVectorShapes) {
    Tensor aligned = r.empty(shape, d), mis = r.misaligned_empty(shape, d);
    ops::fill_(aligned, 1.5f);
    ops::fill_(mis, 1.5f);
    r.bits(shape_str(shape), aligned);
    r.same(shape_str(shape) + ", misaligned", mis, aligned);
  }
}

void fill_from_case(OpRun& r) {
  for (int64_t n : {1, 31, 4099}) {
    Tensor t = r.poisoned({n}, r.dtype());
    ops::fill_from_(t, r.scalar(-1.f / 3.f));
    r.bits("n " + str(n), t);
  }
}

void convert_case(OpRun& r) {
  // Random values plus the rounding cases: bf16 ties (1 + 2^-8 rounds to even), the f16 overflow
  // tie 65520 (to inf), f16 subnormals, infinities and a large f32.
  std::vector<float> v = random_tensor({64, 129}, kF32, 11, 100.f).to_floats();
  const std::vector<float> planted = {
      1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, -2.5f, 65520.f, 3e-6f, -1e-7f, kInf, -kInf, 3e38f, 0.f};
  std::copy(planted.begin(), planted.end(), v.begin());
  const Tensor src = Tensor::from_floats(v, {64, 129}, r.dtype());
  for (DType to : {kF32, kBF16, kF16}) {
    auto s = r.scope("to " + name(to));
    r.bits("cast", ops::cast(r.in(src), to));
    Tensor dst = r.poisoned(src.shape(), to);
    ops::copy_(dst, r.in(src));
    r.bits("copy_", dst);
  }
  const DType to = r.dtype() == kF32 ? kBF16 : kF32;
  for (const Shape& shape : kVectorShapes) {
    const Tensor x = random_tensor(shape, r.dtype(), 11, 3.f);
    const Tensor want = ops::cast(r.in(x), to);
    r.bits(shape_str(shape) + " to " + name(to), want);
    r.same(shape_str(shape) + ", misaligned", ops::cast(r.misaligned(x), to), want);
  }
}

// ===================================== reductions =====================================

void sum_case(OpRun& r) {
  // (257, 129) fits a few blocks; 2^20 + 3 elements need a second pass and a tail. A sum's
  // rounding error scales with sum |x|, not with the sum (which cancels to ~sqrt(n)): the f32
  // row's absolute floor per unit of sum |x|.
  const double per_magnitude = test::parity_tolerance(kF32).abs;
  for (const Shape& shape : {Shape{257, 129}, Shape{(1 << 20) + 3}}) {
    auto s = r.scope(shape_str(shape));
    const Tensor x = random_tensor(shape, r.dtype(), 12);
    const double l1 = sum_abs(x), n = static_cast<double>(x.numel());
    r.bounded("sum", ops::sum(r.in(x)), {l1}, per_magnitude);
    r.bounded("mean", ops::mean(r.in(x)), {l1 / n}, per_magnitude);
  }
}

void max_amax_case(OpRun& r) {
  const DType d = r.dtype();
  for (const Shape& shape : {Shape{1}, Shape{257, 129}, Shape{(1 << 20) + 3}}) {
    // All negative too: max must not start from 0.
    const Tensor x = random_tensor(shape, d, 13, 5.f);
    const Tensor negative = ops::sub(x, Tensor::full({x.cols()}, 100.f, d));
    for (const auto& [what, t] : {std::pair{"", x}, std::pair{" negative", negative}}) {
      auto s = r.scope(shape_str(shape) + what);
      r.bits("max", ops::max(r.in(t)));
      r.bits("amax", ops::amax(r.in(t)));
    }
  }
  // A NaN in the first element and in a later block than the largest value: amax ignores it,
  // max propagates it; an infinity is a value.
  std::vector<float> v = random_tensor({70000}, kF32, 14).to_floats();
  v[5] = -1e4f;
  v[69999] = kNaN;
  v[0] = kNaN;
  const Tensor x = r.in(Tensor::from_floats(v, {70000}, d));
  r.bits("amax with NaNs", ops::amax(x));
  r.expect("max with NaNs is NaN", std::isnan(ops::max(x).item()));
  v[7] = -kInf;
  r.bits("amax with -inf", ops::amax(r.in(Tensor::from_floats(v, {70000}, d))));
  r.bits("amax of (0,)", ops::amax(r.empty({0}, d)));
  r.bits("amax of (0, 16)", ops::amax(r.empty({0, 16}, d)));
}

void sum_rows_case(OpRun& r) {
  // Many rows (the reduction runs over the long dimension), narrow and wide rows, a 3-D input.
  for (const Shape& shape : {Shape{4, 6, 10}, Shape{4099, 3}, Shape{33, 1030}, Shape{1, 77}}) {
    r.close(shape_str(shape), ops::sum_rows(r.in(random_tensor(shape, r.dtype(), 15))),
            {OpClass::kCancelling});
  }
}

void sum_of_squares_case(OpRun& r) {
  for (const Shape& shape : {Shape{1}, Shape{1000}, Shape{(1 << 22) + 7}}) {
    r.value(shape_str(shape), ops::sum_of_squares(r.in(random_tensor(shape, r.dtype(), 3, 2.f))),
            OpClass::kF64Sum);
  }
}

// ===================================== per-tensor FP8 =====================================

void quantize_fp8_case(OpRun& r) {
  const DType d = r.dtype();
  const Shape shapes[] = {{129, 300}, {1, 16}, {3, 37, 300}, {1024, 3072}, {4097, 33}};
  for (const Shape& shape : shapes) {
    for (DType fp8 : {kE4M3, kE5M2}) {
      auto s = r.scope(shape_str(shape) + " to " + name(fp8));
      const Tensor x = r.in(with_specials(shape, d, 3, 50.f));
      Tensor row = r.poisoned(shape, fp8), col = r.poisoned({x.cols(), x.rows()}, fp8);
      Tensor amax = r.scalar(5.f);  // below max |x| (1e9 is planted): max-accumulated
      ops::quantize_fp8(x, r.scalar(fp8 == kE4M3 ? 7.f : 300.f), &row, &col, &amax);
      r.bits("row-wise", row);
      r.bits("column-wise", col);
      r.bits("amax", amax);
    }
  }
  {
    auto s = r.scope("one direction");
    const Tensor x = r.in(with_specials({130, 257}, d, 4, 2.f)), scale = r.scalar(3.5f);
    Tensor row = r.poisoned(x.shape(), kE4M3), col = r.poisoned({257, 130}, kE4M3);
    ops::quantize_fp8(x, scale, &row, nullptr, nullptr);
    ops::quantize_fp8(x, scale, nullptr, &col, nullptr);
    r.bits("row-wise", row);
    r.bits("column-wise", col);
  }
  // The amax slot merges as the CPU's `m > amax ? m : amax`: a NaN start of either sign stays,
  // -0.0 stays over data of zeros, a start above every |x| stays; in the row-wise kernel and in
  // the tiled one (column-wise too).
  const uint32_t starts[] = {0x00000000u, 0x80000000u, 0xBF800000u, 0x7FC00000u,
                             0xFFC00000u, 0x7F7FFFFFu, 0x49742400u};  // 1e6 last
  for (bool zeros : {false, true}) {
    const Tensor x =
        r.in(zeros ? Tensor::zeros({40, 96}, d) : random_tensor({70, 300}, d, 21, 3.f));
    for (uint32_t start : starts) {
      for (bool tiled : {false, true}) {
        Tensor row = r.empty(x.shape(), kE4M3), col = r.empty({x.cols(), x.rows()}, kE4M3);
        Tensor amax = r.scalar(test::float_from_bits(start));
        ops::quantize_fp8(x, r.scalar(2.f), &row, tiled ? &col : nullptr, &amax);
        r.bits(std::string(zeros ? "zeros" : "random") + ", amax from " + hex(start) +
                   (tiled ? ", tiled" : ", row-wise"),
               amax);
      }
    }
  }
  for (DType fp8 : {kE4M3, kE5M2}) {
    auto s = r.scope("negative NaNs to " + name(fp8));
    Tensor row = r.empty({64, 64}, fp8), col = r.empty({64, 64}, fp8);
    ops::quantize_fp8(r.in(with_negative_nans(d)), r.scalar(4.f), &row, &col, nullptr);
    r.bits("row-wise", row);
    r.bits("column-wise", col);
    expect_nan_bytes(r, row);
  }
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor x = random_tensor(shape, d, 41, 40.f);
    Tensor row = r.empty(shape, kE4M3), amax = r.scalar(0.f);
    ops::quantize_fp8(r.in(x), r.scalar(3.f), &row, nullptr, &amax);
    Tensor row_m = r.misaligned_empty(shape, kE4M3), amax_m = r.scalar(0.f);
    ops::quantize_fp8(r.misaligned(x), r.scalar(3.f), &row_m, nullptr, &amax_m);
    r.bits("row-wise", row);
    r.bits("amax", amax);
    r.same("row-wise, misaligned", row_m, row);
    r.same("amax, misaligned", amax_m, amax);
  }
}

void transpose_2d_case(OpRun& r) {
  for (const Shape& shape : {Shape{45, 70}, Shape{1, 1000}, Shape{1000, 1}, Shape{513, 1025}}) {
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) / 2.f;
    r.bits(shape_str(shape), ops::transpose_2d(r.in(Tensor::from_floats(v, shape, r.dtype()))));
  }
}

void dequantize_fp8_case(OpRun& r) {
  std::vector<uint8_t> codes(256 * 3);  // every code, three times in another order
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7 % 256);
  const Tensor q = r.in(Tensor::from_bytes(codes.data(), {48, 16}, r.dtype()));
  for (float scale_inv : {0.125f, 0.3f, 3e-5f}) {
    for (DType out : {kF32, kBF16}) {
      r.bits(std::to_string(scale_inv) + " to " + name(out),
             ops::dequantize_fp8(q, r.scalar(scale_inv), out));
    }
  }
  for (const Shape& shape : kVectorShapes) {
    Tensor codes_of_shape = Tensor::empty(shape, r.dtype());
    ops::quantize_fp8(random_tensor(shape, kF32, 41, 40.f), Tensor::full({1}, 3.f, kF32),
                      &codes_of_shape, nullptr, nullptr);
    for (DType out : {kF32, kBF16}) {
      auto s = r.scope(shape_str(shape) + " to " + name(out));
      const Tensor want = ops::dequantize_fp8(r.in(codes_of_shape), r.scalar(0.25f), out);
      r.bits("aligned", want);
      r.same("misaligned", ops::dequantize_fp8(r.misaligned(codes_of_shape), r.scalar(0.25f), out),
             want);
    }
  }
}

// ===================================== MXFP8 =====================================

void quantize_mxfp8_case(OpRun& r) {
  const Shape shapes[] = {{1, 32}, {3, 40}, {16, 64}, {129, 300}, {993, 512}, {8, 32, 1024}};
  for (const Shape& shape : shapes) {
    const Tensor x = r.in(mixed_magnitudes(shape, r.dtype(), 61));
    const int64_t rows = x.rows(), cols = x.cols();
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (Usage direction : {Usage::kRowwise, Usage::kColumnwise}) {
        auto s = r.scope(shape_str(shape) + " to " + name(fp8) + " " +
                         std::string(usage_name(direction)));
        const bool row = direction == Usage::kRowwise;
        Tensor data = r.poisoned(row ? shape : Shape{cols, rows}, fp8);
        Tensor scales = r.poisoned(
            row ? mxfp8_scale_shape(rows, cols) : mxfp8_scale_shape(cols, rows), DType::kE8M0);
        ops::quantize_mxfp8(x, direction, data, scales);
        r.bits("exponents", scales);
        r.bits("data", data);
      }
    }
  }
  for (DType fp8 : {kE4M3, kE5M2}) {
    for (Usage direction : {Usage::kRowwise, Usage::kColumnwise}) {
      auto s = r.scope("negative NaNs to " + name(fp8) + " " + std::string(usage_name(direction)));
      Tensor data = r.empty({64, 64}, fp8), e = r.empty(mxfp8_scale_shape(64, 64), DType::kE8M0);
      ops::quantize_mxfp8(r.in(with_negative_nans(r.dtype())), direction, data, e);
      r.bits("data", data);
      r.bits("exponents", e);
    }
  }
}

void dequantize_mxfp8_case(OpRun& r) {
  for (const Shape& shape : {Shape{64, 96}, Shape{3, 40}, Shape{257, 544}}) {
    const Tensor x = mixed_magnitudes(shape, kF32, 63);
    Tensor data = Tensor::empty(shape, r.dtype());
    Tensor scales = Tensor::empty(mxfp8_scale_shape(x.rows(), x.cols()), DType::kE8M0);
    ops::quantize_mxfp8(x, Usage::kRowwise, data, scales);
    for (DType out : {kF32, kBF16}) {
      r.bits(shape_str(shape) + " to " + name(out),
             ops::dequantize_mxfp8(r.in(data), r.in(scales), out));
    }
  }
}

// ===================================== quantizers =====================================

std::shared_ptr<DelayedScalingQuantizer> delayed(OpRun& r, float scale, DType fp8,
                                                 const std::vector<float>& history) {
  const Tensor h = Tensor::from_floats(history, {static_cast<int64_t>(history.size())});
  return std::make_shared<DelayedScalingQuantizer>(r.scalar(scale), r.in(h), fp8);
}

void delayed_quantizer_case(OpRun& r) {
  for (DType fp8 : {kE4M3, kE5M2}) {
    auto s = r.scope(name(fp8));
    // history[0] starts at 3 (an earlier cast of this step); history[1] must stay untouched.
    auto q = delayed(r, 37.5f, fp8, {3.f, 99.f, 0.f, 0.f});
    const Tensor x = r.in(with_specials({96, 200}, r.dtype(), 31, 4.f));
    for (Usage usage : {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth}) {
      record(r, std::string(usage_name(usage)),
             *q->quantize(x, usage, Ownership::kInternal, AmaxRecording::kRecord));
      r.bits(std::string(usage_name(usage)) + " history", q->amax_history());
    }
    const Tensor before = q->amax_history().clone();
    q->quantize(r.random({16, 16}, 32, 1e4f, r.dtype()), Usage::kBoth, Ownership::kInternal,
                AmaxRecording::kSkip);
    r.same("kSkip records nothing", q->amax_history(), before);
  }
}

void current_quantizer_case(OpRun& r) {
  const Tensor inputs[] = {
      random_tensor({611, 782}, r.dtype(), 21, 3.f),
      random_tensor({17, 33}, r.dtype(), 22, 1e-8f),                 // amax under eps
      Tensor::zeros({4, 8}, r.dtype()),                              // amax 0: scale 1
      Tensor::from_floats({1.f, -kInf, 3.f, 0.5f}, {4}, r.dtype()),  // amax inf: scale 1
      Tensor::from_floats({1.f, kNaN, -3.f, kNaN}, {4}, r.dtype()),  // NaN ignored
      Tensor::from_floats({1e-39f, -5e-40f}, {2}, r.dtype()),        // scale overflows: FLT_MAX
  };
  for (DType fp8 : {kE4M3, kE5M2}) {
    for (Power2Scale p2 : {Power2Scale::kOff, Power2Scale::kOn}) {
      for (float eps : {0.f, 1e-6f}) {
        const CurrentScalingQuantizer q(fp8, p2, eps);
        for (const Tensor& x : inputs) {
          record(r,
                 name(fp8) + (p2 == Power2Scale::kOn ? " pow2" : "") + " eps " +
                     std::to_string(eps) + " " + shape_str(x.shape()),
                 *q.quantize(r.in(x), Usage::kBoth, Ownership::kInternal, AmaxRecording::kRecord));
        }
      }
    }
  }
}

void mxfp8_quantizer_case(OpRun& r) {
  for (DType fp8 : {kE4M3, kE5M2}) {
    const MXFP8Quantizer q(fp8);
    for (const Shape& shape : {Shape{64, 96}, Shape{2, 128, 256}}) {
      const Tensor x = r.in(mixed_magnitudes(shape, r.dtype(), 64));
      for (Usage usage : {Usage::kRowwise, Usage::kColumnwise, Usage::kBoth}) {
        record(r, name(fp8) + " " + shape_str(shape) + " " + std::string(usage_name(usage)),
               *q.quantize(x, usage, Ownership::kInternal, AmaxRecording::kSkip));
      }
    }
  }
}

// ops::dequantize of either usage, update_usage (the missing direction made on the device; the
// bytes of a dropped one freed there), quantize_into (in place, equal to a fresh cast).
void quantized_tensor_case(OpRun& r) {
  const Tensor x = r.random({2, 64, 96}, 23, 2.f, r.dtype());
  const std::shared_ptr<Quantizer> quantizers[] = {
      std::make_shared<CurrentScalingQuantizer>(kE4M3, Power2Scale::kOff, 0.f),
      std::make_shared<MXFP8Quantizer>(kE4M3)};
  for (const auto& q : quantizers) {
    auto s = r.scope(q->describe());
    auto t = q->quantize(x, Usage::kBoth, Ownership::kInternal, AmaxRecording::kSkip);
    for (DType out : {kF32, kBF16}) r.bits("row-wise to " + name(out), ops::dequantize(*t, out));
    ops::update_usage(*t, Usage::kColumnwise);
    r.bits("column-wise to f32", ops::dequantize(*t, kF32));
  }
  {
    auto s = r.scope("update_usage");
    const Tensor big = r.random({993, 512}, 51, 4.f, r.dtype());
    // Per-tensor: column-wise data is the byte transpose of the row-wise data.
    auto rows = delayed(r, 3.f, kE4M3, {0.f})
                    ->quantize(big, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    ops::update_usage(*rows, Usage::kBoth);
    record(r, "delayed, row-wise to both", *rows);
    auto both = delayed(r, 3.f, kE4M3, {0.f})
                    ->quantize(big, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    expect_same(r, "delayed, as cast both ways", *rows, *both);
    const int64_t before = memory_stats(r.device()).current_of(MemTag::kOther);
    ops::update_usage(*rows, Usage::kColumnwise);
    r.expect("dropping the row-wise data frees its bytes",
             memory_stats(r.device()).current_of(MemTag::kOther) == before - 993 * 512);
    r.expect("a dropped direction cannot come back without its source", [&] {
      try {
        ops::update_usage(*rows, Usage::kBoth);
      } catch (const Error&) {
        return true;
      }
      return false;
    }());
    // MXFP8: the missing direction is quantized from the source, on the source's device.
    const MXFP8Quantizer mx(kE4M3);
    auto m = mx.quantize(big, Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    ops::update_usage(*m, Usage::kBoth, &big);
    record(r, "mxfp8, row-wise to both", *m);
    expect_same(r, "mxfp8, as cast both ways", *m,
                *mx.quantize(big, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  }
  auto s = r.scope("quantize_into");
  const Tensor x1 = r.random({64, 96}, 41, 2.f, r.dtype()),
               x2 = r.random({64, 96}, 42, 5.f, r.dtype());
  {
    // Delayed: the slot's scale moved since dst was made; the amax max-accumulates.
    auto q = delayed(r, 1.5f, kE4M3, {0.5f, 0.f});
    auto t = q->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    const Tensor data = dynamic_cast<const Float8Tensor&>(*t).rowwise_data();
    Tensor scale = q->scale();
    ops::fill_(scale, 0.625f);
    const uint64_t version = t->version();
    ops::quantize_into(*t, x2, AmaxRecording::kRecord);
    r.expect("delayed: the version moved", t->version() > version);
    r.expect("delayed: in place",
             dynamic_cast<const Float8Tensor&>(*t).rowwise_data().shares_storage(data));
    record(r, "delayed", *t);
    r.bits("delayed: history", q->amax_history());
    r.expect("delayed: scale_inv is 1 / 0.625",
             dynamic_cast<const Float8Tensor&>(*t).scale_inv().item() ==
                 static_cast<float>(1.0 / 0.625));
    expect_same(r, "delayed: as a fresh cast", *t,
                *q->quantize(x2, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  }
  // Current and MXFP8: stateless, a new scale (exponents) from src.
  const std::shared_ptr<Quantizer> stateless[] = {
      std::make_shared<CurrentScalingQuantizer>(kE5M2, Power2Scale::kOn, 0.f),
      std::make_shared<MXFP8Quantizer>(kE4M3)};
  for (const auto& q : stateless) {
    auto t = q->quantize(x1, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    ops::quantize_into(*t, x2, AmaxRecording::kRecord);
    record(r, q->describe(), *t);
    expect_same(r, q->describe() + " as a fresh cast", *t,
                *q->quantize(x2, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip));
  }
}

// ===================================== blockwise FP8 =====================================

void counts(OpRun& r, FP8CastCounts& c) {
  settle_device_stats(c, nullptr);  // a device's counts are taken here
  r.fact("total", c.total);
  r.fact("saturated", c.saturated);
  r.fact("flushed", c.flushed);
}

void quantize_blockwise_case(OpRun& r) {
  const Shape shapes[] = {{1, 1}, {3, 40}, {128, 128}, {129, 300}, {257, 1000}, {2, 65, 384}};
  for (const Shape& shape : shapes) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 71));
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
        for (bool power_2 : {true, false}) {
          for (float eps : {0.f, 1e-3f}) {
            auto s = r.scope(shape_str(shape) + " to " + name(fp8) +
                             (blocks == BlockScaling::k1D ? " 1x128" : " 128x128") +
                             (power_2 ? " pow2" : "") + " eps " + std::to_string(eps));
            Tensor data = r.poisoned({x.rows(), x.cols()}, fp8);
            Tensor scale_inv = r.poisoned(blockwise_scale_shape(blocks, x.rows(), x.cols()), kF32);
            FP8CastCounts c;
            ops::quantize_blockwise(x, {blocks, fp8_max(fp8), power_2, eps}, data, scale_inv, &c);
            r.bits("scale_inv", scale_inv);
            r.bits("data", data);
            counts(r, c);
          }
        }
      }
    }
  }
  // A huge block amax under a scale that is no power of two: tiny values flush, values round
  // past the max.
  auto s = r.scope("saturating and flushing");
  Tensor data = r.empty({64, 256}, kE4M3);
  Tensor scale_inv = r.empty(blockwise_scale_shape(BlockScaling::k1D, 64, 256), kF32);
  FP8CastCounts c;
  ops::quantize_blockwise(r.in(block_input({64, 256}, r.dtype(), 72)),
                          {BlockScaling::k1D, kE4M3Max, false, 0.f}, data, scale_inv, &c);
  r.bits("data", data);
  r.bits("scale_inv", scale_inv);
  counts(r, c);
  r.expect("the input saturates and flushes", c.saturated > 0 && c.flushed > 0);
}

void dequantize_blockwise_case(OpRun& r) {
  for (const Shape& shape : {Shape{3, 40}, Shape{129, 300}, Shape{256, 384}}) {
    for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
      Tensor data = Tensor::empty(shape, r.dtype());
      Tensor s = Tensor::empty(blockwise_scale_shape(blocks, shape[0], shape[1]), kF32);
      ops::quantize_blockwise(block_input(shape, kF32, 73), {blocks, fp8_max(r.dtype()), true, 0.f},
                              data, s);
      for (DType out : {kF32, kBF16}) {
        r.bits(
            shape_str(shape) + (blocks == BlockScaling::k1D ? " 1D" : " 2D") + " to " + name(out),
            ops::dequantize_blockwise(r.in(data), r.in(s), blocks, out));
      }
    }
  }
}

void transpose_scales_case(OpRun& r) {
  // dst (7, 4): src's (3, 7) corner transposed, the rest zeroed.
  Tensor dst = r.poisoned({7, 4}, kF32);
  ops::detail::backend_for(r.device()).transpose_scales(r.random({3, 8}, 74), 3, 7, dst);
  r.bits("(3, 8) to (7, 4)", dst);
}

void blockwise_gemm_case(OpRun& r) {
  // The expansion path on every device (cuBLASLt's block-scaled path is held to its own bound in
  // tests/cuda/blockwise_gemm_test.cpp): both sides multiply the same exact expanded values.
  const test::ScopedEnv expansion("OCTET_CUBLASLT_BLOCK_SCALING", "0");
  struct Operand {
    Tensor data, scale_inv, values;  // on the CPU; values: the expansion, for the magnitudes
  };
  auto operand = [&](int64_t rows, int64_t k, BlockScaling blocks, uint64_t seed) {
    Operand op{Tensor::empty({rows, k}, r.dtype()),
               Tensor::empty(blockwise_scale_shape(blocks, rows, k), kF32), Tensor()};
    ops::quantize_blockwise(random_tensor({rows, k}, kF32, seed, 2.f),
                            {blocks, fp8_max(r.dtype()), true, 0.f}, op.data, op.scale_inv);
    op.values = ops::dequantize_blockwise(op.data, op.scale_inv, blocks, kF32);
    return op;
  };
  struct Problem {
    int64_t m, n, k;
    BlockScaling a, b;
  };
  for (const Problem& p : {Problem{32, 48, 256, BlockScaling::k1D, BlockScaling::k1D},
                           Problem{33, 17, 300, BlockScaling::k1D, BlockScaling::k2D},
                           Problem{130, 64, 200, BlockScaling::k2D, BlockScaling::k1D},
                           Problem{16, 144, 128, BlockScaling::k1D, BlockScaling::k2D}}) {
    const Operand a = operand(p.m, p.k, p.a, 75), b = operand(p.n, p.k, p.b, 76);
    const Tensor bias = random_tensor({p.n}, kF32, 77), init = random_tensor({p.m, p.n}, kF32, 78);
    for (bool with_bias : {false, true}) {
      for (Accumulate acc : {Accumulate::kNo, Accumulate::kYes}) {
        Tensor out = r.in(init);
        const Tensor bias_d = r.in(bias);
        ops::blockwise_gemm(r.in(a.data), r.in(a.scale_inv), p.a, r.in(b.data), r.in(b.scale_inv),
                            p.b, out, with_bias ? &bias_d : nullptr, acc);
        std::vector<double> mag;
        if (!r.on_cpu()) {
          mag = gemm_magnitude(a.values, Transpose::kNo, b.values, Transpose::kYes);
          if (with_bias) add_row_terms(mag, bias);
          if (acc == Accumulate::kYes) add_terms(mag, init);
        }
        r.bounded(str(p.m) + "x" + str(p.n) + "x" + str(p.k) + (with_bias ? " bias" : "") +
                      (acc == Accumulate::kYes ? " accumulate" : ""),
                  out, std::move(mag), test::gemm_accumulation_bound(false, p.k));
      }
    }
  }
}

// The quantizer, and the column-wise copy dropped and made again (2D: the byte and scale
// transpose; 1D: a fresh cast of the source, by the tensor's quantizer).
void blockwise_quantizer_case(OpRun& r) {
  const Tensor x = r.in(block_input({4, 48, 272}, r.dtype(), 79));
  for (BlockScaling blocks : {BlockScaling::k1D, BlockScaling::k2D}) {
    for (DType fp8 : {kE4M3, kE5M2}) {
      auto s = r.scope(name(fp8) + (blocks == BlockScaling::k1D ? " 1D" : " 2D"));
      const auto q = std::make_shared<BlockwiseQuantizer>(fp8, blocks, true, 0.f);
      auto t = q->quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
      record(r, "cast", *t);
      t->drop_usage(Usage::kColumnwise);
      ops::update_usage(*t, Usage::kBoth, &x);
      record(r, "column-wise made again", *t);
      r.bits("dequantized", ops::dequantize(*t, kF32));
    }
  }
}

// ===================================== row-wise FP8 =====================================

// One scale per row: rows of one element, rows longer than a block of threads, saturating and
// flushing values next to huge ones, a row of zeros (block_input's), NaNs.
void quantize_rowwise_case(OpRun& r) {
  for (const Shape& shape : {Shape{1, 1}, Shape{3, 40}, Shape{129, 300}, Shape{2, 65, 1030}}) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 91));
    for (DType fp8 : {kE4M3, kE5M2}) {
      for (bool power_2 : {true, false}) {
        for (float eps : {0.f, 1e-3f}) {
          auto s = r.scope(shape_str(shape) + " to " + name(fp8) + (power_2 ? " pow2" : "") +
                           " eps " + std::to_string(eps));
          Tensor data = r.poisoned({x.rows(), x.cols()}, fp8);
          Tensor scale_inv = r.poisoned({x.rows()}, kF32);
          FP8CastCounts c;
          ops::quantize_rowwise(x, {fp8_max(fp8), power_2, eps}, data, scale_inv, &c);
          r.bits("scale_inv", scale_inv);
          r.bits("data", data);
          counts(r, c);
          for (DType out : {kF32, kBF16}) {
            r.bits("dequantized to " + name(out), ops::dequantize_rowwise(data, scale_inv, out));
          }
        }
      }
    }
  }
  // The quantizer: column-wise data is the cast of the transpose.
  const Tensor x = r.in(block_input({4, 48, 272}, r.dtype(), 92));
  for (DType fp8 : {kE4M3, kE5M2}) {
    const RowwiseQuantizer q(fp8, true, 0.f);
    auto t = q.quantize(x, Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    record(r, "quantizer " + name(fp8), *t);
    r.bits("quantizer " + name(fp8) + " dequantized", ops::dequantize(*t, kF32));
  }
}

// ===================================== NVFP4 =====================================

void hadamard16_case(OpRun& r) {
  std::vector<float> v = block_input({48, 96}, kF32, 80).to_floats();
  // inf - inf inside one group (the default NaN), and a group with a NaN after an inf.
  v[17] = kInf;
  v[18] = -kInf;
  v[33] = kInf;
  v[40] = -kNaN;
  const Tensor x = r.in(Tensor::from_floats(v, {48, 96}, r.dtype()));
  r.bits("forward", ops::hadamard16(x));
  r.bits("inverse", ops::hadamard16(x, true));
}

struct Nvfp4 {
  Tensor data, scales, amax;
};
Nvfp4 nvfp4_out(OpRun& r, int64_t rows, int64_t cols) {
  return {r.poisoned(nvfp4_data_shape(rows, cols), DType::kU8),
          r.poisoned(nvfp4_scale_shape(rows, cols), kE4M3), r.poisoned({1}, kF32)};
}
Nvfp4 cast_nvfp4(OpRun& r, const Tensor& x, const ops::NVFP4Cast& cast) {
  Nvfp4 q = nvfp4_out(r, x.rows(), x.cols());
  FP8CastCounts c;
  ops::quantize_nvfp4(x, cast, q.data, q.scales, q.amax, &c);
  r.bits("amax", q.amax);
  r.bits("scales", q.scales);
  r.bits("data", q.data);
  counts(r, c);
  return q;
}

void quantize_nvfp4_case(OpRun& r) {
  const Shape shapes[] = {{16, 16}, {32, 48}, {48, 272}, {160, 1040}, {2, 8, 528}};
  // Offsets that start mid Philox block and that carry into the counter's high word.
  const uint64_t offsets[] = {0, 3, (uint64_t{1} << 34) - 5};
  for (const Shape& shape : shapes) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 81));
    for (bool tiles : {false, true}) {
      for (bool rht : {false, true}) {
        for (bool sr : {false, true}) {
          for (uint64_t offset : offsets) {
            if (!sr && offset != 0) continue;
            auto s = r.scope(shape_str(shape) + (tiles ? " 16x16" : " 1x16") + (rht ? " rht" : "") +
                             (sr ? " sr at " + std::to_string(offset) : ""));
            ops::NVFP4Cast cast;
            cast.tiles_2d = tiles;
            cast.hadamard = rht;
            cast.stochastic = sr;
            cast.seed = 0x1234ABCDull;
            cast.offset = offset;
            cast_nvfp4(r, x, cast);
          }
        }
      }
    }
  }
  for (float fill : {0.f, kNaN, kInf}) {
    auto s = r.scope("all " + std::to_string(fill));
    cast_nvfp4(r, r.in(Tensor::full({32, 64}, fill, r.dtype())), {});
  }
}

// 4over6: each block keeps the nearer of its map-to-4 and map-to-6 casts, by either error, under
// either bound, 1x16 blocks and 16x16 tiles; and its dequantization under that bound.
void four_over_six_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 272}, Shape{2, 8, 528}}) {
    const Tensor x = r.in(block_input(shape, r.dtype(), 83));
    for (bool tiles : {false, true}) {
      for (bool mse : {false, true}) {
        for (float bound : {448.f, 256.f}) {
          auto s = r.scope(shape_str(shape) + (tiles ? " 16x16" : " 1x16") +
                           (mse ? " mse" : " mae") + " bound " + std::to_string(bound));
          ops::NVFP4Cast cast;
          cast.tiles_2d = tiles;
          cast.four_over_six = true;
          cast.squared_error = mse;
          cast.e4m3_max = bound;
          const Nvfp4 q = cast_nvfp4(r, x, cast);
          for (DType out : {kF32, kBF16}) {
            r.bits("dequantized to " + name(out),
                   ops::dequantize_nvfp4(q.data, q.scales, q.amax, x.rows(), x.cols(), out, bound));
          }
        }
      }
    }
  }
}

void quartet2_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 128}, Shape{48, 384}, Shape{2, 8, 256}}) {
    auto s = r.scope(shape_str(shape));
    const Tensor x = r.in(block_input(shape, r.dtype(), 84));
    r.bits("rht128", ops::rht128(x, 9, 512));
    r.bits("rht128 inverse", ops::rht128(x, 9, 512, true));
    const Tensor v = ops::rht128(x, 9, 512).reshape({x.rows(), x.cols()});
    Nvfp4 q = nvfp4_out(r, x.rows(), x.cols());
    ops::quantize_nvfp4_eden(v, 9, 640, q.data, q.scales, q.amax);
    r.bits("eden decode scale", q.amax);
    r.bits("eden scales", q.scales);
    r.bits("eden data", q.data);
  }
}

void expand_nvfp4_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 272}, Shape{160, 1040}}) {
    for (bool tiles : {false, true}) {
      const int64_t rows = shape[0], cols = shape[1];
      ops::NVFP4Cast cast;
      cast.tiles_2d = tiles;
      Nvfp4 q{Tensor::empty(nvfp4_data_shape(rows, cols), DType::kU8),
              Tensor::empty(nvfp4_scale_shape(rows, cols), kE4M3), Tensor::empty({1}, kF32)};
      ops::quantize_nvfp4(block_input(shape, kF32, 82), cast, q.data, q.scales, q.amax);
      for (DType out : {kF32, kBF16}) {
        auto s = r.scope(shape_str(shape) + (tiles ? " 16x16" : " 1x16") + " to " + name(out));
        r.bits("expand", ops::expand_nvfp4(r.in(q.data), r.in(q.scales), rows, cols, out));
        r.bits("dequantize",
               ops::dequantize_nvfp4(r.in(q.data), r.in(q.scales), r.in(q.amax), rows, cols, out));
      }
    }
  }
}

void transpose_nvfp4_tiles_case(OpRun& r) {
  for (const Shape& shape : {Shape{16, 16}, Shape{48, 32}, Shape{32, 1040}}) {
    auto s = r.scope(shape_str(shape));
    const int64_t rows = shape[0], cols = shape[1];
    ops::NVFP4Cast cast;
    cast.tiles_2d = true;
    Nvfp4 q{Tensor::empty(nvfp4_data_shape(rows, cols), DType::kU8),
            Tensor::empty(nvfp4_scale_shape(rows, cols), kE4M3), Tensor::empty({1}, kF32)};
    ops::quantize_nvfp4(block_input(shape, kF32, 83), cast, q.data, q.scales, q.amax);
    Nvfp4 t = nvfp4_out(r, cols, rows);
    ops::detail::backend_for(r.device())
        .transpose_nvfp4_tiles(r.in(q.data), r.in(q.scales), rows, cols, t.data, t.scales);
    r.bits("data", t.data);
    r.bits("scales", t.scales);
  }
}

// The quantizer of each role (stochastic rounding from a host stream, the transform on the
// column-wise copy, 16x16 weight tiles), its dequantization, and a forward GEMM of two row-wise
// operands (the expanded values are exact: only the order of the f32 sums differs).
void nvfp4_quantizer_case(OpRun& r) {
  const Tensor a = random_tensor({64, 96}, kF32, 84, 2.f),
               b = random_tensor({48, 96}, kF32, 85, 2.f);
  for (NVFP4Role role : {NVFP4Role::kActivation, NVFP4Role::kWeight, NVFP4Role::kGradient}) {
    auto s = r.scope("role " + std::to_string(static_cast<int>(role)));
    const bool sr = role == NVFP4Role::kGradient;
    Tensor rng;
    if (sr) rng = integers({99, 5}, {2}, DType::kI64);
    const NVFP4Quantizer q(role, true, true, sr, rng);
    auto qa = q.quantize(r.in(a), Usage::kBoth, Ownership::kOwned, AmaxRecording::kSkip);
    record(r, "a", *qa);
    r.bits("a dequantized", ops::dequantize(*qa, kF32));
    auto qb = q.quantize(r.in(b), Usage::kRowwise, Ownership::kOwned, AmaxRecording::kSkip);
    record(r, "b", *qb);
    std::vector<double> mag;
    if (!r.on_cpu()) {
      mag = gemm_magnitude(ops::dequantize(*qa, kF32), Transpose::kNo, ops::dequantize(*qb, kF32),
                           Transpose::kYes);
    }
    r.bounded("fprop", ops::fp8_gemm(*qa, *qb, ops::GemmLayout::kFprop, kF32), std::move(mag),
              test::gemm_accumulation_bound(false, 96));
  }
}

// ===================================== GEMM =====================================

Shape stored(int64_t rows, int64_t cols, Transpose t) {
  return t == Transpose::kYes ? Shape{cols, rows} : Shape{rows, cols};
}
const char* letter(Transpose t) { return t == Transpose::kYes ? "T" : "N"; }

struct Problem {
  int64_t m, n, k;
  std::string str() const {
    return "M=" + octet::str(m) + " N=" + octet::str(n) + " K=" + octet::str(k);
  }
};

// f32 and bf16 operands: every transpose, a poisoned output (every element must be written),
// alpha and a bias, accumulation; bf16 also into a bf16 output and from a 3-D operand.
void gemm_case(OpRun& r) {
  const DType d = r.dtype();
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      for (const Problem& p : {Problem{37, 53, 71}, Problem{128, 96, 768}, Problem{1, 1000, 64}}) {
        auto s = r.scope(std::string(letter(ta)) + letter(tb) + " " + p.str());
        const Tensor a = random_tensor(stored(p.m, p.k, ta), d, 11);
        const Tensor b = random_tensor(stored(p.k, p.n, tb), d, 12);
        const Tensor bias = random_tensor({p.n}, d, 13);
        const Tensor ad = r.in(a), bd = r.in(b), bias_d = r.in(bias);
        const double bound = test::gemm_accumulation_bound(false, p.k);
        const bool mags = !r.on_cpu();
        Tensor out = r.poisoned({p.m, p.n}, kF32);
        ops::gemm(ad, ta, bd, tb, out);
        r.bounded("plain", out, mags ? gemm_magnitude(a, ta, b, tb) : std::vector<double>{}, bound);
        ops::GemmOptions o;
        o.alpha = 0.5f;
        o.bias = &bias_d;
        Tensor y = ops::gemm(ad, ta, bd, tb, kF32, o);
        std::vector<double> mag;
        if (mags) {
          mag = gemm_magnitude(a, ta, b, tb, 0.5);
          add_row_terms(mag, bias);
        }
        r.bounded("alpha + bias", y, mag, bound);
        o.accumulate = Accumulate::kYes;
        o.bias = nullptr;
        const uint64_t version = y.version();
        ops::gemm(ad, ta, bd, tb, y, o);
        r.expect("accumulating bumps the version", y.version() > version);
        for (size_t i = 0; i < mag.size(); ++i) mag[i] *= 2;  // the same terms again
        r.bounded("accumulated", y, mag, bound);
      }
    }
  }
  if (d != kBF16) return;
  for (const Problem& p : {Problem{24, 40, 64}, Problem{256, 384, 512}}) {
    for (DType out : {kF32, kBF16}) {
      auto s = r.scope(p.str() + " into " + name(out) + ", bf16 bias, accumulate");
      const Tensor a = random_tensor({p.m, p.k}, kBF16, 31),
                   b = random_tensor({p.n, p.k}, kBF16, 32);
      const Tensor bias = random_tensor({p.n}, kBF16, 33), old = random_tensor({p.m, p.n}, out, 34);
      const Tensor bias_d = r.in(bias);
      ops::GemmOptions o;
      o.bias = &bias_d;
      o.accumulate = Accumulate::kYes;
      Tensor y = r.in(old);
      ops::gemm(r.in(a), Transpose::kNo, r.in(b), Transpose::kYes, y, o);
      std::vector<double> mag;
      if (!r.on_cpu()) {
        mag = gemm_magnitude(a, Transpose::kNo, b, Transpose::kYes);
        add_row_terms(mag, bias);
        add_terms(mag, old);
      }
      r.bounded("y", y, std::move(mag), test::gemm_accumulation_bound(false, p.k));
    }
  }
  // A 3-D operand folds its leading dimensions into rows.
  const Tensor x = random_tensor({2, 8, 32}, kBF16, 35), w = random_tensor({24, 32}, kBF16, 36);
  r.bounded(
      "3-D operand", ops::gemm(r.in(x), Transpose::kNo, r.in(w), Transpose::kYes, kBF16),
      r.on_cpu() ? std::vector<double>{} : gemm_magnitude(x, Transpose::kNo, w, Transpose::kYes),
      test::gemm_accumulation_bound(false, 32));
}

// FP8 operands: codes with a scale (e4m3 x e4m3 and e4m3 x e5m2 reach cuBLASLt's FP8 kernels;
// e5m2 x e5m2 goes through bf16), on the CPU.
struct Fp8Operand {
  Tensor codes, scale_inv;
  double scale_inv_value;
};
Fp8Operand fp8_operand(const Shape& shape, DType fp8, float scale, uint64_t seed, float std) {
  Fp8Operand op{Tensor::empty(shape, fp8), Tensor::from_floats({1.f / scale}, {1}), 1.0 / scale};
  ops::quantize_fp8(random_tensor(shape, kF32, seed, std), Tensor::from_floats({scale}, {1}),
                    &op.codes, nullptr, nullptr);
  return op;
}

// Raw FP8 operands in every format mix and transpose, both accumulation modes, f32 and bf16 out.
void gemm_fp8_operands_case(OpRun& r) {
  const Problem p{64, 48, 96};
  const double bound = test::gemm_accumulation_bound(test::fp8_tensor_cores(), p.k);
  for (DType db : {kE4M3, kE5M2}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        // Non-trivial scales: scale_inv must be applied.
        const Fp8Operand a = fp8_operand(stored(p.m, p.k, ta), r.dtype(), 16.f, 21, 3.f);
        const Fp8Operand b = fp8_operand(stored(p.k, p.n, tb), db, 2048.f, 22, 0.05f);
        const Tensor bias = random_tensor({p.n}, kF32, 23);
        const Tensor ia = r.in(a.scale_inv), ib = r.in(b.scale_inv), bias_d = r.in(bias);
        std::vector<double> mag;
        if (!r.on_cpu()) {
          mag = gemm_magnitude(a.codes, ta, b.codes, tb, a.scale_inv_value * b.scale_inv_value);
          add_row_terms(mag, bias);
        }
        for (ops::FP8Accumulation acc :
             {ops::FP8Accumulation::kSplit, ops::FP8Accumulation::kFast}) {
          for (DType out : {kF32, kBF16}) {
            ops::GemmOptions o;
            o.a_scale_inv = &ia;
            o.b_scale_inv = &ib;
            o.bias = &bias_d;
            o.fp8_accumulation = acc;
            r.bounded("x " + name(db) + " " + letter(ta) + letter(tb) +
                          (acc == ops::FP8Accumulation::kFast ? " fast" : " split") + " into " +
                          name(out),
                      ops::gemm(r.in(a.codes), ta, r.in(b.codes), tb, out, o), mag, bound);
          }
        }
      }
    }
  }
}

// One GEMM out = epilogue(a (M, K) . b (N, K)^T [+ bias]) of the operand kind r.dtype() (FP8:
// e4m3 meets e4m3 and e5m2, e5m2 meets e5m2), run on r's device.
struct EpilogueGemm {
  std::string name;
  Tensor a, b, a_scale_inv, b_scale_inv;  // on the CPU
  double scale_product = 1;
  Tensor bias;
  std::vector<double> mag() const {
    std::vector<double> m = gemm_magnitude(a, Transpose::kNo, b, Transpose::kYes, scale_product);
    if (bias.defined()) add_row_terms(m, bias);
    return m;
  }
};
std::vector<EpilogueGemm> epilogue_gemms(DType kind, const Problem& p, uint64_t seed) {
  std::vector<EpilogueGemm> out;
  if (!is_fp8(kind)) {
    EpilogueGemm g;
    g.name = name(kind);
    g.a = random_tensor({p.m, p.k}, kind, seed, 2.f);
    g.b = random_tensor({p.n, p.k}, kind, seed + 1, 0.5f);
    out.push_back(g);
    return out;
  }
  for (DType b_kind : {kE4M3, kE5M2}) {
    if (kind == kE5M2 && b_kind == kE4M3) continue;
    const Fp8Operand a = fp8_operand({p.m, p.k}, kind, 64.f, seed, 2.f);
    const Fp8Operand b = fp8_operand({p.n, p.k}, b_kind, 256.f, seed + 1, 0.5f);
    EpilogueGemm g;
    g.name = name(kind) + " x " + name(b_kind);
    g.a = a.codes;
    g.b = b.codes;
    g.a_scale_inv = a.scale_inv;
    g.b_scale_inv = b.scale_inv;
    g.scale_product = a.scale_inv_value * b.scale_inv_value;
    out.push_back(g);
  }
  return out;
}
Tensor run_epilogue_gemm(OpRun& r, const EpilogueGemm& g, DType out, ops::Epilogue epilogue,
                         const Tensor& out_scale, Tensor* amax) {
  const Tensor ia = r.in(g.a_scale_inv), ib = r.in(g.b_scale_inv), bias = r.in(g.bias);
  ops::GemmOptions o;
  if (ia.defined()) {
    o.a_scale_inv = &ia;
    o.b_scale_inv = &ib;
  }
  if (bias.defined()) o.bias = &bias;
  o.epilogue = epilogue;
  if (is_fp8(out)) {
    o.out_scale = &out_scale;
    o.out_amax = amax;
  }
  return ops::gemm(r.in(g.a), Transpose::kNo, r.in(g.b), Transpose::kYes, out, o);
}

// 64 x 96 x 128 meets cuBLASLt's FP8 alignment rules; 37 x 53 x 71 does not (FP8 falls back).
const Problem kEpilogueProblems[] = {{64, 96, 128}, {37, 53, 71}};
// No bias, a bf16 bias (cuBLASLt's epilogue takes it with FP8 operands), an f32 one.
const std::optional<DType> kBiasKinds[] = {std::nullopt, kBF16, kF32};

void gemm_gelu_case(OpRun& r) {
  for (const Problem& p : kEpilogueProblems) {
    for (EpilogueGemm& g : epilogue_gemms(r.dtype(), p, 101)) {
      for (std::optional<DType> bias : kBiasKinds) {
        g.bias = bias ? random_tensor({p.n}, *bias, 103) : Tensor();
        const std::vector<double> mag = r.on_cpu() ? std::vector<double>{} : g.mag();
        const double bound =
            test::kGeluLipschitz *
            test::gemm_accumulation_bound(is_fp8(r.dtype()) && test::fp8_tensor_cores(), p.k);
        for (DType out : {kF32, kBF16}) {
          r.bounded(g.name + " " + p.str() + " bias " + (bias ? name(*bias) : "none") + " into " +
                        name(out),
                    run_epilogue_gemm(r, g, out, ops::Epilogue::kGelu, Tensor(), nullptr), mag,
                    bound);
        }
      }
    }
  }
}

// FP8 outputs (cuBLASLt's own D, or the cast of a staged result) and their amax: the f32 values
// they are cast from differ by the accumulation (through the GELU's slope), so a code may lie a
// step from the CPU's.
void gemm_fp8_output_case(OpRun& r) {
  for (const Problem& p : kEpilogueProblems) {
    for (EpilogueGemm& g : epilogue_gemms(r.dtype(), p, 111)) {
      for (std::optional<DType> bias : kBiasKinds) {
        g.bias = bias ? random_tensor({p.n}, *bias, 113) : Tensor();
        const std::vector<double> mag = r.on_cpu() ? std::vector<double>{} : g.mag();
        const double max_mag = mag.empty() ? 0 : *std::max_element(mag.begin(), mag.end());
        for (ops::Epilogue epilogue : {ops::Epilogue::kNone, ops::Epilogue::kGelu}) {
          const double bound =
              (epilogue == ops::Epilogue::kGelu ? test::kGeluLipschitz : 1.0) *
              test::gemm_accumulation_bound(is_fp8(r.dtype()) && test::fp8_tensor_cores(), p.k);
          for (DType out : {kE4M3, kE5M2}) {
            auto s =
                r.scope(g.name + " " + p.str() + " bias " + (bias ? name(*bias) : "none") +
                        (epilogue == ops::Epilogue::kGelu ? " gelu" : "") + " into " + name(out));
            // Products reach ~4 sqrt(K): these scales saturate the largest ones (a cast that
            // overflowed to NaN fails).
            const float scale = out == kE4M3 ? 16.f : 2048.f;
            Tensor amax = r.scalar(0.25f);  // max-accumulated: below the result
            const Tensor y = run_epilogue_gemm(r, g, out, epilogue, r.scalar(scale), &amax);
            r.bounded("out", y, mag, bound, scale);
            r.bounded("amax", amax, {max_mag}, bound);
            r.expect("amax rose", test::on_cpu(amax).item() > 0.25f);
          }
        }
      }
    }
  }
  // cuBLASLt sets its amax; octet max-accumulates: the FP8 kernels' own D (e4m3 x e4m3 with a
  // bf16 bias) and the cast of a staged result (e5m2 x e5m2) keep a larger start.
  EpilogueGemm g = epilogue_gemms(r.dtype(), {64, 96, 128}, 121).front();
  g.bias = random_tensor({96}, kBF16, 123);
  Tensor amax = r.scalar(1e6f);
  const Tensor y = run_epilogue_gemm(r, g, kE4M3, ops::Epilogue::kNone, r.scalar(16.f), &amax);
  r.bounded("kept amax: out", y, r.on_cpu() ? std::vector<double>{} : g.mag(),
            test::gemm_accumulation_bound(is_fp8(r.dtype()) && test::fp8_tensor_cores(), 128), 16);
  r.bits("kept amax", amax);
  r.expect("amax kept 1e6", test::on_cpu(amax).item() == 1e6f);
}

// The FP8 GEMM layouts (fprop, dgrad, wgrad) on quantized operands of each recipe, into
// r.dtype(); the quantizers' state on the run's device.
struct Mode {
  const char* name;
  std::shared_ptr<Quantizer> (*make)(OpRun& r, FP8Direction d);
};
const Mode kModes[] = {
    {"delayed e4m3",
     [](OpRun& r, FP8Direction d) -> std::shared_ptr<Quantizer> {
       return delayed(r, d == FP8Direction::kForward ? 48.f : 96.f, kE4M3, {0.f});
     }},
    {"delayed hybrid",
     [](OpRun& r, FP8Direction d) -> std::shared_ptr<Quantizer> {
       return d == FP8Direction::kForward ? delayed(r, 40.f, kE4M3, {0.f})
                                          : delayed(r, 4096.f, kE5M2, {0.f});
     }},
    {"current hybrid",
     [](OpRun&, FP8Direction d) {
       return make_quantizer(Recipe::current(FP8Format::kHybrid), nullptr, {d, 0});
     }},
    {"mxfp8",
     [](OpRun&, FP8Direction) -> std::shared_ptr<Quantizer> {
       return std::make_shared<MXFP8Quantizer>(kE4M3);
     }},
};

void fp8_gemm_case(OpRun& r) {
  const DType out = r.dtype();
  // X (2, 64, 128): M = 128 tokens, K = 128; W (96, 128); dY (2, 64, 96): multiples of 32, so
  // MXFP8 operands qualify too.
  const int64_t m = 128, k = 128, n = 96;
  const double bound_k = test::gemm_accumulation_bound(test::fp8_tensor_cores(), k);
  for (const Mode& mode : kModes) {
    auto s = r.scope(mode.name);
    auto quantize = [&](const Tensor& t, FP8Direction d) {
      return mode.make(r, d)->quantize(r.in(t), Usage::kBoth, Ownership::kInternal,
                                       AmaxRecording::kRecord);
    };
    auto qx = quantize(random_tensor({2, 64, k}, kF32, 71, 2.f), FP8Direction::kForward);
    auto qw = quantize(random_tensor({n, k}, kBF16, 72, 0.5f), FP8Direction::kForward);
    auto qdy = quantize(random_tensor({2, 64, n}, kF32, 73, 0.01f), FP8Direction::kBackward);
    record(r, "x", *qx);
    record(r, "w", *qw);
    record(r, "dy", *qdy);
    const bool mags = !r.on_cpu();
    const Tensor xv = mags ? ops::dequantize(*qx, kF32).reshape({m, k}) : Tensor();
    const Tensor wv = mags ? ops::dequantize(*qw, kF32) : Tensor();
    const Tensor dyv = mags ? ops::dequantize(*qdy, kF32).reshape({m, n}) : Tensor();
    // fprop: Y = X W^T + bias.
    const Tensor bias = random_tensor({n}, kF32, 74), bias_d = r.in(bias);
    ops::FP8GemmOptions o;
    o.bias = &bias_d;
    std::vector<double> mag;
    if (mags) {
      mag = gemm_magnitude(xv, Transpose::kNo, wv, Transpose::kYes);
      add_row_terms(mag, bias);
    }
    r.bounded("fprop", ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, out, o), mag, bound_k);
    // dgrad: dX = dY W.
    r.bounded(
        "dgrad", ops::fp8_gemm(*qdy, *qw, ops::GemmLayout::kDgrad, out),
        mags ? gemm_magnitude(dyv, Transpose::kNo, wv, Transpose::kNo) : std::vector<double>{},
        test::gemm_accumulation_bound(test::fp8_tensor_cores(), n));
    // wgrad: dW = dY^T X, accumulated onto what the output holds.
    const Tensor old = random_tensor({n, k}, out, 75);
    Tensor dw = r.in(old);
    ops::FP8GemmOptions acc;
    acc.accumulate = Accumulate::kYes;
    ops::fp8_gemm(*qdy, *qx, ops::GemmLayout::kWgrad, dw, acc);
    mag.clear();
    if (mags) {
      mag = gemm_magnitude(dyv, Transpose::kYes, xv, Transpose::kNo);
      add_terms(mag, old);
    }
    r.bounded("wgrad", dw, mag, test::gemm_accumulation_bound(test::fp8_tensor_cores(), m));
  }
  // A layer-sized forward into bf16: 512 tokens, K = 1024, N = 768, per-tensor hybrid and MXFP8.
  if (out != kBF16) return;
  const Tensor x = random_tensor({512, 1024}, kBF16, 81),
               w = random_tensor({768, 1024}, kBF16, 82, 0.02f);
  for (const Mode& mode : {kModes[1], kModes[3]}) {
    auto q = mode.make(r, FP8Direction::kForward);
    auto qx = q->quantize(r.in(x), Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    auto qw = q->quantize(r.in(w), Usage::kRowwise, Ownership::kInternal, AmaxRecording::kSkip);
    r.bounded(std::string(mode.name) + " 512x768x1024 fprop",
              ops::fp8_gemm(*qx, *qw, ops::GemmLayout::kFprop, out),
              r.on_cpu() ? std::vector<double>{}
                         : gemm_magnitude(ops::dequantize(*qx, kF32), Transpose::kNo,
                                          ops::dequantize(*qw, kF32), Transpose::kYes),
              test::gemm_accumulation_bound(test::fp8_tensor_cores(), 1024));
  }
}

// ===================================== nn =====================================

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
    return "B=" + octet::str(B) + " T=" + octet::str(T) + " H=" + octet::str(H) +
           " G=" + octet::str(G) + " D=" + octet::str(D);
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

// ===================================== optimizers =====================================

ops::AdamWHyper hyper(int64_t step) {
  ops::AdamWHyper h;
  h.lr = 0.01f;
  h.beta1 = 0.8f;
  h.beta2 = 0.95f;
  h.eps = 1e-6f;
  h.weight_decay = 0.1f;
  h.step = step;
  return h;
}

// Three steps from zero moments, gradients of the case's dtype.
void adamw_case(OpRun& r) {
  for (const Shape& shape : {Shape{37, 29}, Shape{(1 << 20) + 5}}) {
    auto s = r.scope(shape_str(shape));
    Tensor w = r.random(shape, 1), m = r.in(Tensor::zeros(shape, kF32)),
           v = r.in(Tensor::zeros(shape, kF32));
    uint64_t version = w.version();
    for (int64_t step = 1; step <= 3; ++step) {
      ops::adamw_step(w, r.random(shape, 10 + static_cast<uint64_t>(step), 1.f, r.dtype()), m, v,
                      hyper(step));
    }
    r.expect("the version moved", w.version() > version);
    r.close("master", w);
    r.close("m", m);
    r.close("v", v);
  }
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor w0 = random_tensor(shape, kF32, 52), g = random_tensor(shape, r.dtype(), 53);
    const Tensor m0 = random_tensor(shape, kF32, 54, 0.1f), v0 = ops::mul(m0, m0);
    Tensor w = r.in(w0), m = r.in(m0), v = r.in(v0);
    Tensor wm = r.misaligned(w0), mm = r.misaligned(m0), vm = r.misaligned(v0);
    ops::adamw_step(w, r.in(g), m, v, hyper(3));
    ops::adamw_step(wm, r.misaligned(g), mm, vm, hyper(3));
    r.close("master", w);
    r.same("master, misaligned", wm, w);
    r.same("m, misaligned", mm, m);
    r.same("v, misaligned", vm, v);
  }
}

// The multi-tensor step (one launch on a GPU): sizes from one element to more than a launch's
// worth of blocks, f32 and bf16 gradients.
void adamw_multi_tensor_case(OpRun& r) {
  const std::vector<Shape> shapes = {{1}, {31}, {64, 48}, {70001}, {3, 1 << 19}, {257}};
  std::vector<Tensor> w, m, v;
  for (size_t i = 0; i < shapes.size(); ++i) {
    w.push_back(r.random(shapes[i], 100 + i));
    const Tensor m0 = random_tensor(shapes[i], kF32, 200 + i, 0.1f);
    m.push_back(r.in(m0));
    v.push_back(r.in(ops::mul(m0, m0)));  // second moments are non-negative
  }
  for (int64_t step = 4; step <= 5; ++step) {
    std::vector<Tensor> grads;
    std::vector<ops::AdamWTensors> list;
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads.push_back(r.random(shapes[i], 300 + 10 * step + i, 1.f, i % 2 == 0 ? kF32 : kBF16));
    }
    for (size_t i = 0; i < shapes.size(); ++i) list.push_back({&w[i], &grads[i], &m[i], &v[i]});
    ops::adamw_step(list, hyper(step));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto s = r.scope(shape_str(shapes[i]));
    r.close("master", w[i]);
    r.close("m", m[i]);
    r.close("v", v[i]);
  }
}

void sgd_case(OpRun& r) {
  Tensor w = r.random({100003}, 2), buf = r.in(Tensor::zeros({100003}, kF32));
  for (int64_t step = 1; step <= 3; ++step) {
    ops::sgd_step(w, r.random({100003}, 20 + static_cast<uint64_t>(step), 1.f, r.dtype()), buf,
                  0.1f, 0.9f, 0.01f, step);
  }
  r.close("master", w);
  r.close("momentum", buf);
  Tensor none, w2 = r.in(Tensor::full({4}, 1.f, kF32));  // momentum 0: no buffer at all
  ops::sgd_step(w2, r.in(Tensor::full({4}, 2.f, r.dtype())), none, 0.5f, 0.f, 0.f, 1);
  r.same("momentum 0: 1 - 0.5 * 2", w2, Tensor::zeros({4}, kF32));
  for (const Shape& shape : kVectorShapes) {
    auto s = r.scope("vector paths " + shape_str(shape));
    const Tensor w0 = random_tensor(shape, kF32, 52), g = random_tensor(shape, r.dtype(), 53);
    const Tensor b0 = random_tensor(shape, kF32, 54, 0.1f);
    Tensor wa = r.in(w0), ba = r.in(b0), wm = r.misaligned(w0), bm = r.misaligned(b0);
    ops::sgd_step(wa, r.in(g), ba, 0.1f, 0.9f, 0.01f, 2);
    ops::sgd_step(wm, r.misaligned(g), bm, 0.1f, 0.9f, 0.01f, 2);
    r.close("master", wa);
    r.same("master, misaligned", wm, wa);
    r.same("momentum, misaligned", bm, ba);
  }
}

// A step decided on the device: the gate of finite values and norms, the step count it
// advances, and updates that a closed gate leaves as they were.
void device_step_case(OpRun& r) {
  for (float value : {0.f, kNaN, kInf}) {
    const Tensor values = r.in(Tensor::from_floats({1.f, value, -2.f}, {3}));
    r.bits("gate of " + std::to_string(value), ops::finite_gate(values, nullptr));
    for (double norm : {2.5, static_cast<double>(kInf), static_cast<double>(kNaN)}) {
      Tensor bits = Tensor::empty({1}, DType::kI64);
      std::memcpy(bits.data(), &norm, sizeof norm);
      const Tensor norm_bits = r.in(bits);
      r.bits("gate of " + std::to_string(value) + " and norm " + std::to_string(norm),
             ops::finite_gate(values, &norm_bits));
    }
  }
  for (float open : {0.f, 1.f}) {
    auto s = r.scope(open == 1.f ? "open gate" : "closed gate");
    const Tensor gate = r.scalar(open);
    Tensor steps = r.in(integers({4}, {1}, DType::kI64));
    ops::advance_steps(gate, steps);
    r.bits("steps", steps);
    ops::AdamWHyper h = hyper(1);
    h.device_step = {&gate, &steps};
    Tensor w = r.random({1000}, 1), m = r.in(Tensor::zeros({1000}, kF32)),
           v = r.in(Tensor::zeros({1000}, kF32));
    ops::adamw_step(w, r.random({1000}, 2), m, v, h);
    r.close("adamw master", w);
    r.close("adamw v", v);
    Tensor ws = r.random({1000}, 3), buf = r.in(Tensor::zeros({1000}, kF32));
    ops::sgd_step(ws, r.random({1000}, 4), buf, 0.1f, 0.9f, 0.f, 1, {&gate, &steps});
    r.close("sgd master", ws);
  }
}

// Gradient clipping: the f64 norm and its parts (as data parallelism holds them) within the
// rounding of the summation order, and the gradients clipped by the same f32 factor (the same
// f32 but in the rarest rounding cases): the CPU's bits.
void clip_grad_norm_case(OpRun& r) {
  for (double max_norm : {1.0, 0.0, 1e9}) {
    auto s = r.scope("max_norm " + std::to_string(max_norm));
    Tensor a = r.random({300, 7}, 61, 2.f), b = r.random({5000}, 62, 1.f, kBF16);
    r.value("norm", ops::read_f64(ops::clip_grad_norm_({&a, &b}, max_norm)), OpClass::kF64Sum);
    r.bits("f32 gradient", a);
    r.bits("bf16 gradient", b);
    Tensor pa = r.random({300, 7}, 61, 2.f), pb = r.random({5000}, 62, 1.f, kBF16);
    Tensor parts = r.empty({2}, DType::kI64);
    parts.slice(0, 1).copy_bytes_from(ops::sum_of_squares_part({&pa}, r.device()));
    parts.slice(1, 2).copy_bytes_from(ops::sum_of_squares_part({&pb}, r.device()));
    r.value("part 0", ops::read_f64(parts.slice(0, 1)), OpClass::kF64Sum);
    r.value("part 1", ops::read_f64(parts.slice(1, 2)), OpClass::kF64Sum);
    r.value("norm from parts",
            ops::read_f64(ops::clip_grad_norm_from_parts_({&pa, &pb}, parts, max_norm)),
            OpClass::kF64Sum);
    r.bits("f32 gradient, from parts", pa);
    r.bits("bf16 gradient, from parts", pb);
  }
}

// ===================================== scaling state =====================================

// The delayed-scaling update of every slot of several metas (one launch on a GPU).
void update_fp8_metas_case(OpRun& r) {
  const Recipe recipe = Recipe::delayed(FP8Format::kHybrid, 1, 8, AmaxComputeAlgo::kMax);
  FP8Meta a(recipe, 2), b(recipe, 1);
  uint64_t seed = 50;
  for (FP8Meta* meta : {&a, &b}) {
    for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
      std::vector<FP8Slot>& slots = meta->slots(d);
      for (size_t i = 0; i < slots.size(); ++i) {
        std::vector<float> h = random_tensor({8}, kF32, seed++, 10.f).to_floats();
        for (float& e : h) e = std::fabs(e);
        if (i == 1) h[0] = 0.f;  // a slot nothing was cast through: it must not move
        if (i == 2) h[3] = kNaN;
        std::copy(h.begin(), h.end(), slots[i].amax_history.data_as<float>());
        for (Tensor* t : {&slots[i].scale, &slots[i].scale_inv, &slots[i].amax_history}) {
          t->move_storage_to(r.device());
        }
      }
    }
  }
  for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
    ops::update_fp8_metas({&a, &b}, d);
    for (FP8Meta* meta : {&a, &b}) {
      auto s = r.scope(std::string(meta == &a ? "meta a" : "meta b") +
                       (d == FP8Direction::kForward ? " forward" : " backward"));
      r.fact("updates", meta->update_count(d));
      for (size_t i = 0; i < meta->slots(d).size(); ++i) {
        const FP8Slot& slot = meta->slots(d)[i];
        r.bits("slot " + std::to_string(i) + " scale", slot.scale);
        r.bits("slot " + std::to_string(i) + " scale_inv", slot.scale_inv);
        r.bits("slot " + std::to_string(i) + " history", slot.amax_history);
      }
    }
  }
}

// Single slots through the backend: runtime's update_fp8_slot rule on every device.
void update_fp8_slots_case(OpRun& r) {
  struct SlotCase {
    const char* what;
    float scale;
    std::vector<float> history;
    float fp8_max;
    int margin;
    AmaxComputeAlgo algo;
  };
  std::vector<float> long_history(1024, 0.f);
  for (size_t i = 0; i < long_history.size(); ++i) {
    long_history[i] = static_cast<float>((i * 37) % 1000) / 7.f;
  }
  long_history[0] = 3.25f;
  long_history[700] = kNaN;
  std::vector<float> zero_newest = long_history;
  zero_newest[0] = 0.f;
  const AmaxComputeAlgo kMax = AmaxComputeAlgo::kMax, kRecent = AmaxComputeAlgo::kMostRecent;
  const SlotCase cases[] = {
      {"newest 0: nothing moves", 3.f, {0.f, 5.f, 7.f}, kE4M3Max, 0, kMax},
      {"newest 0, long history", 2.f, zero_newest, kE4M3Max, 0, kMax},
      {"max over the history", 1.f, {2.f, 9.f, 0.5f, 0.f}, kE4M3Max, 0, kMax},
      {"most recent", 1.f, {2.f, 9.f, 0.5f, 0.f}, kE5M2Max, 0, kRecent},
      {"NaN in the history is ignored", 1.f, long_history, kE4M3Max, 0, kMax},
      {"NaN newest, most recent: the scale stays", 5.f, {kNaN, 1.f}, kE4M3Max, 0, kRecent},
      {"inf amax: the scale stays", 5.f, {kInf, 1.f}, kE4M3Max, 0, kMax},
      {"tiny amax: the scale overflows to FLT_MAX", 1.f, {1e-39f}, kE5M2Max, 0, kMax},
      {"margin 2", 1.f, {3.f, 0.f}, kE4M3Max, 2, kMax},
      {"history of one", 0.5f, {17.f}, kE5M2Max, 1, kRecent},
  };
  std::vector<FP8Slot> slots(std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) {
    slots[i].scale = r.scalar(cases[i].scale);
    slots[i].scale_inv = r.scalar(1.f / cases[i].scale);
    slots[i].amax_history = r.in(
        Tensor::from_floats(cases[i].history, {static_cast<int64_t>(cases[i].history.size())}));
  }
  // Twice: the second update sees the rolled histories (and newest 0 after a roll).
  for (int round = 1; round <= 2; ++round) {
    std::vector<ops::detail::SlotUpdate> updates;
    for (size_t i = 0; i < std::size(cases); ++i) {
      updates.push_back({&slots[i], cases[i].fp8_max, cases[i].margin, cases[i].algo});
    }
    ops::detail::backend_for(r.device()).update_fp8_slots(updates);
    for (size_t i = 0; i < std::size(cases); ++i) {
      auto s = r.scope(std::string(cases[i].what) + ", update " + std::to_string(round));
      r.bits("scale", slots[i].scale);
      r.bits("scale_inv", slots[i].scale_inv);
      r.bits("history", slots[i].amax_history);
    }
    // New amaxes for the second round on a few slots (as a step's casts would write them).
    for (size_t i : {size_t{2}, size_t{3}, size_t{8}}) {
      Tensor newest = slots[i].amax_history.slice(0, 1);
      ops::fill_(newest, 11.5f);
    }
  }
}

// Current scaling's scale from an amax on the device: CurrentScalingQuantizer::scale_for's rule.
void current_scale_case(OpRun& r) {
  const DType fp8 = r.dtype();
  const float amaxes[] = {0.f, kInf, -kInf, kNaN, 1e-39f, 1e-7f, 2.f, 448.f, 3.7f, 1e30f, 57344.f};
  for (Power2Scale p2 : {Power2Scale::kOff, Power2Scale::kOn}) {
    for (float eps : {0.f, 1e-6f}) {
      const CurrentScalingQuantizer q(fp8, p2, eps);
      for (float amax : amaxes) {
        auto s = r.scope(std::string(p2 == Power2Scale::kOn ? "pow2 " : "") + "eps " +
                         std::to_string(eps) + " amax " + std::to_string(amax));
        Tensor scale = r.scalar(-1.f), scale_inv = r.scalar(-1.f);
        ops::detail::backend_for(r.device())
            .current_scale(r.scalar(amax), fp8_max(fp8), eps, p2, scale, scale_inv);
        r.bits("scale", scale);
        r.bits("scale_inv", scale_inv);
        const float want = q.scale_for(amax);
        r.same("scale is scale_for's", scale, Tensor::from_floats({want}, {1}));
        r.same("scale_inv is 1 / scale_for's", scale_inv, Tensor::from_floats({1.f / want}, {1}));
      }
    }
  }
}

void reciprocal_case(OpRun& r) {
  for (float x : {1.f, 3.f, 0.625f, 448.f / 3.7f, FLT_MAX, 1e-38f}) {
    Tensor out = r.scalar(0.f);
    ops::detail::backend_for(r.device()).reciprocal(r.scalar(x), out);
    r.bits(std::to_string(x), out);
    r.same(std::to_string(x) + ": rounded to nearest", out, Tensor::from_floats({1.f / x}, {1}));
  }
}

// ===================================== the table =====================================

const std::vector<DType> kFloats = {kF32, kBF16, kF16};
const std::vector<DType> kCastInputs = {kF32, kBF16};
const std::vector<DType> kFp8 = {kE4M3, kE5M2};

const test::OpCase kCases[] = {
    {"binary", {"binary"}, kFloats, binary_case},
    {"scale", {"scale"}, kFloats, scale_case},
    {"axpy", {"axpy"}, kFloats, axpy_case},
    {"fill", {"fill"}, {kF32, kBF16, kF16, DType::kI32, DType::kI64, DType::kU8}, fill_case},
    {"fill_from", {"fill_from"}, kFloats, fill_from_case},
    {"convert", {"convert"}, kFloats, convert_case},
    {"sum_mean", {"sum", "mean"}, kCastInputs, sum_case},
    {"max_amax", {"max", "amax"}, kFloats, max_amax_case},
    {"sum_rows", {"sum_rows"}, kCastInputs, sum_rows_case},
    {"sum_of_squares", {"sum_of_squares"}, kCastInputs, sum_of_squares_case},
    {"quantize_fp8", {"quantize_fp8"}, kCastInputs, quantize_fp8_case},
    {"transpose_2d",
     {"transpose_2d"},
     {kE4M3, DType::kU8, kBF16, kF16, kF32, DType::kI32, DType::kI64},
     transpose_2d_case},
    {"dequantize_fp8", {"dequantize_fp8"}, kFp8, dequantize_fp8_case},
    {"quantize_mxfp8",
     {"quantize_mxfp8_rowwise", "quantize_mxfp8_columnwise"},
     kCastInputs,
     quantize_mxfp8_case},
    {"dequantize_mxfp8", {"dequantize_mxfp8"}, kFp8, dequantize_mxfp8_case},
    {"delayed_quantizer", {"quantize_fp8"}, kCastInputs, delayed_quantizer_case},
    {"current_quantizer",
     {"amax", "current_scale", "quantize_fp8"},
     kCastInputs,
     current_quantizer_case},
    {"mxfp8_quantizer",
     {"quantize_mxfp8_rowwise", "quantize_mxfp8_columnwise"},
     kCastInputs,
     mxfp8_quantizer_case},
    {"quantized_tensor",
     {"transpose_2d", "dequantize_fp8", "dequantize_mxfp8"},
     kCastInputs,
     quantized_tensor_case},
    {"quantize_blockwise", {"quantize_blockwise"}, kCastInputs, quantize_blockwise_case},
    {"dequantize_blockwise", {"dequantize_blockwise"}, kFp8, dequantize_blockwise_case},
    {"blockwise_quantizer",
     {"quantize_blockwise", "transpose_2d", "transpose_scales", "dequantize_blockwise"},
     kCastInputs,
     blockwise_quantizer_case},
    {"transpose_scales", {"transpose_scales"}, {kF32}, transpose_scales_case},
    {"blockwise_gemm", {"blockwise_gemm"}, kFp8, blockwise_gemm_case},
    {"quantize_rowwise",
     {"quantize_rowwise", "dequantize_rowwise"},
     kCastInputs,
     quantize_rowwise_case},
    {"hadamard16", {"hadamard16"}, kCastInputs, hadamard16_case},
    {"quantize_nvfp4", {"quantize_nvfp4"}, kCastInputs, quantize_nvfp4_case},
    {"nvfp4_4over6", {"quantize_nvfp4", "expand_nvfp4"}, kCastInputs, four_over_six_case},
    {"quartet2", {"rht128", "quantize_nvfp4_eden"}, kCastInputs, quartet2_case},
    {"expand_nvfp4", {"expand_nvfp4"}, {kF32}, expand_nvfp4_case},
    {"transpose_nvfp4_tiles", {"transpose_nvfp4_tiles"}, {kF32}, transpose_nvfp4_tiles_case},
    {"nvfp4_quantizer",
     {"quantize_nvfp4", "hadamard16", "expand_nvfp4", "gemm"},
     {kF32},
     nvfp4_quantizer_case},
    {"gemm", {"gemm"}, kCastInputs, gemm_case},
    {"gemm_fp8_operands", {"gemm"}, kFp8, gemm_fp8_operands_case},
    {"gemm_gelu", {"gemm"}, {kF32, kBF16, kE4M3, kE5M2}, gemm_gelu_case},
    {"gemm_fp8_output", {"gemm"}, {kF32, kBF16, kE4M3, kE5M2}, gemm_fp8_output_case},
    {"fp8_gemm", {"gemm", "quantize_fp8", "quantize_mxfp8_rowwise"}, kCastInputs, fp8_gemm_case},
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
    {"cross_entropy", {"cross_entropy", "cross_entropy_backward"}, kCastInputs, cross_entropy_case},
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
    {"adamw", {"adamw_step"}, kCastInputs, adamw_case},
    {"adamw_multi_tensor", {"adamw_step"}, {kF32}, adamw_multi_tensor_case},
    {"sgd", {"sgd_step"}, kCastInputs, sgd_case},
    {"device_step", {"finite_gate", "advance_steps"}, {kF32}, device_step_case},
    {"clip_grad_norm",
     {"sum_of_squares_part", "clip_grad_norm_from_parts"},
     {kF32},
     clip_grad_norm_case},
    {"update_fp8_metas", {"update_fp8_slots"}, {kF32}, update_fp8_metas_case},
    {"update_fp8_slots", {"update_fp8_slots"}, {kF32}, update_fp8_slots_case},
    {"current_scale", {"current_scale"}, kFp8, current_scale_case},
    {"reciprocal", {"reciprocal"}, {kF32}, reciprocal_case},
};

// Backend ops with no case, and why.
const std::pair<const char*, const char*> kNotInTheTable[] = {
    {"release_workspace", "frees the GEMM's cached workspace: nothing to compare"},
};

// ===================================== the harness =====================================

struct Instance {
  Device device;
  size_t index;
  DType dtype;
};

std::vector<Instance> instances() {
  std::vector<Instance> out;
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    for (size_t i = 0; i < std::size(kCases); ++i) {
      for (DType d : kCases[i].dtypes) out.push_back({device, i, d});
    }
  }
  return out;
}

std::string instance_name(const ::testing::TestParamInfo<Instance>& info) {
  const Instance& p = info.param;
  return std::string(kCases[p.index].name) + "_" + name(p.dtype) + "_" +
         (p.device.is_cpu() ? "cpu" : "cuda" + std::to_string(p.device.index));
}

class OpTable : public ::testing::TestWithParam<Instance> {};

// cuda0: the device's run against the CPU's. cpu: two CPU runs, the same bits.
TEST_P(OpTable, MatchesTheCpu) {
  const Instance& p = GetParam();
  if (p.device.is_cuda() && cuda_device_count() == 0) {
    GTEST_SKIP() << "skipped: " << cuda_status();
  }
  const test::OpCase& c = kCases[p.index];
  std::string ops;
  for (const char* op : c.ops) ops += std::string(ops.empty() ? "" : ", ") + op;
  const std::string where = std::string("case ") + c.name + " (" + ops + ") [" + name(p.dtype) +
                            "] on " + (p.device.is_cpu() ? "cpu, run twice" : "cuda:0 vs cpu");
  OpRun want(Device::cpu(), p.dtype);
  c.run(want);
  test::expect_self_consistent(want, where + ": the cpu run");
  OpRun got(p.device, p.dtype);
  c.run(got);
  if (p.device.is_cpu()) {
    test::expect_identical(got, want, where);
  } else {
    test::expect_self_consistent(got, where + ": the device run");
    test::expect_match(got, want, where);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, OpTable, ::testing::ValuesIn(instances()), instance_name);

#define OCTET_OP_NAME_(ret, op, params) #op,

// Every op of the backend interface has a case, or a reason why not; every case names real ops.
TEST(OpTableCoverage, EveryBackendOpHasACaseOrAReason) {
  const std::vector<std::string> backend_ops = {OCTET_BACKEND_OPS(OCTET_OP_NAME_)};
  std::set<std::string> covered;
  for (const test::OpCase& c : kCases) {
    for (const char* op : c.ops) {
      covered.insert(op);
      EXPECT_NE(std::find(backend_ops.begin(), backend_ops.end(), op), backend_ops.end())
          << "case " << c.name << " names " << op << ", which kernels/backend.h does not list";
    }
  }
  for (const auto& [op, why] : kNotInTheTable) covered.insert(op);
  for (const std::string& op : backend_ops) {
    EXPECT_TRUE(covered.count(op)) << op << " has no case in the op table";
  }
}

}  // namespace
}  // namespace octet
