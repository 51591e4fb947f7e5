// Gradient checks of the neural-network operations against f64 references written out here.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/nn.h"
#include "kernels/ops.h"
#include "tests/autograd/gradcheck.h"

namespace octet {
namespace {

using autograd::Activation;
using autograd::ZeroCenteredGamma;
using test::Values;

double act_ref(Activation act, double x) {
  switch (act) {
    case Activation::kGelu: {
      const double k = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kSquaredRelu:
      return x > 0 ? x * x : 0;
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
  }
  return 0;
}

// Inputs kept away from ReLU's kink so that central differences are meaningful.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  std::vector<float> v = test::random_tensor(shape, DType::kF32, seed).to_floats();
  for (float& x : v) x = x >= 0 ? x + 0.1f : x - 0.1f;
  return Tensor::from_floats(v, shape);
}

TEST(GradCheck, ActivationsPlainAndGated) {
  for (Activation act :
       {Activation::kGelu, Activation::kRelu, Activation::kSquaredRelu, Activation::kSilu}) {
    const std::string name = ops::activation_name(act);
    const Tensor x = away_from_zero({7, 13}, 1);
    test::gradcheck(
        name, {x}, [=](auto& in) { return autograd::activation(act, in[0]); },
        [=](auto& in) {
          Values out(in[0].size());
          for (size_t i = 0; i < out.size(); ++i) out[i] = act_ref(act, in[0][i]);
          return out;
        });
    const Tensor xg = away_from_zero({5, 2, 12}, 2);  // [a | g], n = 6
    test::gradcheck(
        "gated " + name, {xg}, [=](auto& in) { return autograd::gated_activation(act, in[0]); },
        [=](auto& in) {
          Values out;
          for (size_t r = 0; r < 10; ++r) {
            for (size_t j = 0; j < 6; ++j) {
              out.push_back(act_ref(act, in[0][r * 12 + j]) * in[0][r * 12 + 6 + j]);
            }
          }
          return out;
        });
  }
  // The named shorthands are the same functions.
  const Tensor x = away_from_zero({4}, 3);
  EXPECT_EQ(autograd::gelu(x).to_floats(), autograd::activation(Activation::kGelu, x).to_floats());
  EXPECT_EQ(autograd::relu(x).to_floats(), autograd::activation(Activation::kRelu, x).to_floats());
  EXPECT_EQ(autograd::squared_relu(x).to_floats(),
            autograd::activation(Activation::kSquaredRelu, x).to_floats());
  EXPECT_EQ(autograd::silu(x).to_floats(), autograd::activation(Activation::kSilu, x).to_floats());
}

Values softmax_rows(const Values& x, size_t cols) {
  Values out(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double mx = -1e300, s = 0;
    for (size_t j = 0; j < cols; ++j) mx = std::max(mx, x[r * cols + j]);
    for (size_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j] - mx);
    for (size_t j = 0; j < cols; ++j) out[r * cols + j] = std::exp(x[r * cols + j] - mx) / s;
  }
  return out;
}

TEST(GradCheck, Softmax) {
  const Tensor x = test::random_tensor({6, 11}, DType::kF32, 4, 2.f);
  test::gradcheck(
      "softmax", {x}, [](auto& in) { return autograd::softmax(in[0]); },
      [](auto& in) { return softmax_rows(in[0], 11); });
}

Values norm_ref(const Values& x, const Values& gamma, const Values* beta, size_t c, double eps,
                bool rms, bool zero_centered) {
  Values out(x.size());
  for (size_t r = 0; r < x.size() / c; ++r) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < c; ++j) mean += x[r * c + j];
    mean /= static_cast<double>(c);
    for (size_t j = 0; j < c; ++j) {
      const double d = rms ? x[r * c + j] : x[r * c + j] - mean;
      var += d * d;
    }
    const double rs = 1 / std::sqrt(var / static_cast<double>(c) + eps);
    for (size_t j = 0; j < c; ++j) {
      const double g = zero_centered ? 1 + gamma[j] : gamma[j];
      const double centred = rms ? x[r * c + j] : x[r * c + j] - mean;
      out[r * c + j] = centred * rs * g + (beta ? (*beta)[j] : 0.0);
    }
  }
  return out;
}

TEST(GradCheck, LayerNormAndRmsNormWithAndWithoutZeroCenteredGamma) {
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    Generator g(seed);
    const int64_t rows = 1 + g.next_u32() % 6, c = 2 + g.next_u32() % 15;
    const Tensor x = test::random_tensor({rows, c}, DType::kF32, seed + 10, 1.5f);
    const Tensor gamma = test::random_tensor({c}, DType::kF32, seed + 11);
    const Tensor beta = test::random_tensor({c}, DType::kF32, seed + 12);
    for (ZeroCenteredGamma zc : {ZeroCenteredGamma::kNo, ZeroCenteredGamma::kYes}) {
      const bool z = zc == ZeroCenteredGamma::kYes;
      test::gradcheck(
          "layer_norm", {x, gamma, beta},
          [=](auto& in) { return autograd::layer_norm(in[0], in[1], in[2], 1e-5f, zc); },
          [=](auto& in) {
            return norm_ref(in[0], in[1], &in[2], static_cast<size_t>(c), 1e-5, false, z);
          });
      test::gradcheck(
          "layer_norm without beta", {x, gamma},
          [=](auto& in) { return autograd::layer_norm(in[0], in[1], Tensor(), 1e-5f, zc); },
          [=](auto& in) {
            return norm_ref(in[0], in[1], nullptr, static_cast<size_t>(c), 1e-5, false, z);
          });
      test::gradcheck(
          "rms_norm", {x, gamma},
          [=](auto& in) { return autograd::rms_norm(in[0], in[1], 1e-5f, zc); },
          [=](auto& in) {
            return norm_ref(in[0], in[1], nullptr, static_cast<size_t>(c), 1e-5, true, z);
          });
    }
  }
}

