// GPT: against its composition from autograd primitives (tied LM head included), loss, stable
// parameter names, generation (greedy, sampled, padded under FP8), FP8 shape errors, weight
// caching through every FP8 module, state dict round trip with FP8 metas, and Module::to.
#include "modules/gpt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/shape.h"
#include "modules/fp8_autocast.h"
#include "modules/optimizer.h"
#include "tests/modules/module_test_util.h"
#include "tests/modules/transformer_reference.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::modules_that_ran_fp8;
using test::random_ids;

GPTConfig tiny_config() {
  GPTConfig c = test::gpt_config(/*vocab_size=*/16, /*n_layer=*/1, /*n_head=*/4, /*seed=*/3);
  c.init_std = 0.1f;  // logits far from uniform, so argmax and cross-entropy are not trivial
  return c;
}

Tensor positions(int64_t batch, int64_t seq) {
  Tensor t = Tensor::empty({batch, seq}, DType::kI32);
  for (int64_t i = 0; i < batch * seq; ++i) t.data_as<int32_t>()[i] = static_cast<int32_t>(i % seq);
  return t;
}

std::vector<int32_t> ints(const Tensor& t) {
  const int32_t* p = t.data_as<int32_t>();
  return {p, p + t.numel()};
}

TEST(GPT, LogitsShapeAndLossIsCrossEntropyOfTheLogits) {
  GPT gpt(tiny_config());
  const Tensor ids = random_ids(2, 8, 16, 1);
  Tensor targets = random_ids(2, 8, 16, 2);
  targets.data_as<int32_t>()[0] = -100;  // ignored positions
  targets.data_as<int32_t>()[9] = -100;
  const Tensor logits = gpt.forward(ids);
  ASSERT_EQ(logits.shape(), (Shape{2, 8, 16}));
  // By hand: mean over the 14 counted positions of logsumexp(logits) - logits[target].
  const std::vector<float> l = logits.to_floats();
  double total = 0;
  int count = 0;
  for (int64_t r = 0; r < 16; ++r) {
    const int32_t t = targets.data_as<int32_t>()[r];
    if (t == -100) continue;
    double mx = -1e30, s = 0;
    for (int64_t v = 0; v < 16; ++v) mx = std::max(mx, static_cast<double>(l[r * 16 + v]));
    for (int64_t v = 0; v < 16; ++v) s += std::exp(l[r * 16 + v] - mx);
    total += mx + std::log(s) - l[r * 16 + t];
    ++count;
  }
  ASSERT_EQ(count, 14);
  EXPECT_NEAR(gpt.loss(ids, targets).item(), total / count, 1e-5);
}

TEST(GPT, EqualsPrimitivesAndTheTiedTableGetsGradientFromBothUses) {
  GPT gpt(tiny_config());
  const Tensor ids = random_ids(2, 8, 16, 3);
  const Tensor targets = random_ids(2, 8, 16, 4);
  const test_ref::Params p(gpt);
  // The reference unties the LM head: its own copy of the table, so each use's gradient is seen.
  Tensor head = p["wte.weight"].clone();
  autograd::set_requires_grad(head);
  Tensor x = autograd::add(autograd::embedding(p["wte.weight"], ids),
                           autograd::embedding(p["wpe.weight"], positions(2, 8)));
  x = test_ref::layer(p, "layers.0.", x, 4);
  x = autograd::layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], 1e-5f);
  const Tensor ref_logits = autograd::linear(x, head);
  const Tensor ref_loss =
      autograd::cross_entropy(autograd::reshape(ref_logits, {16, 16}), targets.reshape({16}));
  autograd::backward(ref_loss);

  EXPECT_TRUE(
      test::all_close(gpt.forward(ids).to_floats(), test::to_doubles(ref_logits), {1e-5, 1e-4}));
  const Tensor loss = gpt.loss(ids, targets);
  EXPECT_NEAR(loss.item(), ref_loss.item(), 1e-5);
  autograd::backward(loss);
  for (const Parameter& param : gpt.parameters()) {
    std::vector<double> want = test::to_doubles(autograd::grad(p[param.name]));
    if (param.name == "wte.weight") {
      const std::vector<double> from_head = test::to_doubles(autograd::grad(head));
      double lookup_norm = 0, head_norm = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        lookup_norm += want[i] * want[i];
        head_norm += from_head[i] * from_head[i];
        want[i] += from_head[i];
      }
      EXPECT_GT(lookup_norm, 1e-8) << "the lookup gave the table no gradient";
      EXPECT_GT(head_norm, 1e-8) << "the LM head gave the table no gradient";
    }
    EXPECT_TRUE(test::all_close(autograd::grad(*param.tensor).to_floats(), want, {1e-5, 1e-4}))
        << param.name;
  }
}

