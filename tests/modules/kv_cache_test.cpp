// Generation over a key/value cache (GPT::generate's default) against the cache-free path that
// re-runs the whole window for every token: the same greedy tokens for GPT-2 and Llama models in
// f32 and under every recipe whose scales do not depend on the other rows of a GEMM (delayed,
// MXFP8, blockwise), also past max_seq_len where the window slides; the cache's bytes; top-k,
// top-p and the end-of-sequence id; bad options. Plus the cached attention op against the causal
// one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <vector>

#include "autograd/grad_mode.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using ::testing::HasSubstr;

GPTConfig model(Arch arch, std::optional<Recipe> recipe) {
  GPTConfig c = arch == Arch::kLlama ? test::small_llama(std::move(recipe))
                                     : test::small_gpt(std::move(recipe));
  c.n_layer = 2;
  c.init_std = 0.3f;  // distinct logits: no near-ties for rounding to flip
  return c;
}

Tensor prompts_of(int64_t n, int64_t p) {
  Tensor t = Tensor::empty({n, p}, DType::kI32);
  for (int64_t i = 0; i < n * p; ++i) t.data_as<int32_t>()[i] = static_cast<int32_t>(i * 7 % 16);
  return t;
}

std::vector<int32_t> ints(const Tensor& t) {
  return {t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel()};
}

Generation run(GPT& gpt, const std::optional<Recipe>& recipe, const Tensor& prompts,
               GenerateOptions o, Generator* gen = nullptr) {
  std::optional<FP8Autocast> scope;
  if (recipe) scope.emplace(*recipe);
  return gpt.generate(prompts, o, gen);
}

TEST(KVCache, GreedyTokensEqualTheCacheFreePathOnBothArchitectures) {
  for (const Arch arch : {Arch::kGPT2, Arch::kLlama}) {
    for (const std::optional<Recipe>& recipe :
         {std::optional<Recipe>(), std::optional<Recipe>(Recipe::delayed()),
          std::optional<Recipe>(Recipe::mxfp8()), std::optional<Recipe>(Recipe::blockwise())}) {
      SCOPED_TRACE(testing::Message() << (arch == Arch::kLlama ? "llama " : "gpt2 ")
                                      << (recipe ? describe(*recipe) : "f32"));
      GPT gpt(model(arch, recipe));
      const Tensor prompts = prompts_of(3, 5);
      GenerateOptions o;
      o.new_tokens = 20;  // positions 5 .. 24 of a 16-position model: the window slides at 17
      const Generation cached = run(gpt, recipe, prompts, o);
      o.kv_cache = KVCacheUse::kNo;
      const Generation plain = run(gpt, recipe, prompts, o);
      EXPECT_EQ(ints(cached.tokens), ints(plain.tokens));
      EXPECT_EQ(cached.cached_tokens, 16 - 5 + 1);  // through the token at position 16
      EXPECT_EQ(plain.cached_tokens, 0);
      EXPECT_EQ(plain.cache_bytes, 0);
      // Two layers x keys and values x (rows, 16 positions, G heads of D values) f32, the G
      // key/value heads unrepeated (Llama's here: one of width 32 / n_head; GPT-2's: 32 values);
      // rows: the batch padded to the FP8 row multiple (8 per-tensor, 32 MXFP8, 16 blockwise; 1
      // in f32).
      const GPTConfig& c = gpt.config();
      const int64_t kv_width = (c.n_kv_head == 0 ? c.n_head : c.n_kv_head) * (c.d_model / c.n_head);
      EXPECT_EQ(kv_width, arch == Arch::kLlama ? 32 / c.n_head : 32);
      int64_t rows = 3;
      if (recipe)
        rows = recipe->kind == RecipeKind::kMXFP8       ? 32
               : recipe->kind == RecipeKind::kBlockwise ? 16
                                                        : 8;
      EXPECT_EQ(cached.cache_bytes, 2 * 2 * rows * 16 * kv_width * 4);
    }
  }
}

TEST(KVCache, RunsUnderTheRecipesWhoseScalesSeeTheWholeBatch) {
  // Current scaling and NVFP4 take a tensor-wide amax per GEMM, so the cache's rows (other
  // padding, one position at a time) quantize apart from the cache-free path's and greedy tokens
  // part ways (here 11 and 2 of 24 agree): the cache runs under them and gives tokens of the
  // vocabulary.
  for (const Recipe& recipe : {Recipe::current(), Recipe::nvfp4()}) {
    SCOPED_TRACE(describe(recipe));
    GPT gpt(model(Arch::kLlama, recipe));
    GenerateOptions o;
    o.new_tokens = 8;
    FP8Autocast scope(recipe);
    const Generation cached = gpt.generate(prompts_of(3, 5), o);
    const std::vector<int32_t> got = ints(cached.tokens);
    ASSERT_EQ(got.size(), 24u);
    for (const int32_t id : got) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 16);
    }
    EXPECT_EQ(cached.cached_tokens, 8);
    EXPECT_GT(cached.cache_bytes, 0);
  }
}

