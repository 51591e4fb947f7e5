// Softmax, cross-entropy, embedding and dropout against f64 loops written out here, plus the
// shared math helpers (exp, online softmax, Welford) against libm in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/math/exp.h"
#include "kernels/math/norm.h"
#include "kernels/math/softmax.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "tests/kernels/nn_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

// ---- shared math ----

TEST(NnMath, ExpWithinTwoUlpOfLibm) {
  size_t checked = 0;
  for (float x = -87.f; x < 88.7f; x += 0.01234f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = math::exp_f32(x);
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    ASSERT_LE(std::fabs(got - want), 2 * ulp) << "x = " << x;
    ++checked;
  }
  EXPECT_GT(checked, 10000u);
  EXPECT_EQ(math::exp_f32(-INFINITY), 0.f);
  EXPECT_EQ(math::exp_f32(-200.f), 0.f);
  EXPECT_EQ(math::exp_f32(0.f), 1.f);
  EXPECT_TRUE(std::isinf(math::exp_f32(89.f)));
  EXPECT_TRUE(std::isinf(math::exp_f32(INFINITY)));
  EXPECT_TRUE(std::isnan(math::exp_f32(NAN)));
  // Gradual underflow: exp(-100) = 3.7e-44 is a subnormal f32.
  EXPECT_NEAR(math::exp_f32(-100.f), std::exp(-100.0), 2e-45);
}

TEST(NnMath, OnlineSoftmaxMatchesLogSumExp) {
  const std::vector<float> xs = {3.f, -1.f, 700.f, 2.5f, -INFINITY, 699.f, 0.f};
  double m = -INFINITY;
  for (const float x : xs) m = std::max(m, static_cast<double>(x));
  double sum = 0;
  for (const float x : xs) sum += std::exp(x - m);
  const double want = m + std::log(sum);
  math::OnlineSoftmax all;
  for (const float x : xs) math::online_softmax_push(all, x);
  EXPECT_NEAR(math::log_sum_exp(all), want, 1e-4);
  // Two halves merged equal the whole.
  math::OnlineSoftmax a, b;
  for (size_t i = 0; i < xs.size(); ++i) math::online_softmax_push(i < 3 ? a : b, xs[i]);
  EXPECT_NEAR(math::log_sum_exp(math::online_softmax_merge(a, b)), want, 1e-4);
  EXPECT_EQ(math::log_sum_exp(math::OnlineSoftmax{}), -INFINITY);
}

TEST(NnMath, WelfordMergeKeepsVarianceAtLargeMean) {
  const Tensor t = test::random_tensor({1000}, DType::kF32, 401);
  const std::vector<float> v = t.to_floats();
  double mean = 0, m2 = 0;
  for (const float x : v) mean += 1000.0 + x;
  mean /= 1000.0;
  for (const float x : v) m2 += (1000.0 + x - mean) * (1000.0 + x - mean);
  math::WelfordStats a, b;
  for (size_t i = 0; i < v.size(); ++i) math::welford_push(i % 3 ? a : b, 1000.f + v[i]);
  const math::WelfordStats all = math::welford_merge(a, b);
  EXPECT_EQ(all.count, 1000.f);
  EXPECT_NEAR(all.mean, mean, 1e-3);
  EXPECT_NEAR(all.m2 / all.count, m2 / 1000.0, 2e-3 * m2 / 1000.0);
}

// ---- softmax ----

TEST(Softmax, ForwardBackwardMatchF64) {
  const int64_t rows = 3 * 11, cols = 77;
  const Tensor x = test::random_tensor({3, 11, cols}, DType::kF32, 411, 4.f);
  const Tensor dy = test::random_tensor({3, 11, cols}, DType::kF32, 412);
  const std::vector<double> xv = test::to_doubles(x), dyv = test::to_doubles(dy);
  std::vector<double> y(xv.size()), dx(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    const size_t o = static_cast<size_t>(r * cols);
    double m = -INFINITY, sum = 0, dot = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, xv[o + j]);
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(xv[o + j] - m);
    for (int64_t j = 0; j < cols; ++j) y[o + j] = std::exp(xv[o + j] - m) / sum;
    for (int64_t j = 0; j < cols; ++j) dot += dyv[o + j] * y[o + j];
    for (int64_t j = 0; j < cols; ++j) dx[o + j] = y[o + j] * (dyv[o + j] - dot);
  }
  const Tensor got = ops::softmax(x);
  EXPECT_TRUE(test::all_close(got.to_floats(), y, {1e-7, 1e-5}));
  // Backward from the kernel's own y (as autograd saves it). Its error is the f32 dot(dy, y) of
  // each 77-value row, summed in whatever SIMD order the compiler gives the reduction: bounded
  // by 77 * 2^-24 * sum|dy * y| (about 1e-5 here); clang 14 at -O1 gives 1.5e-6 where GCC gives
  // less, so 1e-6 was GCC's rounding, not the kernel's accuracy.
  EXPECT_TRUE(test::all_close(ops::softmax_backward(dy, got).to_floats(), dx, {4e-6, 1e-5}));
}

