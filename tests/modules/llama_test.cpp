// The Llama architecture of modules::GPT against an f64 forward written out here from Hugging
// Face's LlamaForCausalLM definition (RMSNorm, q/k/v projections, rotate-half rotary positions,
// repeat_kv for grouped-query heads, causal softmax attention, o_proj, SwiGLU MLP, final norm,
// untied LM head), read from the model's own weights; the GPT-2 architecture is unchanged by the
// new keys; bad configurations are clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/grad_mode.h"
#include "modules/gpt.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using ::testing::HasSubstr;
using Matrix = std::vector<double>;  // row-major

GPTConfig llama(int64_t n_kv_head, double theta, TieEmbeddings tie) {
  GPTConfig c = test::gpt_config(/*vocab_size=*/24, /*n_layer=*/2, /*n_head=*/4, /*seed=*/5);
  c.arch = Arch::kLlama;
  c.n_kv_head = n_kv_head;
  c.rope_theta = theta;
  c.tie_embeddings = tie;
  c.ffn = 40;
  c.norm = NormKind::kRMSNorm;
  c.activation = MLPActivation::kSwiglu;
  c.bias = Bias::kNo;
  c.init_std = 0.3f;  // activations of order 1, so a wrong formula shows in the logits
  return c;
}

class Reference {
 public:
  Reference(const GPTConfig& c, const std::vector<std::pair<std::string, Tensor>>& state) : c_(c) {
    for (const auto& [name, t] : state) {
      const std::vector<float> v = t.to_floats();
      w_[name] = Matrix(v.begin(), v.end());
    }
  }

  // logits (T, V) of one sequence.
  Matrix logits(const std::vector<int32_t>& ids) const {
    const int64_t T = static_cast<int64_t>(ids.size()), C = c_.d_model;
    Matrix x(static_cast<size_t>(T * C));
    const Matrix& wte = w("wte.weight");
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < C; ++j) x[at(t, j, C)] = wte[at(ids[static_cast<size_t>(t)], j, C)];
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      add(x, attention(rms(x, w(p + "attn.qkv.norm.weight"), T), p, T));
      add(x, mlp(rms(x, w(p + "mlp.norm.weight"), T), p, T));
    }
    const Matrix h = rms(x, w("ln_f.weight"), T);
    const bool tied = c_.tie_embeddings == TieEmbeddings::kYes;
    return matmul_t(h, w(tied ? "wte.weight" : "lm_head.weight"), T, C, c_.vocab_size);
  }

 private:
  const Matrix& w(const std::string& name) const { return w_.at(name); }
  static size_t at(int64_t r, int64_t c, int64_t cols) { return static_cast<size_t>(r * cols + c); }
  static void add(Matrix& x, const Matrix& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  // x (T, C) * gamma / sqrt(mean(x^2) + eps), per row.
  Matrix rms(const Matrix& x, const Matrix& gamma, int64_t T) const {
    const int64_t C = c_.d_model;
    Matrix y(x.size());
    for (int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (int64_t j = 0; j < C; ++j) ss += x[at(t, j, C)] * x[at(t, j, C)];
      const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + c_.norm_eps);
      for (int64_t j = 0; j < C; ++j) y[at(t, j, C)] = x[at(t, j, C)] * r * gamma[j];
    }
    return y;
  }
  // x (rows, in) times W^T for W (out, in).
  static Matrix matmul_t(const Matrix& x, const Matrix& W, int64_t rows, int64_t in, int64_t out) {
    Matrix y(static_cast<size_t>(rows * out), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i) s += x[at(r, i, in)] * W[at(o, i, in)];
        y[at(r, o, out)] = s;
      }
    return y;
  }
  // q * cos + rotate_half(q) * sin at position t, inv_freq_i = theta^(-2i/D).
  void rotate(double* v, int64_t t) const {
    const int64_t D = c_.d_model / c_.n_head, half = D / 2;
    std::vector<double> out(static_cast<size_t>(D));
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = d % half;
      const double angle = static_cast<double>(t) / std::pow(c_.rope_theta, 2.0 * i / D);
      const double rot = d < half ? -v[d + half] : v[d - half];
      out[static_cast<size_t>(d)] = v[d] * std::cos(angle) + rot * std::sin(angle);
    }
    for (int64_t d = 0; d < D; ++d) v[d] = out[static_cast<size_t>(d)];
  }
  Matrix attention(const Matrix& h, const std::string& p, int64_t T) const {
    const int64_t C = c_.d_model, H = c_.n_head, G = c_.n_kv_head == 0 ? H : c_.n_kv_head;
    const int64_t D = C / H, width = (H + 2 * G) * D;
    Matrix qkv = matmul_t(h, w(p + "attn.qkv.weight"), T, C, width);  // q_proj | k_proj | v_proj
    for (int64_t t = 0; t < T; ++t)
      for (int64_t head = 0; head < H + G; ++head) rotate(&qkv[at(t, head * D, width)], t);
    Matrix y(static_cast<size_t>(T * C), 0.0);
    for (int64_t head = 0; head < H; ++head) {
      const int64_t g = head / (H / G);  // repeat_kv
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += qkv[at(i, head * D + d, width)] * qkv[at(j, (H + g) * D + d, width)];
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
          m = std::max(m, s[static_cast<size_t>(j)]);
        }
        for (double& v : s) sum += (v = std::exp(v - m));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t d = 0; d < D; ++d)
            y[at(i, head * D + d, C)] +=
                s[static_cast<size_t>(j)] / sum * qkv[at(j, (H + G + g) * D + d, width)];
      }
    }
    return matmul_t(y, w(p + "attn.proj.weight"), T, C, C);
  }
  // down(silu(gate(x)) * up(x)); fc1 stacks gate_proj over up_proj.
  Matrix mlp(const Matrix& h, const std::string& p, int64_t T) const {
    const int64_t C = c_.d_model, F = c_.ffn;
    const Matrix a = matmul_t(h, w(p + "mlp.fc1.weight"), T, C, 2 * F);
    Matrix act(static_cast<size_t>(T * F));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f) {
        const double gate = a[at(t, f, 2 * F)], up = a[at(t, F + f, 2 * F)];
        act[at(t, f, F)] = gate / (1.0 + std::exp(-gate)) * up;
      }
    return matmul_t(act, w(p + "mlp.fc2.weight"), T, F, C);
  }

  GPTConfig c_;
  std::map<std::string, Matrix> w_;
};