TEST(KVCache, PromptsOfDifferentLengthsGetTheTokensEachGetsAlone) {
  for (const Arch arch : {Arch::kGPT2, Arch::kLlama}) {
    for (const std::optional<Recipe>& recipe :
         {std::optional<Recipe>(), std::optional<Recipe>(Recipe::delayed())}) {
      SCOPED_TRACE(testing::Message() << (arch == Arch::kLlama ? "llama " : "gpt2 ")
                                      << (recipe ? describe(*recipe) : "f32"));
      GPT gpt(model(arch, recipe));
      const std::vector<std::vector<int32_t>> prompts = {
          {3, 1, 4}, {1, 5, 9, 2, 6, 5, 3}, {5, 8, 9, 7, 9}};
      GenerateOptions o;
      o.new_tokens = 6;
      const Generation batch = [&] {
        std::optional<FP8Autocast> scope;
        if (recipe) scope.emplace(*recipe);
        return gpt.generate(prompts, o);
      }();
      ASSERT_EQ(batch.tokens.shape(), (Shape{3, 6}));
      GenerateOptions apart = o;
      apart.kv_cache = KVCacheUse::kNo;  // each prompt alone, re-running its window
      const Generation reference = [&] {
        std::optional<FP8Autocast> scope;
        if (recipe) scope.emplace(*recipe);
        return gpt.generate(prompts, apart);
      }();
      EXPECT_EQ(ints(batch.tokens), ints(reference.tokens));
      for (size_t i = 0; i < prompts.size(); ++i) {
        std::optional<FP8Autocast> scope;
        if (recipe) scope.emplace(*recipe);
        const std::vector<int32_t> alone = ints(gpt.generate({prompts[i]}, o).tokens);
        const std::vector<int32_t> row(batch.tokens.data_as<int32_t>() + i * 6,
                                       batch.tokens.data_as<int32_t>() + i * 6 + 6);
        EXPECT_EQ(row, alone) << "prompt " << i;
      }
    }
  }
  GPT gpt(model(Arch::kGPT2, std::nullopt));
  GenerateOptions o;
  o.new_tokens = 10;  // 7 + 10 > 16 positions
  EXPECT_THAT(test::error_of([&] {
                gpt.generate({{1, 2}, {1, 2, 3, 4, 5, 6, 7}}, o);
              }),
              HasSubstr("longest (7 tokens) plus new_tokens 10 to fit max_seq_len 16"));
}

TEST(KVCache, TopKAndTopPSampleOnlyAmongTheMostLikely) {
  GPT gpt(model(Arch::kLlama, std::nullopt));
  const Tensor prompts = prompts_of(1, 4);
  Tensor logits;
  {
    autograd::NoGradGuard no_grad;
    logits = gpt.forward(prompts);  // (1, 4, 16)
  }
  std::vector<float> last(16);
  for (int64_t v = 0; v < 16; ++v)
    last[static_cast<size_t>(v)] = logits.to_floats()[static_cast<size_t>(3 * 16 + v)];
  std::vector<int32_t> by_rank(16);
  for (int32_t v = 0; v < 16; ++v) by_rank[static_cast<size_t>(v)] = v;
  std::sort(by_rank.begin(), by_rank.end(), [&](int32_t a, int32_t b) {
    return last[static_cast<size_t>(a)] > last[static_cast<size_t>(b)];
  });
  GenerateOptions o;
  o.new_tokens = 1;
  o.temperature = 5.f;  // nearly uniform: without the cut every token would turn up
  std::set<int32_t> seen_k2, seen_all;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Generator a(seed), b(seed);
    o.top_k = 2;
    seen_k2.insert(ints(gpt.generate(prompts, o, &a).tokens)[0]);
    o.top_k = 0;
    seen_all.insert(ints(gpt.generate(prompts, o, &b).tokens)[0]);
  }
  EXPECT_EQ(seen_k2, (std::set<int32_t>{by_rank[0], by_rank[1]}));
  EXPECT_GT(seen_all.size(), 4u);
  // top_p small enough keeps the most likely token alone: greedy.
  o.top_p = 1e-6f;
  Generator g(3);
  EXPECT_EQ(ints(gpt.generate(prompts, o, &g).tokens)[0], by_rank[0]);
  // The same seed draws the same tokens.
  o.top_p = 0.9f;
  o.new_tokens = 10;
  Generator c(9), d(9);
  EXPECT_EQ(ints(gpt.generate(prompts, o, &c).tokens), ints(gpt.generate(prompts, o, &d).tokens));
}

