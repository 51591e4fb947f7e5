// Causal attention on packed QKV against a naive f64 implementation written out here (scores,
// masked softmax, weighted values; and the backward through each of them), over shapes that
// cross the kernel's 64-row query blocks; plus causality, thread independence and bad shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/nn.h"
#include "kernels/ops.h"
#include "tests/kernels/nn_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

struct Dims {
  int64_t B, T, H, D;
  int64_t C() const { return H * D; }
};

// Element (b, t, which, h, d) of qkv (B, T, 3, H, D); which: 0 = q, 1 = k, 2 = v.
size_t qkv_at(const Dims& s, int64_t b, int64_t t, int64_t which, int64_t h, int64_t d) {
  return static_cast<size_t>((((b * s.T + t) * 3 + which) * s.H + h) * s.D + d);
}
size_t out_at(const Dims& s, int64_t b, int64_t t, int64_t h, int64_t d) {
  return static_cast<size_t>(((b * s.T + t) * s.H + h) * s.D + d);
}

struct RefAttention {
  std::vector<double> out, lse, dqkv;
};

RefAttention reference(const Dims& s, const std::vector<double>& qkv,
                       const std::vector<double>& dout, double scale) {
  RefAttention r;
  r.out.assign(static_cast<size_t>(s.B * s.T * s.C()), 0.0);
  r.lse.assign(static_cast<size_t>(s.B * s.H * s.T), 0.0);
  r.dqkv.assign(qkv.size(), 0.0);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      // p (T, T) lower triangular: softmax over keys j <= i of scale * q_i . k_j.
      std::vector<double> p(static_cast<size_t>(s.T * s.T), 0.0);
      for (int64_t i = 0; i < s.T; ++i) {
        double m = -INFINITY;
        std::vector<double> sc(static_cast<size_t>(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d) {
            dot += qkv[qkv_at(s, b, i, 0, h, d)] * qkv[qkv_at(s, b, j, 1, h, d)];
          }
          sc[static_cast<size_t>(j)] = scale * dot;
          m = std::max(m, scale * dot);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(sc[static_cast<size_t>(j)] - m);
        r.lse[static_cast<size_t>((b * s.H + h) * s.T + i)] = m + std::log(sum);
        for (int64_t j = 0; j <= i; ++j) {
          p[static_cast<size_t>(i * s.T + j)] = std::exp(sc[static_cast<size_t>(j)] - m) / sum;
        }
        for (int64_t d = 0; d < s.D; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) {
            o += p[static_cast<size_t>(i * s.T + j)] * qkv[qkv_at(s, b, j, 2, h, d)];
          }
          r.out[out_at(s, b, i, h, d)] = o;
        }
      }
      // Backward: dp_ij = do_i . v_j; ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik);
      // dq_i = scale sum_j ds_ij k_j; dk_j = scale sum_i ds_ij q_i; dv_j = sum_i p_ij do_i.
      for (int64_t i = 0; i < s.T; ++i) {
        std::vector<double> dp(static_cast<size_t>(i + 1));
        double weighted = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double v = 0;
          for (int64_t d = 0; d < s.D; ++d)
            v += dout[out_at(s, b, i, h, d)] * qkv[qkv_at(s, b, j, 2, h, d)];
          dp[static_cast<size_t>(j)] = v;
          weighted += p[static_cast<size_t>(i * s.T + j)] * v;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double pij = p[static_cast<size_t>(i * s.T + j)];
          const double ds = pij * (dp[static_cast<size_t>(j)] - weighted);
          for (int64_t d = 0; d < s.D; ++d) {
            r.dqkv[qkv_at(s, b, i, 0, h, d)] += scale * ds * qkv[qkv_at(s, b, j, 1, h, d)];
            r.dqkv[qkv_at(s, b, j, 1, h, d)] += scale * ds * qkv[qkv_at(s, b, i, 0, h, d)];
            r.dqkv[qkv_at(s, b, j, 2, h, d)] += pij * dout[out_at(s, b, i, h, d)];
          }
        }
      }
    }
  }
  return r;
}

