// The quantizers of the built-in recipes (DESIGN.md "Recipes"): delayed and current scaling
// (kernels/fp8_per_tensor.h), MXFP8 (kernels/mxfp8.h), and make_quantizer, which picks one from a
// recipe and an FP8Meta slot.
#pragma once

#include <memory>
#include <string>

#include "kernels/blockwise.h"
#include "kernels/fp8_per_tensor.h"
#include "kernels/mxfp8.h"
#include "kernels/nvfp4.h"
#include "runtime/fp8_meta.h"
#include "runtime/recipe.h"

namespace octet {

// The quantizer for one tensor of an FP8 module under `recipe`. Delayed scaling needs the
// module's FP8Meta (made for this same recipe) and uses `slot`'s state; current and MXFP8 use only
// the slot's direction (hybrid: e5m2 for backward slots), and `meta` may be null; a custom
// recipe's factory makes it.
// What a slot's quantizer may use besides the recipe (FP8State keeps one per slot).
struct SlotContext {
  FP8Meta* meta = nullptr;  // delayed scaling: the module's meta
  // nvfp4 gradients: the slot's stochastic-rounding stream, a host i64 (2,) tensor (seed,
  // offset); undefined: a fresh stream whose seed is the slot's
  Tensor rng;
  // Stateless recipes: the slot's health (counts and block-scale spread); null: none
  std::shared_ptr<SlotStats> stats;
};
std::shared_ptr<Quantizer> make_quantizer(const Recipe& recipe, const SlotContext& context,
                                          SlotId slot);
inline std::shared_ptr<Quantizer> make_quantizer(const Recipe& recipe, FP8Meta* meta, SlotId slot) {
  SlotContext context;
  context.meta = meta;
  return make_quantizer(recipe, context, slot);
}

// The format (format-table name) `recipe` casts `slot`'s tensors to, without making a quantizer.
std::string quantized_format_for(const Recipe& recipe, SlotId slot);

}  // namespace octet