TEST(GPT, ParameterAndBufferNamesAreStable) {
  GPTConfig c = tiny_config();
  c.recipe = Recipe::delayed();  // metas exist from construction
  GPT gpt(c);
  std::vector<std::string> names;
  for (const Parameter& p : gpt.parameters()) names.push_back(p.name);
  const std::vector<std::string> want = {"wte.weight",
                                         "wpe.weight",
                                         "layers.0.attn.qkv.norm.weight",
                                         "layers.0.attn.qkv.norm.bias",
                                         "layers.0.attn.qkv.weight",
                                         "layers.0.attn.qkv.bias",
                                         "layers.0.attn.proj.weight",
                                         "layers.0.attn.proj.bias",
                                         "layers.0.mlp.norm.weight",
                                         "layers.0.mlp.norm.bias",
                                         "layers.0.mlp.fc1.weight",
                                         "layers.0.mlp.fc1.bias",
                                         "layers.0.mlp.fc2.weight",
                                         "layers.0.mlp.fc2.bias",
                                         "ln_f.weight",
                                         "ln_f.bias"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(gpt.num_parameters(), 16 * 32 + 16 * 32 + (2 * 32 + 96 * 32 + 96) + (32 * 32 + 32) +
                                      (2 * 32 + 128 * 32 + 128 + 32 * 128 + 32) + 2 * 32);
  std::vector<std::string> buffers;
  for (const auto& [name, t] : gpt.buffers()) buffers.push_back(name);
  for (const char* module : {"layers.0.attn.qkv", "layers.0.attn.proj", "layers.0.mlp"}) {
    const std::string meta = std::string(module) + ".fp8_meta.forward.0.amax_history";
    EXPECT_NE(std::find(buffers.begin(), buffers.end(), meta), buffers.end()) << meta;
  }
}

// The greedy continuation computed step by step from forward(), on the last max_seq_len tokens.
std::vector<int32_t> greedy_by_hand(GPT& gpt, const Tensor& prompts, int64_t new_tokens) {
  autograd::NoGradGuard no_grad;
  const int64_t n = prompts.size(0), max_seq = gpt.config().max_seq_len;
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < prompts.size(1); ++t)
      seqs[static_cast<size_t>(i)].push_back(prompts.data_as<int32_t>()[i * prompts.size(1) + t]);
  }
  std::vector<int32_t> out(static_cast<size_t>(n * new_tokens));
  for (int64_t step = 0; step < new_tokens; ++step) {
    const int64_t len = static_cast<int64_t>(seqs[0].size()), window = std::min(len, max_seq);
    Tensor ids = Tensor::empty({n, window}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t t = 0; t < window; ++t)
        ids.data_as<int32_t>()[i * window + t] = seqs[static_cast<size_t>(i)][len - window + t];
    }
    const std::vector<float> logits = gpt.forward(ids).to_floats();
    const int64_t vocab = gpt.config().vocab_size;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = logits.data() + (i * window + window - 1) * vocab;
      const auto token = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      seqs[static_cast<size_t>(i)].push_back(token);
      out[static_cast<size_t>(i * new_tokens + step)] = token;
    }
  }
  return out;
}

TEST(GPT, GreedyGenerationIsTheArgmaxOfForwardAndDeterministic) {
  GPTConfig c = tiny_config();
  c.max_seq_len = 8;  // 4 prompt + 7 new tokens: the window slides
  GPT gpt(c);
  const Tensor prompts = random_ids(3, 4, 16, 5);
  const Tensor out = gpt.generate(prompts, 7);
  ASSERT_EQ(out.shape(), (Shape{3, 7}));
  EXPECT_EQ(ints(out), greedy_by_hand(gpt, prompts, 7));
  EXPECT_EQ(ints(gpt.generate(prompts, 7)), ints(out));
  const std::vector<int32_t> all = ints(out);
  EXPECT_GT(std::set<int32_t>(all.begin(), all.end()).size(), 1u) << "a constant continuation";
}