TEST(Softmax, HugeLogitsAreStable) {
  const Tensor x = Tensor::from_floats({1000.f, 1001.f, 999.f, -1e30f, 3e38f, 3e38f}, {2, 3});
  const std::vector<float> y = ops::softmax(x).to_floats();
  const double e1 = std::exp(1.0), z = 1 + e1 + std::exp(-1.0);
  EXPECT_NEAR(y[0], 1 / z, 1e-6);
  EXPECT_NEAR(y[1], e1 / z, 1e-6);
  EXPECT_EQ(y[3], 0.f);
  EXPECT_EQ(y[4], 0.5f);
  EXPECT_EQ(y[5], 0.5f);
}

// ---- cross-entropy ----

struct RefCe {
  double loss = 0;
  int64_t count = 0;
  std::vector<double> lse, dlogits;
};

RefCe reference_ce(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t n,
                   int64_t v, int64_t ignore, double dloss) {
  RefCe r;
  r.dlogits.assign(x.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double* row = x.data() + i * v;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < v; ++j) m = std::max(m, row[j]);
    for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - m);
    r.lse.push_back(m + std::log(sum));
    if (t[static_cast<size_t>(i)] == ignore) continue;
    r.loss += r.lse.back() - row[t[static_cast<size_t>(i)]];
    ++r.count;
  }
  if (r.count > 0) r.loss /= static_cast<double>(r.count);
  for (int64_t i = 0; i < n && r.count > 0; ++i) {
    if (t[static_cast<size_t>(i)] == ignore) continue;
    for (int64_t j = 0; j < v; ++j) {
      const double p = std::exp(x[static_cast<size_t>(i * v + j)] - r.lse[static_cast<size_t>(i)]);
      const double onehot = j == t[static_cast<size_t>(i)] ? 1.0 : 0.0;
      r.dlogits[static_cast<size_t>(i * v + j)] =
          dloss * (p - onehot) / static_cast<double>(r.count);
    }
  }
  return r;
}

TEST(CrossEntropy, ForwardBackwardMatchF64WithIgnoredRows) {
  const int64_t n = 23, v = 1001, ignore = -100;
  const Tensor logits = test::random_tensor({n, v}, DType::kF32, 421, 3.f);
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(i % 4 == 1 ? ignore : (i * 379) % v);
  const RefCe want = reference_ce(test::to_doubles(logits), t, n, v, ignore, 0.7);
  for (const DType dt : {DType::kI64, DType::kI32}) {
    Tensor targets = Tensor::empty({n}, dt);
    for (int64_t i = 0; i < n; ++i)
      store_from_f32(dt, targets.data(), static_cast<size_t>(i),
                     static_cast<float>(t[static_cast<size_t>(i)]));
    const ops::CrossEntropyForward f = ops::cross_entropy(logits, targets, ignore);
    const int64_t count = f.counted.data_as<int64_t>()[0];
    EXPECT_EQ(count, want.count);
    EXPECT_EQ(count, 17);
    EXPECT_EQ(f.loss.shape(), Shape({1}));
    EXPECT_NEAR(f.loss.item(), want.loss, 1e-5 * want.loss);
    EXPECT_TRUE(test::all_close(f.lse.to_floats(), want.lse, {1e-6, 1e-6}));
    test::recycle_poisoned(logits.nbytes());
    const Tensor d = ops::cross_entropy_backward(0.7f, logits, targets, f.lse, ignore, count);
    EXPECT_TRUE(test::all_close(d.to_floats(), want.dlogits, {1e-9, 1e-5}));
    // The tensor form (what autograd passes: dloss and the count where they live) is the same.
    EXPECT_EQ(ops::cross_entropy_backward(Tensor::full({1}, 0.7f, DType::kF32), logits, targets,
                                          f.lse, ignore, f.counted)
                  .to_floats(),
              d.to_floats());
    // Ignored rows have exactly zero gradient.
    const std::vector<float> dv = d.to_floats();
    for (int64_t j = 0; j < v; ++j) ASSERT_EQ(dv[static_cast<size_t>(v + j)], 0.f);
  }
}