void check_against_reference(const Dims& s, uint64_t seed) {
  const Tensor qkv = test::random_tensor({s.B, s.T, 3 * s.C()}, DType::kF32, seed);
  const Tensor dout = test::random_tensor({s.B, s.T, s.C()}, DType::kF32, seed + 1);
  const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
  const RefAttention want = reference(s, test::to_doubles(qkv), test::to_doubles(dout), scale);
  test::recycle_poisoned(static_cast<size_t>(s.B * s.T * s.C()) * 4);  // out's size
  const ops::AttentionForward f = ops::causal_attention(qkv, s.H, scale);
  ASSERT_EQ(f.out.shape(), Shape({s.B, s.T, s.C()}));
  ASSERT_EQ(f.lse.shape(), Shape({s.B, s.H, s.T}));
  EXPECT_TRUE(test::all_finite(f.out));
  // f32 dot products of length D and sums of T probabilities: a few 1e-6 of O(1) values.
  EXPECT_TRUE(test::all_close(f.out.to_floats(), want.out, {1e-5, 1e-5}))
      << "B=" << s.B << " T=" << s.T << " H=" << s.H << " D=" << s.D;
  EXPECT_TRUE(test::all_close(f.lse.to_floats(), want.lse, {1e-5, 1e-5}));
  test::recycle_poisoned(qkv.nbytes());  // dqkv's size
  const Tensor dqkv = ops::causal_attention_backward(dout, qkv, f.out, f.lse, s.H, scale);
  ASSERT_EQ(dqkv.shape(), qkv.shape());
  EXPECT_TRUE(test::all_finite(dqkv));
  EXPECT_TRUE(test::all_close(dqkv.to_floats(), want.dqkv, {5e-5, 5e-5}))
      << "B=" << s.B << " T=" << s.T << " H=" << s.H << " D=" << s.D;
}

TEST(CausalAttention, ForwardBackwardMatchNaiveF64) {
  check_against_reference({2, 70, 3, 8}, 301);    // two query blocks, the second partial
  check_against_reference({1, 131, 2, 16}, 303);  // three blocks
  check_against_reference({3, 5, 1, 3}, 305);     // one short block, odd head size
  check_against_reference({2, 1, 4, 2}, 307);     // one token: attends to itself only
}

// Grouped-query attention on (B, T, H + 2G, D): the reference above on the key and value heads
// repeated for their H/G query heads (Hugging Face's repeat_kv), its key and value gradients
// summed over each group.
void check_grouped_against_reference(const Dims& s, int64_t G, uint64_t seed) {
  const int64_t rep = s.H / G, W = (s.H + 2 * G) * s.D;
  const Tensor qkv = test::random_tensor({s.B, s.T, W}, DType::kF32, seed);
  const Tensor dout = test::random_tensor({s.B, s.T, s.C()}, DType::kF32, seed + 1);
  const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
  const std::vector<double> x = test::to_doubles(qkv);
  std::vector<double> repeated(static_cast<size_t>(s.B * s.T * 3 * s.C()));
  auto source = [&](int64_t b, int64_t t, int64_t which, int64_t h, int64_t d) {
    const int64_t slot = which == 0 ? h : which == 1 ? s.H + h / rep : s.H + G + h / rep;
    return static_cast<size_t>((b * s.T + t) * W + slot * s.D + d);
  };
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t which = 0; which < 3; ++which)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t d = 0; d < s.D; ++d)
            repeated[qkv_at(s, b, t, which, h, d)] = x[source(b, t, which, h, d)];
  const RefAttention want = reference(s, repeated, test::to_doubles(dout), scale);
  std::vector<double> want_dqkv(x.size(), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t which = 0; which < 3; ++which)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t d = 0; d < s.D; ++d)
            want_dqkv[source(b, t, which, h, d)] += want.dqkv[qkv_at(s, b, t, which, h, d)];

  const ops::AttentionForward f = ops::causal_attention(qkv, s.H, G, scale);
  ASSERT_EQ(f.out.shape(), Shape({s.B, s.T, s.C()}));
  ASSERT_EQ(f.lse.shape(), Shape({s.B, s.H, s.T}));
  EXPECT_TRUE(test::all_close(f.out.to_floats(), want.out, {1e-5, 1e-5})) << "out, G " << G;
  EXPECT_TRUE(test::all_close(f.lse.to_floats(), want.lse, {1e-5, 1e-5})) << "lse, G " << G;
  const Tensor dqkv = ops::causal_attention_backward(dout, qkv, f.out, f.lse, s.H, G, scale);
  ASSERT_EQ(dqkv.shape(), qkv.shape());
  // A key or value gradient sums H/G heads' gradients: that many times the tolerance above.
  const double tol = 5e-5 * static_cast<double>(rep);
  EXPECT_TRUE(test::all_close(dqkv.to_floats(), want_dqkv, {tol, tol})) << "dqkv, G " << G;
}

