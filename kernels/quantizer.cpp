// make_quantizer: a recipe and an FP8Meta slot to the quantizer that casts for that slot.
#include "kernels/quantizer.h"

namespace octet {

std::shared_ptr<Quantizer> make_quantizer(const Recipe& recipe, FP8Meta* meta, SlotId slot) {
  switch (recipe.kind) {
    case RecipeKind::kDelayed:
      OCTET_CHECK(meta != nullptr, "make_quantizer: delayed scaling needs the module's FP8Meta");
      OCTET_CHECK(meta->recipe() == recipe, "make_quantizer: the FP8Meta was made for recipe ",
                  describe(meta->recipe()), " but the active recipe is ", describe(recipe),
                  " (make a new FP8Meta when the recipe changes)");
      return DelayedScalingQuantizer::for_slot(*meta, slot);
    case RecipeKind::kCurrent:
      return std::make_shared<CurrentScalingQuantizer>(
          recipe.dtype(slot.direction), recipe.power_2_scale ? Power2Scale::kOn : Power2Scale::kOff,
          recipe.amax_epsilon);
    case RecipeKind::kMXFP8:
      return std::make_shared<MXFP8Quantizer>(DType::kE4M3);
    case RecipeKind::kCustom: {
      std::shared_ptr<Quantizer> q = recipe.custom->make_quantizer(slot);
      OCTET_CHECK(q != nullptr, "make_quantizer: custom recipe '", recipe.custom->name(),
                  "' made no quantizer for ",
                  slot.direction == FP8Direction::kForward ? "forward" : "backward", " slot ",
                  slot.index);
      return q;
    }
  }
  OCTET_FAIL("make_quantizer: unknown recipe kind ", static_cast<int>(recipe.kind));
}

std::string quantized_format_for(const Recipe& recipe, SlotId slot) {
  switch (recipe.kind) {
    case RecipeKind::kDelayed:
    case RecipeKind::kCurrent:
      return std::string(kPerTensorFormat);
    case RecipeKind::kMXFP8:
      return std::string(kMXFP8Format);
    case RecipeKind::kCustom:
      // The factory's quantizers name their own format (a stateless query of a fresh one).
      return std::string(recipe.custom->make_quantizer(slot)->format());
  }
  OCTET_FAIL("quantized_format_for: unknown recipe kind ", static_cast<int>(recipe.kind));
}

}  // namespace octet