TEST(CrossEntropy, AllRowsIgnoredGivesZeroLossAndGradient) {
  const Tensor logits = test::random_tensor({4, 9}, DType::kF32, 422);
  Tensor targets = Tensor::empty({4}, DType::kI32);
  for (int i = 0; i < 4; ++i) targets.data_as<int32_t>()[i] = -1;
  const ops::CrossEntropyForward f = ops::cross_entropy(logits, targets, -1);
  EXPECT_EQ(f.counted.data_as<int64_t>()[0], 0);
  EXPECT_EQ(f.loss.item(), 0.f);
  const Tensor d = ops::cross_entropy_backward(1.f, logits, targets, f.lse, -1, 0);
  for (const float g : d.to_floats()) ASSERT_EQ(g, 0.f);
}

TEST(CrossEntropy, HugeLogitsAreStable) {
  const Tensor logits = Tensor::from_floats({1e4f, -1e4f, 0.f, 9990.f}, {1, 4});
  Tensor targets = Tensor::empty({1}, DType::kI64);
  targets.data_as<int64_t>()[0] = 3;
  const ops::CrossEntropyForward f = ops::cross_entropy(logits, targets, -100);
  EXPECT_NEAR(f.loss.item(), 10.0 + std::log1p(std::exp(-10.0)), 1e-3);
  EXPECT_TRUE(test::all_finite(ops::cross_entropy_backward(1.f, logits, targets, f.lse, -100, 1)));
}

TEST(CrossEntropy, OutOfRangeTargetIsAClearError) {
  const Tensor logits = Tensor::zeros({3, 10}, DType::kF32);
  Tensor targets = Tensor::empty({3}, DType::kI64);
  targets.data_as<int64_t>()[0] = 1;
  targets.data_as<int64_t>()[1] = 10;
  targets.data_as<int64_t>()[2] = -100;
  try {
    ops::cross_entropy(logits, targets, -100);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("target 10 at row 1"), std::string::npos) << what;
    EXPECT_NE(what.find("10 classes"), std::string::npos) << what;
  }
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::zeros({4}, DType::kI64), -100), Error);
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::zeros({3}, DType::kF32), -100), Error);
}

// ---- embedding ----

TEST(Embedding, ForwardGathersRowsForI32AndI64Ids) {
  const int64_t V = 50, C = 13;
  const Tensor table = test::random_tensor({V, C}, DType::kF32, 431);
  const std::vector<float> tv = table.to_floats();
  const std::vector<int64_t> idv = {3, 49, 0, 3, 17, 17, 8};
  for (const DType dt : {DType::kI32, DType::kI64}) {
    Tensor ids = Tensor::empty({7}, dt);
    for (size_t i = 0; i < idv.size(); ++i)
      store_from_f32(dt, ids.data(), i, static_cast<float>(idv[i]));
    const Tensor out = ops::embedding(table, ids.reshape({1, 7}));
    ASSERT_EQ(out.shape(), Shape({1, 7, C}));
    const std::vector<float> ov = out.to_floats();
    for (size_t i = 0; i < idv.size(); ++i) {
      for (int64_t c = 0; c < C; ++c) {
        ASSERT_EQ(ov[i * C + static_cast<size_t>(c)], tv[static_cast<size_t>(idv[i] * C + c)]);
      }
    }
  }
  // A bf16 table is read exactly.
  const Tensor tb = ops::cast(table, DType::kBF16);
  Tensor ids = Tensor::empty({2}, DType::kI64);
  ids.data_as<int64_t>()[0] = 5;
  ids.data_as<int64_t>()[1] = 6;
  const std::vector<float> got = ops::embedding(tb, ids).to_floats();
  const std::vector<float> want = tb.to_floats();
  for (int64_t c = 0; c < C; ++c)
    EXPECT_EQ(got[static_cast<size_t>(C + c)], want[static_cast<size_t>(6 * C + c)]);
}

TEST(Embedding, BackwardSumsRepeatedIdsDeterministically) {
  const int64_t V = 40, C = 24, N = 300;
  Tensor ids = Tensor::empty({3, N / 3}, DType::kI32);
  for (int64_t i = 0; i < N; ++i)
    ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * i + 7) % 31);
  const Tensor dy = test::random_tensor({3, N / 3, C}, DType::kF32, 432);
  const std::vector<double> dv = test::to_doubles(dy);
  std::vector<double> want(static_cast<size_t>(V * C), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      want[static_cast<size_t>(ids.data_as<int32_t>()[i] * C + c)] +=
          dv[static_cast<size_t>(i * C + c)];
    }
  }
  Tensor one, two;
  {
    test::ThreadCount threads(1);
    test::recycle_poisoned(static_cast<size_t>(V * C) * 4);  // rows no id touches must be zeroed
    one = ops::embedding_backward(dy, ids, V);
  }
  {
    test::ThreadCount threads(2);
    two = ops::embedding_backward(dy, ids, V);
  }
  ASSERT_EQ(one.shape(), Shape({V, C}));
  EXPECT_TRUE(test::all_close(one.to_floats(), want, {1e-5, 1e-6}));  // ids >= 31: zero rows
  EXPECT_TRUE(test::bitwise_equal(one, two));
}