TEST(GradCheck, EmbeddingWithRepeatedIds) {
  const Tensor table = test::random_tensor({9, 5}, DType::kF32, 5);
  std::vector<int32_t> id_values = {3, 0, 8, 3, 3, 1};
  const Tensor ids = Tensor::from_bytes(id_values.data(), {2, 3}, DType::kI32);
  test::GradCheckOptions opt;
  opt.differentiable = {true, false};
  test::gradcheck(
      "embedding", {table, ids}, [](auto& in) { return autograd::embedding(in[0], in[1]); },
      [&](auto& in) {
        Values out;
        for (int32_t id : id_values) {
          for (size_t j = 0; j < 5; ++j) out.push_back(in[0][static_cast<size_t>(id) * 5 + j]);
        }
        return out;
      },
      opt);
}

TEST(GradCheck, DropoutWithAFixedSeed) {
  const float p = 0.3f;
  const Tensor x = test::random_tensor({8, 16}, DType::kF32, 6);
  // The mask the function will draw (same seed): keep/drop decisions are data, not formulas.
  Generator probe(77);
  const std::vector<float> mask =
      ops::dropout(Tensor::full({8, 16}, 1.f, DType::kF32), p, probe).mask.to_floats();
  test::gradcheck(
      "dropout", {x},
      [=](auto& in) {
        Generator gen(77);
        return autograd::dropout(in[0], p, gen);
      },
      [&](auto& in) {
        Values out(in[0].size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = in[0][i] * mask[i] / (1.0 - p);
        return out;
      });
}

Values attention_ref(const Values& qkv, int64_t b_, int64_t t_, int64_t h_, int64_t d_,
                     double scale) {
  const auto at = [&](int64_t b, int64_t t, int64_t which, int64_t h, int64_t d) {
    return qkv[static_cast<size_t>((((b * t_ + t) * 3 + which) * h_ + h) * d_ + d)];
  };
  Values out(static_cast<size_t>(b_ * t_ * h_ * d_), 0.0);
  for (int64_t b = 0; b < b_; ++b) {
    for (int64_t h = 0; h < h_; ++h) {
      for (int64_t t = 0; t < t_; ++t) {
        Values s(static_cast<size_t>(t + 1));
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < d_; ++d) dot += at(b, t, 0, h, d) * at(b, j, 1, h, d);
          s[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        for (double& v : s) z += (v = std::exp(v - mx));
        for (int64_t d = 0; d < d_; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= t; ++j) acc += s[static_cast<size_t>(j)] / z * at(b, j, 2, h, d);
          out[static_cast<size_t>(((b * t_ + t) * h_ + h) * d_ + d)] = acc;
        }
      }
    }
  }
  return out;
}

TEST(GradCheck, CausalAttention) {
  const int64_t b = 2, t = 5, h = 2, d = 4;
  const Tensor qkv = test::random_tensor({b, t, 3 * h * d}, DType::kF32, 7);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  test::gradcheck(
      "causal_attention", {qkv},
      [=](auto& in) { return autograd::causal_attention(in[0], h, scale); },
      [=](auto& in) { return attention_ref(in[0], b, t, h, d, scale); });
}

TEST(GradCheck, CrossEntropyWithIgnoreIndex) {
  const Tensor logits = test::random_tensor({6, 7}, DType::kF32, 8, 2.f);
  std::vector<int64_t> target_values = {2, -100, 6, 0, -100, 3};
  const Tensor targets = Tensor::from_bytes(target_values.data(), {6}, DType::kI64);
  test::GradCheckOptions opt;
  opt.differentiable = {true, false};
  test::gradcheck(
      "cross_entropy", {logits, targets},
      [](auto& in) { return autograd::cross_entropy(in[0], in[1], -100); },
      [&](auto& in) {
        double total = 0;
        int count = 0;
        for (size_t r = 0; r < 6; ++r) {
          if (target_values[r] == -100) continue;
          double mx = -1e300, z = 0;
          for (size_t j = 0; j < 7; ++j) mx = std::max(mx, in[0][r * 7 + j]);
          for (size_t j = 0; j < 7; ++j) z += std::exp(in[0][r * 7 + j] - mx);
          total += std::log(z) + mx - in[0][r * 7 + static_cast<size_t>(target_values[r])];
          ++count;
        }
        return Values{total / count};
      },
      opt);
}

}  // namespace
}  // namespace octet
