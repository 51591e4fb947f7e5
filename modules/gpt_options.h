// How a GPTConfig becomes the options and seeds of the modules inside a GPT (shared by
// modules/transformer.cpp and modules/gpt.cpp).
#pragma once

#include <cstdint>

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

}  // namespace octet::modules::detail