TEST(CausalAttention, GroupedQueryHeadsMatchNaiveF64) {
  check_grouped_against_reference({2, 70, 4, 8}, 2, 311);   // two query heads per key/value head
  check_grouped_against_reference({1, 33, 6, 16}, 1, 313);  // one key/value head for all
  check_grouped_against_reference({2, 9, 6, 4}, 3, 315);
  check_grouped_against_reference({1, 12, 3, 8}, 3, 317);  // G == H: plain multi-head
  const Tensor qkv = Tensor::zeros({1, 4, 7 * 8}, DType::kF32);
  try {
    ops::causal_attention(qkv, 4, 3, 1.f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_heads 3 must divide heads 4"), std::string::npos)
        << e.what();
  }
}

TEST(CausalAttention, FutureTokensDoNotChangeEarlierOutputs) {
  const Dims s{2, 90, 3, 8};
  const int64_t t = 70;  // in the second query block
  Tensor qkv = test::random_tensor({s.B, s.T, 3 * s.C()}, DType::kF32, 311);
  const ops::AttentionForward before = ops::causal_attention(qkv, s.H, 0.3f);
  // New keys and values for token t (every batch and head).
  float* p = qkv.data_as<float>();
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t i = s.C(); i < 3 * s.C(); ++i) p[(b * s.T + t) * 3 * s.C() + i] += 5.f;
  }
  const ops::AttentionForward after = ops::causal_attention(qkv, s.H, 0.3f);
  const std::vector<float> o0 = before.out.to_floats(), o1 = after.out.to_floats();
  const std::vector<float> l0 = before.lse.to_floats(), l1 = after.lse.to_floats();
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t i = 0; i < s.T; ++i) {
      for (int64_t c = 0; c < s.C(); ++c) {
        const size_t at = static_cast<size_t>((b * s.T + i) * s.C() + c);
        if (i < t) {
          ASSERT_EQ(o0[at], o1[at]) << "b=" << b << " token " << i << " channel " << c;
        } else if (i == t) {
          EXPECT_NE(o0[at], o1[at]) << "b=" << b << " token " << i << " channel " << c;
        }
      }
    }
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t i = 0; i < t; ++i) {
        const size_t at = static_cast<size_t>((b * s.H + h) * s.T + i);
        ASSERT_EQ(l0[at], l1[at]) << "lse b=" << b << " h=" << h << " token " << i;
      }
    }
  }
}

TEST(CausalAttention, SameResultForOneAndTwoThreads) {
  const Dims s{2, 100, 4, 16};
  const Tensor qkv = test::random_tensor({s.B, s.T, 3 * s.C()}, DType::kF32, 321);
  const Tensor dout = test::random_tensor({s.B, s.T, s.C()}, DType::kF32, 322);
  ops::AttentionForward f1, f2;
  Tensor d1, d2;
  {
    test::ThreadCount threads(1);
    f1 = ops::causal_attention(qkv, s.H, 0.25f);
    d1 = ops::causal_attention_backward(dout, qkv, f1.out, f1.lse, s.H, 0.25f);
  }
  {
    test::ThreadCount threads(2);
    f2 = ops::causal_attention(qkv, s.H, 0.25f);
    d2 = ops::causal_attention_backward(dout, qkv, f2.out, f2.lse, s.H, 0.25f);
  }
  EXPECT_TRUE(test::bitwise_equal(f1.out, f2.out));
  EXPECT_TRUE(test::bitwise_equal(f1.lse, f2.lse));
  EXPECT_TRUE(test::bitwise_equal(d1, d2));
}

TEST(CausalAttention, LargeScoresStayFinite) {
  // Scores in the thousands: the softmax is shifted by the row max, so nothing overflows.
  const Dims s{1, 20, 2, 4};
  const Tensor qkv = test::random_tensor({s.B, s.T, 3 * s.C()}, DType::kF32, 331, 30.f);
  const Tensor dout = test::random_tensor({s.B, s.T, s.C()}, DType::kF32, 332);
  const ops::AttentionForward f = ops::causal_attention(qkv, s.H, 1.f);
  EXPECT_TRUE(test::all_finite(f.out));
  EXPECT_TRUE(test::all_finite(f.lse));
  const RefAttention want = reference(s, test::to_doubles(qkv), test::to_doubles(dout), 1.0);
  // Scores near 10^3 carry f32 rounding of ~1e-4 absolute, which the exp turns into relative
  // error of the probabilities, times values of size ~30.
  EXPECT_TRUE(test::all_close(f.out.to_floats(), want.out, {5e-2, 1e-3}));
  EXPECT_TRUE(test::all_finite(ops::causal_attention_backward(dout, qkv, f.out, f.lse, s.H, 1.f)));
}

TEST(CausalAttention, RejectsBadShapes) {
  const Tensor qkv = Tensor::zeros({2, 5, 90}, DType::kF32);
  try {
    ops::causal_attention(qkv, 4, 1.f);  // 90 is not 3 * 4 * D
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(2, 5, 90)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::causal_attention(Tensor::zeros({5, 90}, DType::kF32), 3, 1.f), Error);
  const ops::AttentionForward f = ops::causal_attention(qkv, 3, 1.f);
  EXPECT_THROW(ops::causal_attention_backward(f.out, qkv, f.out, f.lse, 5, 1.f), Error);
  EXPECT_THROW(ops::causal_attention_backward(Tensor::zeros({2, 5, 31}, DType::kF32), qkv, f.out,
                                              f.lse, 3, 1.f),
               Error);
  EXPECT_THROW(
      ops::causal_attention_backward(f.out, qkv, f.out, Tensor::zeros({2, 3}, DType::kF32), 3, 1.f),
      Error);
}

}  // namespace
}  // namespace octet
