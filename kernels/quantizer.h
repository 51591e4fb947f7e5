// The quantizers of the built-in recipes (DESIGN.md "Recipes"): delayed and current scaling
// (kernels/fp8_per_tensor.h), MXFP8 (kernels/mxfp8.h), and make_quantizer, which picks one from a
// recipe and an FP8Meta slot.
#pragma once

#include <memory>
#include <string>

#include "kernels/fp8_per_tensor.h"
#include "kernels/mxfp8.h"
#include "runtime/fp8_meta.h"
#include "runtime/recipe.h"

namespace octet {

// The quantizer for one tensor of an FP8 module under `recipe`. Delayed scaling needs the
// module's FP8Meta (made for this same recipe) and uses `slot`'s state; current and MXFP8 use only
// the slot's direction (hybrid: e5m2 for backward slots), and `meta` may be null; a custom
// recipe's factory makes it.
std::shared_ptr<Quantizer> make_quantizer(const Recipe& recipe, FP8Meta* meta, SlotId slot);

// The format (format-table name) `recipe` casts `slot`'s tensors to, without making a quantizer.
std::string quantized_format_for(const Recipe& recipe, SlotId slot);

}  // namespace octet