TEST(KVCache, AnEndOfSequenceIdStopsItsRow) {
  GPT gpt(model(Arch::kGPT2, std::nullopt));
  const Tensor prompts = prompts_of(2, 3);
  GenerateOptions o;
  o.new_tokens = 8;
  const std::vector<int32_t> free_run = ints(gpt.generate(prompts, o).tokens);
  o.eos_id = free_run[2];  // row 0's third token
  const std::vector<int32_t> stopped = ints(gpt.generate(prompts, o).tokens);
  const auto eos = *o.eos_id;
  for (int64_t row = 0; row < 2; ++row) {
    bool after = false;
    for (int64_t s = 0; s < 8; ++s) {
      const int32_t want = after ? eos : free_run[static_cast<size_t>(row * 8 + s)];
      EXPECT_EQ(stopped[static_cast<size_t>(row * 8 + s)], want) << "row " << row << " step " << s;
      after = after || want == eos;
    }
  }
}

TEST(KVCache, BadOptionsAreClearErrors) {
  GPT gpt(model(Arch::kGPT2, std::nullopt));
  const Tensor prompts = prompts_of(1, 3);
  GenerateOptions o;
  o.new_tokens = 2;
  o.top_p = 0.f;
  EXPECT_THAT(test::error_of([&] { gpt.generate(prompts, o); }), HasSubstr("top_p 0"));
  o.top_p = 1.f;
  o.top_k = -1;
  EXPECT_THAT(test::error_of([&] { gpt.generate(prompts, o); }), HasSubstr("top_k -1"));
  o.top_k = 0;
  o.eos_id = 16;
  EXPECT_THAT(test::error_of([&] { gpt.generate(prompts, o); }), HasSubstr("eos id 16"));
  // Prompts of different lengths are checked alike.
  o.eos_id.reset();
  o.temperature = -1.f;
  EXPECT_THAT(test::error_of([&] {
                gpt.generate({{1, 2}, {1, 2, 3}}, o);
              }),
              HasSubstr("temperature -1"));
}

TEST(CachedAttention, EqualsCausalAttentionRowByRow) {
  // Keys and values written one position at a time, each query attending to the cache so far,
  // give causal attention's output; so does the whole prompt at once. G key/value heads of H:
  // the cache holds G, unrepeated.
  const int64_t N = 2, T = 9, H = 4, D = 8;
  for (const int64_t G : {H, int64_t{2}, int64_t{1}}) {
    SCOPED_TRACE(testing::Message() << "G " << G);
    const int64_t W = (H + 2 * G) * D;
    const Tensor packed = test::random_tensor({N, T, W}, DType::kF32, 71);
    const float scale = 1.f / std::sqrt(static_cast<float>(D));
    const std::vector<float> want = ops::causal_attention(packed, H, G, scale).out.to_floats();
    Tensor k = Tensor::zeros({N, 12, G, D}, DType::kF32),
           v = Tensor::zeros({N, 12, G, D}, DType::kF32);
    ops::kv_cache_write(packed, k, v, 0);
    const std::vector<float> whole = ops::cached_attention(packed, k, v, 0, scale).to_floats();
    Tensor k2 = Tensor::zeros({N, 12, G, D}, DType::kF32),
           v2 = Tensor::zeros({N, 12, G, D}, DType::kF32);
    std::vector<float> rows(want.size());
    for (int64_t t = 0; t < T; ++t) {
      Tensor one = Tensor::empty({N, 1, W}, DType::kF32);
      for (int64_t n = 0; n < N; ++n)
        std::copy_n(packed.data_as<float>() + (n * T + t) * W, W, one.data_as<float>() + n * W);
      ops::kv_cache_write(one, k2, v2, t);
      const std::vector<float> y = ops::cached_attention(one, k2, v2, t, scale).to_floats();
      for (int64_t n = 0; n < N; ++n)
        std::copy_n(y.data() + n * H * D, H * D, rows.data() + (n * T + t) * H * D);
    }
    // f32 sums of up to T products in another order: a few ulps of the largest output.
    ASSERT_EQ(whole.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(whole[i], want[i], 1e-5) << i;
      EXPECT_NEAR(rows[i], want[i], 1e-5) << i;
    }
    EXPECT_THAT(test::error_of([&] { ops::kv_cache_write(packed, k, v, 4); }),
                HasSubstr("do not fit a cache of 12"));
  }
  // A packed width that is no (H + 2G) D with H a multiple of G.
  const Tensor odd = test::random_tensor({N, T, 5 * D}, DType::kF32, 72);
  Tensor k = Tensor::zeros({N, 12, 2, D}, DType::kF32),
         v = Tensor::zeros({N, 12, 2, D}, DType::kF32);
  EXPECT_THAT(test::error_of([&] { ops::kv_cache_write(odd, k, v, 0); }),
              HasSubstr("with H a positive multiple of 2"));
}

}  // namespace
}  // namespace octet::modules
