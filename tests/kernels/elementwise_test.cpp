// Elementwise arithmetic, casts and reductions against f64 loops written out in the test.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "kernels/optim.h"
#include "runtime/float16.h"
#include "runtime/parallel.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

TEST(Elementwise, BinaryOpsSameShapeAndRowBroadcast) {
  const Tensor a = test::random_tensor({3, 50, 70}, DType::kF32, 1);
  const Tensor b = test::random_tensor({3, 50, 70}, DType::kF32, 2);
  const Tensor row = test::random_tensor({70}, DType::kF32, 3);
  const std::vector<double> av = test::to_doubles(a), bv = test::to_doubles(b),
                            rv = test::to_doubles(row);
  struct Op {
    Tensor (*fn)(const Tensor&, const Tensor&);
    double (*ref)(double, double);
  };
  const Op ops_list[] = {{ops::add, [](double x, double y) { return x + y; }},
                         {ops::sub, [](double x, double y) { return x - y; }},
                         {ops::mul, [](double x, double y) { return x * y; }},
                         {ops::div, [](double x, double y) { return x / y; }}};
  for (const Op& op : ops_list) {
    std::vector<double> same(av.size()), bcast(av.size());
    for (size_t i = 0; i < av.size(); ++i) {
      same[i] = op.ref(av[i], bv[i]);
      bcast[i] = op.ref(av[i], rv[i % 70]);
    }
    EXPECT_TRUE(test::all_close(op.fn(a, b).to_floats(), same, {0, 1e-7}));
    EXPECT_TRUE(test::all_close(op.fn(a, row).to_floats(), bcast, {0, 1e-7}));
  }
}

TEST(Elementwise, Bf16ArithmeticRoundsOnceFromF32) {
  const Tensor a = test::random_tensor({33, 65}, DType::kBF16, 4);
  const Tensor b = test::random_tensor({65}, DType::kBF16, 5);
  const std::vector<float> av = a.to_floats(), bv = b.to_floats(), got = ops::mul(a, b).to_floats();
  for (size_t i = 0; i < av.size(); ++i) {
    ASSERT_EQ(got[i], from_bf16(to_bf16(av[i] * bv[i % 65]))) << i;
  }
}

TEST(Elementwise, InPlaceOpsBumpVersionAndCompute) {
  Tensor d = test::random_tensor({1000}, DType::kF32, 6);
  const Tensor s = test::random_tensor({1000}, DType::kF32, 7);
  std::vector<double> want = test::to_doubles(d);
  const std::vector<double> sv = test::to_doubles(s);
  uint64_t v0 = d.version();
  ops::add_(d, s, -0.25f);
  EXPECT_GT(d.version(), v0);
  for (size_t i = 0; i < want.size(); ++i) want[i] += -0.25 * sv[i];
  EXPECT_TRUE(test::all_close(d.to_floats(), want, {1e-6, 1e-6}));
  v0 = d.version();
  ops::scale_(d, 3.f);
  EXPECT_GT(d.version(), v0);
  for (double& w : want) w *= 3;
  EXPECT_TRUE(test::all_close(d.to_floats(), want, {1e-6, 1e-6}));
  ops::fill_(d, 1.5f);
  EXPECT_TRUE(test::all_close(d.to_floats(), std::vector<double>(1000, 1.5), {0, 0}));
  EXPECT_THROW(ops::add_(d, Tensor::zeros({999}, DType::kF32)), Error);
}

TEST(Elementwise, FillFromATensorIsFillOfItsValue) {
  // 1 + 2^-9 + 2^-20: bf16 and f16 round it (to 1 and to 1 + 2^-9), f32 keeps it.
  const float v = 1.f + std::ldexp(1.f, -9) + std::ldexp(1.f, -20);
  const Tensor value = Tensor::full({1}, v, DType::kF32);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor got = Tensor::zeros({3, 37}, dtype), want = Tensor::zeros({3, 37}, dtype);
    const uint64_t before = got.version();
    ops::fill_from_(got, value);
    ops::fill_(want, v);
    EXPECT_TRUE(test::same_bits(got, want));
    EXPECT_GT(got.version(), before);
  }
  Tensor dst = Tensor::zeros({4}, DType::kF32);
  EXPECT_NE(test::error_of([&] {
              ops::fill_from_(dst, Tensor::zeros({2}, DType::kF32));
            }).find("fill_from_: value must be a one-element f32 tensor"),
            std::string::npos);
  Tensor ints = Tensor::zeros({4}, DType::kI32);
  EXPECT_NE(test::error_of([&] {
              ops::fill_from_(ints, value);
            }).find("fill_from_: expected an f32, bf16 or f16 tensor"),
            std::string::npos);
}

TEST(Elementwise, CastRoundsToNearestEven) {
  // 1 + 2^-8 is the bf16 tie between 1 and 1 + 2^-7: rounds to even (1).
  const Tensor x = Tensor::from_floats({1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, -2.5f, 65520.f}, {4});
  const std::vector<float> bf = ops::cast(x, DType::kBF16).to_floats();
  EXPECT_EQ(bf[0], 1.f);
  EXPECT_EQ(bf[1], 1.f + 0x1p-6f);
  EXPECT_EQ(bf[2], -2.5f);
  const std::vector<float> h = ops::cast(x, DType::kF16).to_floats();
  EXPECT_TRUE(std::isinf(h[3]));  // 65520 is the f16 overflow tie: rounds to inf
  EXPECT_THROW(ops::cast(x, DType::kE4M3), Error);
}

