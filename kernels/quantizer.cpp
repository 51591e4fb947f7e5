// make_quantizer: a recipe and an FP8Meta slot to the quantizer that casts for that slot.
#include "kernels/quantizer.h"

#include "kernels/rowwise.h"

namespace octet {

namespace {

NVFP4Role nvfp4_role(SlotId slot) {
  if (slot.direction == FP8Direction::kBackward) return NVFP4Role::kGradient;
  return slot.index % kForwardSlotsPerGemm == static_cast<int>(ForwardTensor::kWeight)
             ? NVFP4Role::kWeight
             : NVFP4Role::kActivation;
}

// A stream for a slot that brought none: seeded by the slot, so a cast is still reproducible.
Tensor slot_stream(SlotId slot) {
  Tensor t = Tensor::empty({2}, DType::kI64);
  t.data_as<int64_t>()[0] =
      0x5EED0000 + (slot.direction == FP8Direction::kBackward ? 1000 : 0) + slot.index;
  t.data_as<int64_t>()[1] = 0;
  return t;
}

}  // namespace

std::shared_ptr<Quantizer> make_quantizer(const Recipe& recipe, const SlotContext& context,
                                          SlotId slot) {
  FP8Meta* meta = context.meta;
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
          recipe.amax_epsilon, context.stats);
    case RecipeKind::kMXFP8:
      return std::make_shared<MXFP8Quantizer>(DType::kE4M3, context.stats);
    case RecipeKind::kBlockwise:
      return std::make_shared<BlockwiseQuantizer>(recipe.dtype(slot.direction),
                                                  recipe.block_scaling(slot), recipe.power_2_scale,
                                                  recipe.amax_epsilon, context.stats);
    case RecipeKind::kRowwise:
      return std::make_shared<RowwiseQuantizer>(recipe.dtype(slot.direction), recipe.power_2_scale,
                                                recipe.amax_epsilon, context.stats);
    case RecipeKind::kNVFP4: {
      const NVFP4Role role = nvfp4_role(slot);
      // 4over6 by scope: weights, activations (inputs and outputs); gradients never.
      auto covers = [&](NVFP4Scope scope) {
        return role == NVFP4Role::kWeight       ? covers_weights(scope)
               : role == NVFP4Role::kActivation ? covers_activations(scope)
                                                : false;
      };
      if (recipe.is_quartet2()) {
        if (role == NVFP4Role::kGradient) {
          return std::make_shared<Quartet2GradQuantizer>(context.rng.defined() ? context.rng
                                                                               : slot_stream(slot));
        }
        // The forward: 1x16 blocks rounded to nearest; with 4over6 by MSE and the 256 bound where
        // the recipe's scope covers the tensor, else every block scaled to 6 under the 448 bound.
        const bool four_over_six = covers(recipe.four_over_six);
        return std::make_shared<NVFP4Quantizer>(
            role, false, false, false, Tensor(), context.stats,
            NVFP4FourOverSix{four_over_six, true, four_over_six}, NVFP4Method::kQuartet2);
      }
      const bool stochastic = role == NVFP4Role::kGradient && recipe.stochastic_rounding;
      NVFP4FourOverSix four_over_six;
      four_over_six.on = covers(recipe.four_over_six);
      four_over_six.squared_error = recipe.four_over_six_mse;
      four_over_six.e4m3_max_256 = covers(recipe.four_over_six_e4m3_256);
      return std::make_shared<NVFP4Quantizer>(
          role, recipe.weight_2d_quantization, recipe.random_hadamard_transform, stochastic,
          stochastic ? (context.rng.defined() ? context.rng : slot_stream(slot)) : Tensor(),
          context.stats, four_over_six);
    }
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
    case RecipeKind::kBlockwise:
      return std::string(kBlockwiseFormat);
    case RecipeKind::kNVFP4:
      return std::string(kNVFP4Format);
    case RecipeKind::kRowwise:
      return std::string(kRowwiseFormat);
    case RecipeKind::kCustom:
      // The factory's quantizers name their own format (a stateless query of a fresh one).
      return std::string(recipe.custom->make_quantizer(slot)->format());
  }
  OCTET_FAIL("quantized_format_for: unknown recipe kind ", static_cast<int>(recipe.kind));
}

}  // namespace octet