// A bf16 model's logits are bf16 (activations keep the model's dtype); generation reads them.
TEST(GPT, Bf16GreedyGenerationIsTheArgmaxOfItsBf16Logits) {
  GPTConfig c = tiny_config();
  c.dtype = DType::kBF16;
  GPT gpt(c);
  const Tensor prompts = random_ids(3, 4, 16, 6);
  EXPECT_EQ(gpt.forward(prompts).dtype(), DType::kBF16);
  const Tensor out = gpt.generate(prompts, 5);
  ASSERT_EQ(out.shape(), (Shape{3, 5}));
  EXPECT_EQ(ints(out), greedy_by_hand(gpt, prompts, 5));
}

TEST(GPT, SamplingFollowsTheGeneratorAndGenerationKeepsNoAutogradState) {
  GPT gpt(tiny_config());
  const Tensor prompts = random_ids(2, 3, 16, 6);
  Generator a(42), b(42), other(43);
  const Tensor first = gpt.generate(prompts, 12, 1.5f, &a);
  EXPECT_EQ(ints(first), ints(gpt.generate(prompts, 12, 1.5f, &b)));
  EXPECT_NE(ints(first), ints(gpt.generate(prompts, 12, 1.5f, &other)));
  for (int32_t t : ints(first)) EXPECT_TRUE(t >= 0 && t < 16) << t;
  EXPECT_FALSE(autograd::requires_grad(first));
  for (const Parameter& p : gpt.parameters()) EXPECT_FALSE(autograd::grad(*p.tensor).defined());
  EXPECT_NE(test::error_of([&] { gpt.generate(prompts, 2, 1.f, nullptr); }).find("Generator"),
            std::string::npos);
}