TEST(Llama, LogitsEqualTheArchitecturesDefinitionInF64) {
  for (const auto& [kv, theta, tie] :
       {std::tuple{2, 10000.0, TieEmbeddings::kNo}, std::tuple{1, 500000.0, TieEmbeddings::kYes},
        std::tuple{4, 10000.0, TieEmbeddings::kYes}}) {
    SCOPED_TRACE(testing::Message() << "n_kv_head " << kv << " theta " << theta << " tied "
                                    << (tie == TieEmbeddings::kYes));
    const GPTConfig c = llama(kv, theta, tie);
    GPT model(c);
    const std::vector<int32_t> ids = {3, 17, 0, 22, 9, 9, 14, 1, 5, 23, 11};
    Tensor in = Tensor::empty({1, static_cast<int64_t>(ids.size())}, DType::kI32);
    std::copy(ids.begin(), ids.end(), in.data_as<int32_t>());
    autograd::NoGradGuard no_grad;
    const std::vector<float> got = model.forward(in).to_floats();
    const Matrix want = Reference(c, model.state_dict()).logits(ids);
    ASSERT_EQ(got.size(), want.size());
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::fabs(v));
    ASSERT_GT(scale, 0.5);  // the comparison below is not against near-zero logits
    // f32 throughout: each logit carries the rounding of sums of up to 2 * ffn terms through two
    // layers; 2^-16 of the largest logit bounds it with room, and a swapped rotation convention
    // or a misplaced head is off by orders of magnitude more.
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 0x1p-16 * scale) << i;
  }
}

TEST(Llama, ParametersFollowTheArchitecture) {
  GPT tied(llama(2, 10000.0, TieEmbeddings::kYes)), untied(llama(2, 10000.0, TieEmbeddings::kNo));
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : untied.state_dict()) shapes[name] = t.shape();
  EXPECT_EQ(shapes.count("wpe.weight"), 0u) << "rotary positions: no position embedding";
  EXPECT_EQ(shapes.at("lm_head.weight"), Shape({24, 32}));
  EXPECT_EQ(shapes.at("layers.0.attn.qkv.weight"), Shape({(4 + 2 * 2) * 8, 32}));
  EXPECT_EQ(shapes.at("layers.0.mlp.fc1.weight"), Shape({2 * 40, 32}));
  EXPECT_EQ(untied.num_parameters() - tied.num_parameters(), 24 * 32);
  // The GPT-2 architecture keeps its learned positions and its parameter count.
  const GPTConfig gpt2 = test::small_gpt(std::nullopt);
  EXPECT_EQ(GPT(gpt2).num_parameters(), 16 * 32 + 16 * 32 + (2 * 32 + 3 * 32 * 32 + 3 * 32) +
                                            (32 * 32 + 32) + (2 * 32 + 128 * 32 + 128) +
                                            (32 * 128 + 32) + 2 * 32);
}

TEST(Llama, BadConfigurationsAreClearErrors) {
  GPTConfig c = llama(3, 10000.0, TieEmbeddings::kNo);
  EXPECT_THAT(test::error_of([&] { GPT{c}; }), HasSubstr("n_kv_head 3 must divide n_head 4"));
  c = llama(2, 10000.0, TieEmbeddings::kNo);
  c.d_model = 36;  // head dimension 9
  EXPECT_THAT(test::error_of([&] { GPT{c}; }), HasSubstr("even integer for rotary positions"));
}

}  // namespace
}  // namespace octet::modules