TEST(Reductions, SumMeanMaxAmaxAgainstF64) {
  const Tensor x = test::random_tensor({257, 129}, DType::kF32, 8);
  const std::vector<double> v = test::to_doubles(x);
  double sum = 0, mx = -1e300, amax = 0;
  for (double e : v) {
    sum += e;
    mx = std::max(mx, e);
    amax = std::max(amax, std::fabs(e));
  }
  EXPECT_NEAR(ops::sum(x).item(), sum, 1e-6 * v.size());
  EXPECT_NEAR(ops::mean(x).item(), sum / v.size(), 1e-6);
  EXPECT_EQ(ops::max(x).item(), static_cast<float>(mx));
  EXPECT_EQ(ops::amax(x).item(), static_cast<float>(amax));
}

TEST(Reductions, AmaxIgnoresNanMaxPropagatesIt) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_floats({1.f, nan, -7.f, 3.f}, {4});
  EXPECT_EQ(ops::amax(x).item(), 7.f);
  EXPECT_TRUE(std::isnan(ops::max(x).item()));
  EXPECT_EQ(ops::amax(Tensor::zeros({0}, DType::kF32)).item(), 0.f);
}

TEST(Reductions, SameResultForOneAndTwoThreads) {
  const Tensor x = test::random_tensor({1 << 18}, DType::kF32, 9);
  const int threads = num_threads();
  set_num_threads(1);
  const float one = ops::sum(x).item();
  set_num_threads(2);
  const float two = ops::sum(x).item();
  set_num_threads(threads);
  EXPECT_EQ(one, two);  // f64 partials: the f32 result does not depend on the split here
}

// The gradient norm's sum of squares in f64 (a 3M-element tensor: 64 fixed chunks), bit for bit
// on any thread count: chunks depend on the size alone, and their partials add in chunk order.
TEST(Reductions, SumOfSquaresIsTheSameBitsOnAnyThreadCount) {
  const Tensor x = test::random_tensor({3 << 20}, DType::kF32, 11);
  const int threads = num_threads();
  std::vector<double> got;
  for (int n : {1, 2, 3, 7, 16}) {
    set_num_threads(n);
    got.push_back(ops::sum_of_squares(x));
  }
  set_num_threads(threads);
  for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i], got[0]) << "thread count #" << i;
  double want = 0;  // the f64 sum in one order: close, not necessarily equal
  for (double v : test::to_doubles(x)) want += v * v;
  EXPECT_NEAR(got[0], want, 1e-12 * want);
}

TEST(Reductions, ChunksDependOnTheSizeNotTheThreadCount) {
  EXPECT_EQ(reduction_chunks(0, 100), 0);
  EXPECT_EQ(reduction_chunks(99, 100), 1);
  EXPECT_EQ(reduction_chunks(101, 100), 2);
  EXPECT_EQ(reduction_chunks(int64_t{1} << 40, 100), kReductionChunks);
  const int threads = num_threads();
  for (int n : {1, 2, 5}) {
    set_num_threads(n);
    std::vector<std::pair<int64_t, int64_t>> seen(7);
    parallel_chunks(10, 710, 100, [&](int64_t c, int64_t lo, int64_t hi) { seen[c] = {lo, hi}; });
    for (int64_t c = 0; c < 7; ++c) {
      EXPECT_EQ(seen[c], (std::pair<int64_t, int64_t>{10 + 100 * c, 110 + 100 * c})) << n;
    }
  }
  set_num_threads(threads);
}

TEST(Reductions, SumRowsIsTheBiasGradient) {
  const Tensor x = test::random_tensor({4, 6, 10}, DType::kF32, 10);
  const std::vector<double> v = test::to_doubles(x);
  std::vector<double> want(10, 0.0);
  for (size_t i = 0; i < v.size(); ++i) want[i % 10] += v[i];
  const Tensor s = ops::sum_rows(x);
  ASSERT_EQ(s.shape(), (Shape{10}));
  EXPECT_TRUE(test::all_close(s.to_floats(), want, {1e-6, 1e-6}));
}

}  // namespace
}  // namespace octet

namespace octet {
namespace {

// Inside a caller's parallel region with more threads than octet's pool, reductions run inline
// and must keep their partial results in range (they indexed by omp_get_thread_num() before).
TEST(Reductions, InsideAWiderCallerParallelRegion) {
  const Tensor x = test::random_tensor({1 << 16}, DType::kF32, 11);
  const float want = ops::sum(x).item();
  const int threads = num_threads();
  set_num_threads(2);
  std::vector<float> got(4, 0.f);
#pragma omp parallel num_threads(4)
  { got[static_cast<size_t>(omp_get_thread_num())] = ops::sum(x).item(); }
  set_num_threads(threads);
  for (float g : got) EXPECT_FLOAT_EQ(g, want);
}

}  // namespace
}  // namespace octet
