// The small GPT the training tests share (1 layer, width 32, 2 heads, 16 tokens of context and
// vocabulary): FP8 GEMM shapes hold for 4 or more sequences of 16 tokens. GPT-2 or Llama form.
#pragma once

#include <optional>
#include <utility>

#include "modules/gpt.h"

namespace octet::test {

inline modules::GPTConfig small_gpt(
    std::optional<Recipe> recipe,
    modules::FP8PrimaryWeights primary = modules::FP8PrimaryWeights::kNo, DType dtype = DType::kF32,
    uint64_t seed = 9) {
  modules::GPTConfig g;
  g.vocab_size = 16;
  g.max_seq_len = 16;
  g.n_layer = 1;
  g.d_model = 32;
  g.n_head = 2;
  g.dtype = dtype;
  g.recipe = std::move(recipe);
  g.fp8_primary_weights = primary;
  g.seed = seed;
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
