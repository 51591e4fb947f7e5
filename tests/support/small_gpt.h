// The small GPT the training tests share (1 layer, width 32, 2 heads, 16 tokens of context and
// vocabulary): FP8 GEMM shapes hold for 4 or more sequences of 16 tokens. GPT-2 or Llama form.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "modules/gpt.h"

namespace octet::test {

// A GPT-2 form model of width 32 and 16 tokens of context: the size the module tests build from.
inline modules::GPTConfig gpt_config(int64_t vocab_size, int64_t n_layer, int64_t n_head,
                                     uint64_t seed) {
  modules::GPTConfig g;
  g.vocab_size = vocab_size;
  g.max_seq_len = 16;
  g.n_layer = n_layer;
  g.d_model = 32;
  g.n_head = n_head;
  g.seed = seed;
  return g;
}

inline modules::GPTConfig small_gpt(
    std::optional<Recipe> recipe,
    modules::FP8PrimaryWeights primary = modules::FP8PrimaryWeights::kNo, DType dtype = DType::kF32,
    uint64_t seed = 9) {
  modules::GPTConfig g = gpt_config(/*vocab_size=*/16, /*n_layer=*/1, /*n_head=*/2, seed);
  g.dtype = dtype;
  g.recipe = std::move(recipe);
  g.fp8_primary_weights = primary;
  return g;
}

// The same model in Llama form: rotary positions, one key/value head for its two query heads,
// RMSNorm, SwiGLU, no biases, an untied LM head.
inline modules::GPTConfig small_llama(
    std::optional<Recipe> recipe,
    modules::FP8PrimaryWeights primary = modules::FP8PrimaryWeights::kNo) {
  modules::GPTConfig g = small_gpt(std::move(recipe), primary);
  g.arch = modules::Arch::kLlama;
  g.n_kv_head = 1;
  g.norm = modules::NormKind::kRMSNorm;
  g.activation = modules::MLPActivation::kSwiglu;
  g.bias = modules::Bias::kNo;
  g.tie_embeddings = modules::TieEmbeddings::kNo;
  return g;
}

}  // namespace octet::test
