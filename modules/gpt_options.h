// How a GPTConfig becomes the options and seeds of the modules inside a GPT (shared by
// modules/transformer.cpp and modules/gpt.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "modules/gpt.h"

namespace octet::modules::detail {

// A seed for sub-module `index` of a module seeded with `seed` (SplitMix64 of both), so every
// weight of a model draws from its own stream and a model is the same for a given config.seed.
inline uint64_t derive_seed(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline NormOptions norm_options(const GPTConfig& c) {
  return {c.norm, c.norm_eps, c.zero_centered_gamma, c.dtype};
}

inline LinearOptions linear_options(const GPTConfig& c, uint64_t seed) {
  return {c.bias, c.dtype, c.init_std, seed, c.recipe, c.fp8_primary_weights};
}

// The FP8 modules of a transformer layer, by their names inside it, and the full name of one of
// them in layer `layer` (as GPT::fp8_states() lists it), e.g. "layers.3.attn.proj".
inline constexpr std::string_view kLayerFp8Modules[] = {"attn.qkv", "attn.proj", "mlp"};
// The LM head's FP8 module (GPTConfig::fp8_lm_head).
inline constexpr std::string_view kLmHeadGemm = "lm_head_gemm";
inline std::string layer_module_name(int64_t layer, std::string_view module) {
  return "layers." + std::to_string(layer) + "." + std::string(module);
}

// The FP8 module `name` of transformer layer `layer`: kept in high precision when the config's
// first / last layers or a pattern say so.
inline bool keeps_high_precision(const GPTConfig& c, int64_t layer, const std::string& name) {
  if (layer < c.high_precision_first_layers || layer >= c.n_layer - c.high_precision_last_layers) {
    return true;
  }
  for (const std::string& p : c.high_precision_modules) {
    if (module_pattern_matches(p, name)) return true;
  }
  return false;
}

// Whether a pattern keeps the LM head's FP8 module (fp8_lm_head) in high precision.
inline bool keeps_lm_head_high_precision(const GPTConfig& c) {
  for (const std::string& p : c.high_precision_modules) {
    if (module_pattern_matches(p, kLmHeadGemm)) return true;
  }
  return false;
}

// linear_options for the FP8 module `name` of layer `layer`: without a recipe (nor FP8 primary
// weights) when it is kept in high precision.
inline LinearOptions module_linear_options(const GPTConfig& c, uint64_t seed, int64_t layer,
                                           const std::string& name) {
  LinearOptions o = linear_options(c, seed);
  if (keeps_high_precision(c, layer, name)) {
    o.recipe.reset();
    o.fp8_primary_weights = FP8PrimaryWeights::kNo;
    o.precision = Precision::kHigh;
  }
  return o;
}

}  // namespace octet::modules::detail
