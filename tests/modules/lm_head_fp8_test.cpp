// The LM head under the recipe (GPTConfig::fp8_lm_head, fp8.lm_head): ForeignWeightLinear's
// three GEMMs against f64 sums of the reference casts (CUDA's host conversions where present),
// the gradient reaching the weight's owner; a GPT runs its head in FP8 only when asked, keeps it
// out by the pattern "lm_head_gemm", checkpoints its FP8 state, and names a vocabulary the shape
// rule refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/linear.h"
#include "runtime/fp8.h"
#include "tests/modules/module_test_util.h"
#include "tests/support/product_nt.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::modules_that_ran_fp8;
using test::random_ids;
using test::transposed;

// Current scaling of a whole tensor to `dtype` (TE's rule: fp8_max / amax), then back: the
// values the GEMM multiplies, divided by nothing (the caller divides by both scales).
struct Scaled {
  std::vector<double> q;  // decode(cast(x * scale))
  double scale;
};
Scaled current_cast(const std::vector<float>& x, DType dtype) {
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float fp8_max = dtype == DType::kE4M3 ? 448.f : 57344.f;
  const float scale = fp8_max / amax;
  Scaled s{{}, scale};
  for (float v : x) {
    const uint8_t code = test::reference_cast(v * scale, dtype);
    s.q.push_back(dtype == DType::kE4M3 ? from_e4m3(code) : from_e5m2(code));
  }
  return s;
}

// C (m, n) = A (m, k) · B (n, k)ᵀ / (sa * sb) in f64, and the sum of |terms| of each entry (the
// bound of f32 accumulation's error).
using Product = test::ProductNT;
Product product(const Scaled& a, const Scaled& b, int64_t m, int64_t n, int64_t k) {
  Product p = test::product_nt(a.q, b.q, m, n, k);
  for (double& e : p.value) e /= a.scale * b.scale;
  for (double& e : p.magnitude) e /= a.scale * b.scale;
  return p;
}

void expect_near_sum(const std::vector<float>& got, const Product& want, const char* what) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    // f32 accumulation of up to 64 terms: a few units of f32 rounding of the terms' magnitude.
    if (std::fabs(got[i] - want.value[i]) > 1e-6 * want.magnitude[i] * 8 + 1e-30) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " entries off";
}

TEST(LmHeadFp8, ForeignWeightLinearsGemmsAreTheRecipesCasts) {
  const int64_t rows = 32, in = 64, out = 48;
  const Tensor x_value = test::random_tensor({rows, in}, DType::kF32, 61);
  const Tensor g = test::random_tensor({rows, out}, DType::kF32, 62);
  Tensor owner = test::random_tensor({out, in}, DType::kF32, 63, 0.3f);
  autograd::set_requires_grad(owner);
  Tensor x = x_value.clone();
  autograd::set_requires_grad(x);
  ForeignWeightLinear head("LM head", Recipe::current(), 1);
  Tensor y;
  {
    FP8Autocast scope(Recipe::current());  // hybrid: E4M3 forward, E5M2 gradients
    y = head.forward(x, owner);
  }
  autograd::backward(y, g);
  const std::vector<float> xs = x_value.to_floats(), ws = owner.to_floats(), gs = g.to_floats();
  const Scaled qx = current_cast(xs, DType::kE4M3), qw = current_cast(ws, DType::kE4M3);
  expect_near_sum(y.to_floats(), product(qx, qw, rows, out, in), "Y = X·Wᵀ");
  const Scaled qdy = current_cast(gs, DType::kE5M2);
  // dX = dY·W: rows of dY against columns of W (W transposed, scale unchanged per tensor).
  const Scaled qwt = current_cast(transposed(ws, out, in), DType::kE4M3);
  expect_near_sum(autograd::grad(x).to_floats(), product(qdy, qwt, rows, in, out), "dX = dY·W");
  // dW = dYᵀ·X, the gradient of the weight's owner.
  const Scaled qdyt = current_cast(transposed(gs, rows, out), DType::kE5M2);
  const Scaled qxt = current_cast(transposed(xs, rows, in), DType::kE4M3);
  expect_near_sum(autograd::grad(owner).to_floats(), product(qdyt, qxt, out, in, rows),
                  "dW = dYᵀ·X");
}

