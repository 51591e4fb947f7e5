// Generation over the key/value cache on every device (the CPU, and cuda:0 where there is one:
// the CUDA emulation build in CI): the greedy tokens of GPT-2 and Llama models equal those of
// re-running the window for every token, also past max_seq_len, in f32 and under delayed scaling;
// the cache lives on the model's device.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "tests/support/devices.h"
#include "tests/support/small_gpt.h"

namespace octet::modules {
namespace {

class Generate : public test::DeviceTest {};
OCTET_DEVICE_TESTS(Generate);

TEST_P(Generate, CachedGreedyTokensEqualTheCacheFreeOnes) {
  for (const Arch arch : {Arch::kGPT2, Arch::kLlama}) {
    for (const std::optional<Recipe>& recipe :
         {std::optional<Recipe>(), std::optional<Recipe>(Recipe::delayed())}) {
      SCOPED_TRACE(testing::Message() << (arch == Arch::kLlama ? "llama " : "gpt2 ")
                                      << (recipe ? describe(*recipe) : "f32"));
      GPTConfig c = arch == Arch::kLlama ? test::small_llama(recipe) : test::small_gpt(recipe);
      c.n_layer = 2;
      c.init_std = 0.3f;
      GPT gpt(c);
      gpt.to(device());
      Tensor prompts = Tensor::empty({2, 5}, DType::kI32);
      for (int64_t i = 0; i < 10; ++i)
        prompts.data_as<int32_t>()[i] = static_cast<int32_t>(i * 7 % 16);
      std::optional<FP8Autocast> scope;
      if (recipe) scope.emplace(*recipe);
      GenerateOptions o;
      o.new_tokens = 16;  // the window slides after position 16
      const Generation cached = gpt.generate(prompts, o);
      o.kv_cache = KVCacheUse::kNo;
      const Generation plain = gpt.generate(prompts, o);
      const auto* a = cached.tokens.data_as<int32_t>();
      const auto* b = plain.tokens.data_as<int32_t>();
      EXPECT_EQ(std::vector<int32_t>(a, a + 32), std::vector<int32_t>(b, b + 32));
      EXPECT_EQ(cached.cached_tokens, 12);
      EXPECT_GT(cached.cache_bytes, 0);
    }
  }
}

}  // namespace
}  // namespace octet::modules