// Every value in the state dict, flattened.
std::vector<float> state_values(GPT& gpt) {
  std::vector<float> out;
  for (const auto& [name, t] : gpt.state_dict()) {
    const std::vector<float> v = t.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(GPT, GenerationUnderFp8PadsOddBatchesHarmlessly) {
  const Tensor prompts = random_ids(3, 5, 16, 7);  // 15 rows: breaks every FP8 row rule
  // The same 3 prompts among 8: 40 token rows, padded only to the MXFP8 rule.
  Tensor eight = random_ids(8, 5, 16, 8);
  std::copy_n(prompts.data_as<int32_t>(), 15, eight.data_as<int32_t>());
  for (const Recipe& recipe : {Recipe::delayed(), Recipe::current(), Recipe::mxfp8()}) {
    SCOPED_TRACE(describe(recipe));
    GPTConfig c = tiny_config();
    c.recipe = recipe;  // the FP8 metas exist before generation, so the state can be compared
    GPT gpt(c);
    const std::vector<float> before = state_values(gpt);
    FP8Autocast scope(recipe);
    const Tensor out = gpt.generate(prompts, 6);
    ASSERT_EQ(out.shape(), (Shape{3, 6}));
    for (int32_t t : ints(out)) EXPECT_TRUE(t >= 0 && t < 16) << t;
    // Delayed scaling (scales fixed, no amax recorded in inference) and MXFP8 (blocks within a
    // row) quantize each token row on its own, so padding rows change nothing. Current scaling's
    // per-tensor amax sees the padding, so it only has to run.
    if (recipe.kind != RecipeKind::kCurrent) {
      const std::vector<int32_t> among_eight = ints(gpt.generate(eight, 6));
      EXPECT_EQ(ints(out), std::vector<int32_t>(among_eight.begin(), among_eight.begin() + 18));
    }
    EXPECT_EQ(state_values(gpt), before) << "generation changed weights or FP8 metas";
  }
}

TEST(GPT, Fp8RowRuleIsAClearError) {
  GPT gpt(tiny_config());
  {
    FP8Autocast scope(Recipe::delayed());
    const std::string e = test::error_of([&] { gpt.forward(random_ids(3, 5, 16, 9)); });
    EXPECT_NE(e.find("(B, T) = (3, 5)"), std::string::npos) << e;
    EXPECT_NE(e.find("multiple of 8"), std::string::npos) << e;
  }
  {
    FP8Autocast scope(Recipe::mxfp8());
    const std::string e = test::error_of([&] { gpt.forward(random_ids(2, 8, 16, 9)); });
    EXPECT_NE(e.find("16 token rows"), std::string::npos) << e;
    EXPECT_NE(e.find("multiple of 32"), std::string::npos) << e;
  }
  EXPECT_NE(test::error_of([&] { gpt.forward(random_ids(1, 17, 16, 9)); }).find("max_seq_len 16"),
            std::string::npos);
}

// bf16 parameters (f32 activations): the loss stays within bf16 rounding of the f32 model with
// the same seed, every gradient arrives in bf16, and under FP8 it runs too.
TEST(GPT, Bf16ParametersTrainAlongsideF32) {
  GPTConfig c32 = tiny_config(), c16 = tiny_config();
  c16.dtype = DType::kBF16;
  GPT g32(c32), g16(c16);
  const Tensor ids = random_ids(2, 16, c32.vocab_size, 3);
  const Tensor targets = random_ids(2, 16, c32.vocab_size, 4);
  const Tensor l32 = g32.loss(ids, targets), l16 = g16.loss(ids, targets);
  EXPECT_NEAR(l16.item(), l32.item(), 0.02 * std::fabs(l32.item()));
  autograd::backward(l16);
  for (const Parameter& p : g16.parameters()) {
    ASSERT_TRUE(autograd::grad(*p.tensor).defined()) << p.name;
    EXPECT_EQ(autograd::grad(*p.tensor).dtype(), DType::kBF16) << p.name;
  }
  FP8Autocast scope(Recipe::delayed());
  const Tensor l8 = g16.loss(ids, targets);
  EXPECT_NEAR(l8.item(), l32.item(), 0.125 * std::fabs(l32.item()));
}

TEST(GPT, UnsupportedConfigsAreClearErrors) {
  GPTConfig c = tiny_config();
  c.dtype = DType::kF16;
  EXPECT_NE(test::error_of([&] { GPT bad(c); }).find("f16 is not supported"), std::string::npos);
  c = tiny_config();
  c.n_head = 5;
  EXPECT_NE(test::error_of([&] { GPT bad(c); }).find("multiple of n_head 5"), std::string::npos);
  c = tiny_config();
  c.dropout = 1.f;
  EXPECT_NE(test::error_of([&] { GPT bad(c); }).find("dropout 1"), std::string::npos);
}

bool is_gemm_weight(const std::string& name) {
  for (const char* w : {"qkv.weight", "proj.weight", "fc1.weight", "fc2.weight"}) {
    const std::string s(w);
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return true;
  }
  return false;
}

TEST(GPT, FirstMicrobatchReachesEveryFp8Module) {
  GPT gpt(tiny_config());
  const Tensor ids = random_ids(2, 8, 16, 10);
  FP8Autocast scope(Recipe::delayed());
  EXPECT_NE(test::error_of([&] { gpt.forward(ids, FirstMicrobatch::kNo); }).find("weight cache"),
            std::string::npos);
  const std::vector<float> cached = gpt.forward(ids, FirstMicrobatch::kYes).to_floats();
  // Change every GEMM weight: a forward that reuses the caches cannot see it, a fresh cast can.
  int changed = 0;
  for (const Parameter& p : gpt.parameters()) {
    if (!is_gemm_weight(p.name)) continue;
    float* w = p.tensor->data_as<float>();
    for (int64_t i = 0; i < p.tensor->numel(); ++i) w[i] *= 1.5f;
    p.tensor->bump_version();
    ++changed;
  }
  EXPECT_EQ(changed, 4);
  EXPECT_EQ(gpt.forward(ids, FirstMicrobatch::kNo).to_floats(), cached);
  EXPECT_NE(gpt.forward(ids, FirstMicrobatch::kUnset).to_floats(), cached);
}

TEST(GPT, StateDictRoundTripWithFp8MetasGivesIdenticalLogits) {
  GPTConfig c = tiny_config();
  c.recipe = Recipe::delayed();
  GPT gpt(c);
  Optimizer opt(gpt.parameters(), {});
  for (int step = 0; step < 3; ++step) {
    Tensor loss;
    {
      FP8Autocast scope(*c.recipe);
      loss = gpt.loss(random_ids(2, 8, 16, 20 + static_cast<uint64_t>(step)),
                      random_ids(2, 8, 16, 30 + static_cast<uint64_t>(step)));
    }
    autograd::backward(loss);
    opt.step(1e-2f);
    opt.zero_grad();
  }
  const auto state = gpt.state_dict();
  bool scale_moved = false;
  for (const auto& [name, t] : state) {
    if (name.find("fp8_meta") != std::string::npos && name.ends_with(".scale"))
      scale_moved = scale_moved || t.to_floats()[0] != 1.f;
  }
  EXPECT_TRUE(scale_moved) << "training left every FP8 scale at 1: the round trip proves little";

  GPTConfig other = c;
  other.seed = 99;
  GPT fresh(other);
  fresh.load_state_dict(state);
  const Tensor ids = random_ids(4, 8, 16, 40);
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(fresh.forward(ids).to_floats(), gpt.forward(ids).to_floats());
  FP8Autocast scope(*c.recipe);
  EXPECT_EQ(fresh.forward(ids).to_floats(), gpt.forward(ids).to_floats());
}

// The scales their owners require positive (an FP8 meta's scale and scale_inv, a per-tensor FP8
// weight's scale_inv) are checked before anything is copied: the model keeps its values.
TEST(GPT, LoadStateDictRefusesABadScaleAndKeepsTheModel) {
  GPTConfig c = tiny_config();
  c.recipe = Recipe::delayed();
  c.fp8_primary_weights = FP8PrimaryWeights::kYes;
  GPT source(c);
  GPTConfig other = c;
  other.seed = 99;
  GPT target(other);
  const auto bytes = [](const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data());
    return std::vector<uint8_t>(p, p + t.nbytes());
  };
  std::vector<std::vector<uint8_t>> kept;
  for (const auto& [name, t] : target.state_dict()) kept.push_back(bytes(t));
  for (const std::string bad :
       {"layers.0.attn.qkv.fp8_meta.forward.0.scale", "layers.0.mlp.fp8_meta.backward.1.scale_inv",
        "layers.0.attn.proj.weight.scale_inv"}) {
    for (const float v : {0.f, -2.f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
      std::vector<std::pair<std::string, Tensor>> state;
      bool found = false;
      for (const auto& [name, t] : source.state_dict()) {
        Tensor copy = t.clone();
        if (name == bad) {
          ASSERT_EQ(copy.dtype(), DType::kF32) << name;
          copy.data_as<float>()[0] = v;
          found = true;
        }
        state.emplace_back(name, copy);
      }
      ASSERT_TRUE(found) << bad;
      const std::string message = test::error_of([&] { target.load_state_dict(state); });
      EXPECT_NE(message.find(bad), std::string::npos) << message;
      EXPECT_NE(message.find("expected a finite FP8 scale > 0"), std::string::npos) << message;
    }
  }
  const auto after = target.state_dict();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(bytes(after[i].second), kept[i]) << after[i].first << " changed";
  }
  // Zeros where no scale is (the amax histories start so) load.
  EXPECT_NO_THROW(target.load_state_dict(source.state_dict()));
}

TEST(GPT, HighPrecisionModulesStayOutOfFp8) {
  GPTConfig c = tiny_config();
  c.n_layer = 3;
  c.recipe = Recipe::delayed();
  c.high_precision_first_layers = 1;
  c.high_precision_last_layers = 1;
  c.high_precision_modules = {"layers.*.attn.proj"};
  const Tensor ids = random_ids(2, 8, 16, 50);
  {
    GPT gpt(c);
    FP8Autocast scope(*c.recipe);
    gpt.forward(ids);
    EXPECT_EQ(modules_that_ran_fp8(gpt),
              (std::set<std::string>{"layers.1.attn.qkv", "layers.1.mlp"}));
  }
  {
    GPTConfig one = c;
    one.high_precision_first_layers = one.high_precision_last_layers = 0;
    one.high_precision_modules = {"layers.2", "layers.?.mlp"};
    GPT gpt(one);
    FP8Autocast scope(*c.recipe);
    gpt.forward(ids);
    EXPECT_EQ(modules_that_ran_fp8(gpt),
              (std::set<std::string>{"layers.0.attn.qkv", "layers.0.attn.proj", "layers.1.attn.qkv",
                                     "layers.1.attn.proj"}));
  }
  // Every layer kept: the FP8 scope changes nothing, and the model is the f32 model bit for bit.
  GPTConfig all = c;
  all.high_precision_first_layers = 3;
  all.fp8_primary_weights = FP8PrimaryWeights::kYes;  // not for modules kept in high precision
  GPTConfig plain = tiny_config();
  plain.n_layer = 3;
  GPT kept(all), reference(plain);
  autograd::NoGradGuard no_grad;
  const std::vector<float> want = reference.forward(ids).to_floats();
  EXPECT_EQ(kept.forward(ids).to_floats(), want);
  FP8Autocast scope(*c.recipe);
  EXPECT_EQ(kept.forward(ids).to_floats(), want);
  EXPECT_TRUE(modules_that_ran_fp8(kept).empty());
}

TEST(GPT, ModulePatternsMatchWholeNamesOrEnclosingModules) {
  EXPECT_TRUE(module_pattern_matches("layers.1", "layers.1.mlp"));
  EXPECT_TRUE(module_pattern_matches("layers.1.mlp", "layers.1.mlp"));
  EXPECT_FALSE(module_pattern_matches("layers.1", "layers.10.mlp"));
  EXPECT_TRUE(module_pattern_matches("layers.*.proj", "layers.12.attn.proj"));
  EXPECT_TRUE(module_pattern_matches("*.proj", "layers.0.attn.proj"));
  EXPECT_FALSE(module_pattern_matches("layers.?.mlp", "layers.12.mlp"));
  EXPECT_FALSE(module_pattern_matches("layers.0.ml", "layers.0.mlp"));
}

TEST(GPT, HighPrecisionSettingsThatKeepNothingAreClearErrors) {
  GPTConfig c = tiny_config();
  c.n_layer = 2;
  c.high_precision_modules = {"layers.0.mlp", "layers.2"};
  EXPECT_THAT(
      test::error_of([&] { GPT gpt(c); }),
      ::testing::HasSubstr(
          "high-precision module pattern \"layers.2\" names no FP8 module of this GPT (they are "
          "layers.0.attn.qkv, layers.0.attn.proj, layers.0.mlp, layers.1.attn.qkv, "
          "layers.1.attn.proj, layers.1.mlp)"));
  c.high_precision_modules = {"layers.0.mlp.fc"};  // a name inside a module, not a prefix at a dot
  EXPECT_NE(test::error_of([&] { GPT gpt(c); }).find("\"layers.0.mlp.fc\" names no FP8 module"),
            std::string::npos);
  c.high_precision_modules.clear();
  c.high_precision_last_layers = -1;
  EXPECT_NE(test::error_of([&] { GPT gpt(c); }).find("high_precision_last_layers -1 must be >= 0"),
            std::string::npos);
}

TEST(GPT, ToCpuIsANoOpAndCudaWithoutAGpuIsAClearError) {
  GPT gpt(tiny_config());
  const Tensor ids = random_ids(2, 8, 16, 11);
  const std::vector<float> before = gpt.forward(ids).to_floats();
  gpt.to(Device::cpu());
  EXPECT_EQ(gpt.forward(ids).to_floats(), before);
  if (cuda_device_count() > 0) GTEST_SKIP() << "the move to CUDA is tested in tests/cuda";
  const std::string e = test::error_of([&] { gpt.to(Device::cuda(0)); });
  EXPECT_NE(e.find("CUDA"), std::string::npos) << e;
  EXPECT_EQ(gpt.forward(ids).to_floats(), before) << "a failed move changed the model";
}

}  // namespace
}  // namespace octet::modules