GPTConfig head_config() {
  GPTConfig c = test::gpt_config(/*vocab_size=*/32, /*n_layer=*/2, /*n_head=*/4, /*seed=*/5);
  c.init_std = 0.1f;
  c.recipe = Recipe::delayed();
  c.fp8_lm_head = true;
  return c;
}

TEST(LmHeadFp8, GptRunsItsHeadInFp8OnlyWhenAskedAndByPattern) {
  const Tensor ids = random_ids(2, 8, 32, 64);
  GPTConfig c = head_config();
  c.high_precision_first_layers = 2;  // the blocks out of FP8: only the head is left
  GPT on(c);
  GPTConfig off_config = c;
  off_config.fp8_lm_head = false;
  GPT off(off_config);
  GPTConfig kept_config = c;
  kept_config.high_precision_modules = {"lm_head_gemm"};
  GPT kept(kept_config);
  std::vector<float> logits_on, logits_off, logits_kept;
  {
    FP8Autocast scope(*c.recipe);
    logits_on = on.forward(ids).to_floats();
    logits_off = off.forward(ids).to_floats();
    logits_kept = kept.forward(ids).to_floats();
  }
  EXPECT_EQ(modules_that_ran_fp8(on), (std::set<std::string>{"lm_head_gemm"}));
  EXPECT_TRUE(modules_that_ran_fp8(kept).empty());
  EXPECT_NE(logits_on, logits_off);
  EXPECT_EQ(logits_kept, logits_off) << "kept by its pattern: the high-precision head";
  // Off by default: no such module, so default checkpoints keep their keys.
  for (const auto& [name, t] : off.buffers())
    EXPECT_EQ(name.find("lm_head_gemm"), std::string::npos);
}

TEST(LmHeadFp8, TiedTableTrainsThroughTheFp8HeadAndCheckpointsItsState) {
  const Tensor ids = random_ids(2, 8, 32, 65), targets = random_ids(2, 8, 32, 66);
  GPTConfig c = head_config();
  GPT gpt(c);
  {
    FP8Autocast scope(*c.recipe);
    autograd::backward(gpt.loss(ids, targets));
  }
  const Tensor* table = nullptr;
  for (Parameter& p : gpt.parameters()) {
    if (p.name == "wte.weight") table = p.tensor;
  }
  ASSERT_NE(table, nullptr);
  const std::vector<float> grad = autograd::grad(*table).to_floats();
  EXPECT_TRUE(std::any_of(grad.begin(), grad.end(), [](float v) { return v != 0.f; }));
  // A second forward moves the delayed scales; a fresh model loading the state dict agrees.
  {
    FP8Autocast scope(*c.recipe);
    gpt.forward(ids);
  }
  const auto state = gpt.state_dict();
  bool has_head_meta = false;
  for (const auto& [name, t] : state) has_head_meta |= name.starts_with("lm_head_gemm.fp8_meta");
  EXPECT_TRUE(has_head_meta);
  GPTConfig other = c;
  other.seed = 77;
  GPT fresh(other);
  fresh.load_state_dict(state);
  autograd::NoGradGuard no_grad;
  FP8Autocast scope(*c.recipe);
  EXPECT_EQ(fresh.forward(ids).to_floats(), gpt.forward(ids).to_floats());
}

TEST(LmHeadFp8, AVocabularyTheShapeRuleRefusesIsNamed) {
  GPTConfig c = head_config();
  c.vocab_size = 40;  // NVFP4 needs multiples of 16
  c.recipe = Recipe::nvfp4();
  const std::string message = test::error_of([&] { GPT gpt(c); });
  EXPECT_NE(message.find("LM head"), std::string::npos) << message;
  EXPECT_NE(message.find("40"), std::string::npos) << message;
  c.high_precision_modules = {"lm_head_gemm"};
  EXPECT_NO_THROW(GPT{c});
}

}  // namespace
}  // namespace octet::modules