TEST(Embedding, OutOfRangeIdNamesTheIdAndTheTableSize) {
  const Tensor table = Tensor::zeros({10, 4}, DType::kF32);
  Tensor ids = Tensor::empty({3}, DType::kI64);
  ids.data_as<int64_t>()[0] = 2;
  ids.data_as<int64_t>()[1] = 9;
  ids.data_as<int64_t>()[2] = 12;
  try {
    ops::embedding(table, ids);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("id 12 at position 2"), std::string::npos) << what;
    EXPECT_NE(what.find("10 rows"), std::string::npos) << what;
  }
  ids.data_as<int64_t>()[2] = -1;
  EXPECT_THROW(ops::embedding(table, ids), Error);
  EXPECT_THROW(ops::embedding_backward(Tensor::zeros({3, 4}, DType::kF32), ids, 10), Error);
  EXPECT_THROW(ops::embedding(table, Tensor::zeros({3}, DType::kF32)), Error);
}

// ---- dropout ----

TEST(Dropout, MaskIsThePhiloxStreamAndScalesKeptValues) {
  const float p = 0.3f;
  const Tensor x = test::random_tensor({37, 101}, DType::kF32, 441);
  Generator gen(1234);
  gen.set_state({1234, 6});  // an offset that is not a multiple of the 4-word Philox block
  const ops::DropoutForward f = ops::dropout(x, p, gen);
  EXPECT_EQ(gen.state().offset, 6u + static_cast<uint64_t>(x.numel()));
  ASSERT_EQ(f.mask.dtype(), DType::kU8);
  const uint8_t* m = f.mask.data_as<uint8_t>();
  const std::vector<float> xv = x.to_floats(), yv = f.y.to_floats();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float u = detail::u32_to_uniform(detail::philox_draw(1234, 6 + static_cast<uint64_t>(i)));
    const uint8_t keep = u >= p ? 1 : 0;
    ASSERT_EQ(m[i], keep) << i;
    ASSERT_FLOAT_EQ(yv[static_cast<size_t>(i)], keep ? xv[static_cast<size_t>(i)] / (1 - p) : 0.f)
        << i;
  }
  const Tensor dy = test::random_tensor({37, 101}, DType::kF32, 442);
  const std::vector<float> dyv = dy.to_floats(),
                           dxv = ops::dropout_backward(dy, f.mask, p).to_floats();
  for (size_t i = 0; i < dxv.size(); ++i) {
    ASSERT_FLOAT_EQ(dxv[i], m[i] ? dyv[i] / (1 - p) : 0.f) << i;
  }
}

TEST(Dropout, SameMaskForOneAndTwoThreadsAndKeepFractionNearOneMinusP) {
  const Tensor x = test::random_tensor({1 << 18}, DType::kF32, 443);
  ops::DropoutForward one, two;
  {
    test::ThreadCount threads(1);
    Generator gen(99);
    one = ops::dropout(x, 0.25f, gen);
  }
  {
    test::ThreadCount threads(2);
    Generator gen(99);
    two = ops::dropout(x, 0.25f, gen);
  }
  EXPECT_TRUE(test::bitwise_equal(one.mask, two.mask));
  EXPECT_TRUE(test::bitwise_equal(one.y, two.y));
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) kept += one.mask.data_as<uint8_t>()[i];
  // Binomial: the standard deviation of the fraction is sqrt(0.25 * 0.75 / 2^18) = 8.5e-4.
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(x.numel()), 0.75, 5e-3);
}

TEST(Dropout, GeneratorAdvancesAndEdgeProbabilities) {
  const Tensor x = test::random_tensor({1000}, DType::kF32, 444);
  Generator gen(5);
  const ops::DropoutForward a = ops::dropout(x, 0.5f, gen);
  const ops::DropoutForward b = ops::dropout(x, 0.5f, gen);
  EXPECT_FALSE(test::bitwise_equal(a.mask, b.mask));  // the second call draws new numbers
  const ops::DropoutForward keep_all = ops::dropout(x, 0.f, gen);
  EXPECT_TRUE(test::bitwise_equal(keep_all.y, x));
  const ops::DropoutForward drop_all = ops::dropout(x, 1.f, gen);
  for (const float v : drop_all.y.to_floats()) ASSERT_EQ(v, 0.f);
  EXPECT_THROW(ops::dropout(x, 1.5f, gen), Error);
  EXPECT_THROW(ops::dropout_backward(x, x, 0.5f), Error);  // mask must be u8
}

}  // namespace
}  // namespace octet
