// The op table's elementwise and reduction cases (tests/devices/op_table_test.cpp runs them).
#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "kernels/optim.h"
#include "tests/support/op_table_cases.h"

namespace octet::op_table {
namespace {

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

}  // namespace

std::vector<test::OpCase> elementwise_cases() {
  return {
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
  };
}

}  // namespace octet::op_table
