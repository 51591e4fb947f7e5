// `octet bench generate`: milliseconds per generated token of a GPT-2 124M-shaped model (12
// layers, d 768, 12 heads, vocab 50304, context 1024; random weights) at positions 128 and 1024,
// over the key/value cache and, at 128, re-running the window for every token (the cache-free
// reference). A token's cost is the wall time of the generation's later tokens (Generation's
// cached_s or window_s) over their count: the prompt's pass is left out.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "runtime/memory.h"
#include "tools/bench_common.h"

namespace octet::bench::detail {
namespace {

modules::GPTConfig generate_config(bool quick) {
  modules::GPTConfig c;
  c.vocab_size = quick ? 256 : 50304;
  c.n_layer = quick ? 2 : 12;
  c.d_model = quick ? 64 : 768;
  c.n_head = quick ? 4 : 12;
  c.max_seq_len = quick ? 64 : 1024;
  c.seed = 5;
  return c;
}

// Forward FLOPs of one token at position `pos`: the weight GEMMs, the attention over pos keys
// and the LM head.
double token_flops(const modules::GPTConfig& c, int64_t pos) {
  const double d = static_cast<double>(c.d_model);
  const double layer = 2 * (4 * d * d + 8 * d * d) + 4 * d * static_cast<double>(pos);
  return static_cast<double>(c.n_layer) * layer + 2 * d * static_cast<double>(c.vocab_size);
}

// Milliseconds per token after the first (each step reads its logits back, so a GPU has
// finished it).
double ms_per_token(modules::GPT& model, const std::optional<Recipe>& recipe, const Tensor& prompt,
                    int64_t tokens, modules::KVCacheUse use) {
  modules::GenerateOptions g;
  g.new_tokens = tokens;
  g.kv_cache = use;
  std::optional<modules::FP8Autocast> scope;
  if (recipe) scope.emplace(*recipe);
  const modules::Generation r = model.generate(prompt, g);
  if (use == modules::KVCacheUse::kYes) {
    return 1e3 * r.cached_s / static_cast<double>(r.cached_tokens - 1);
  }
  return 1e3 * r.window_s / static_cast<double>(tokens);
}

}  // namespace

void bench_generate(const Options& o, const Emit& emit,
                    const std::vector<std::pair<std::string, std::optional<Recipe>>>& precisions) {
  const modules::GPTConfig config = generate_config(o.quick);
  const int64_t steps = o.quick ? 4 : 16;
  const int reps = std::min(o.reps, 3), warmup = std::min(o.warmup, 1);
  for (const auto& [name, recipe] : precisions) {
    modules::GPTConfig c = config;
    c.recipe = recipe;
    std::optional<modules::GPT> model;
    {
      autograd::InferenceModeGuard inference;  // FP8 weights row-wise only, as `octet generate`
      model.emplace(c);
    }
    model->to(o.device);
    for (const int64_t pos : {o.quick ? int64_t{16} : int64_t{128}, c.max_seq_len}) {
      for (const modules::KVCacheUse use : {modules::KVCacheUse::kYes, modules::KVCacheUse::kNo}) {
        if (use == modules::KVCacheUse::kNo && pos == c.max_seq_len) continue;  // minutes a rep
        // The timed tokens sit at positions pos - steps .. pos - 1.
        Tensor prompt = Tensor::empty({1, pos - steps}, DType::kI32);
        for (int64_t i = 0; i < prompt.numel(); ++i)
          prompt.data_as<int32_t>()[i] = static_cast<int32_t>(i * 7919 % c.vocab_size);
        for (int i = 0; i < warmup; ++i) ms_per_token(*model, recipe, prompt, 2, use);
        reset_peak_memory(o.device);
        std::vector<double> per_token;
        for (int i = 0; i < reps; ++i)
          per_token.push_back(ms_per_token(*model, recipe, prompt, 1 + steps, use));
        Result r{std::string("generate.") + (use == modules::KVCacheUse::kYes ? "kv" : "window") +
                     "_pos" + std::to_string(pos),
                 Group::kGenerate,
                 name,
                 median(per_token),
                 token_flops(c, pos - steps / 2),
                 1,
                 memory_stats(o.device).total_peak,
                 {}};
        emit(r);
      }
    }
  }
  ops::release_workspace();
}

}  // namespace octet::bench::detail
