// FP8 health of a model, found through its modules' FP8 states (never by parsing names): per slot
// what its casts saturated and flushed to zero since the last look, with the delayed-scaling
// scale and amaxes or, for the stateless recipes, the spread of the scales the casts chose; and
// per FP8 GEMM weight the share its next cast will saturate or flush.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "modules/module.h"
#include "runtime/fp8.h"
#include "runtime/fp8_stats.h"

namespace octet::train {

// One slot, named "layers.0.mlp.forward.1" (module, then direction and slot index). Under
// delayed scaling, the slot as the next step will use it: its scale, the largest amax in its
// history window (what the scale came from under amax_compute_algo "max") and the newest
// recorded amax. Under the stateless recipes (current scaling, MXFP8, blockwise FP8, NVFP4) the
// dequantization scales its casts chose since the previous call, one per tensor or per block
// (log2 spread: min, median, max; NVFP4's include the tensor scale). For every recipe, what the
// slot's amax-recording casts since the previous call did, counted exactly in the casts
// themselves (FP8CastCounts): the elements saturated (|x * scale| above the format's max) and
// flushed to zero (x != 0 but the cast gives +-0), and their fractions (empty when no such cast
// ran). Taking the counts resets them, so call this once per logged step. CUDA casts count on
// the device (runtime/fp8_stats.h, DeviceCastStats); taking them copies each slot's words back.
struct SlotHealth {
  struct Delayed {
    float scale = 1.f;
    float amax = 0.f;
    float amax_newest = 0.f;
  };
  std::string name;
  std::optional<Delayed> delayed;  // delayed scaling only
  BlockScaleSpread scales;         // stateless recipes only (blocks() == 0: none recorded)
  FP8CastCounts counts;
  std::optional<double> saturated_fraction;
  std::optional<double> flushed_fraction;
};
std::vector<SlotHealth> fp8_slot_health(modules::Module& model);

// One FP8 GEMM weight: of its elements, the share the next forward cast saturates (|w * scale|
// above the format's max) and the share it flushes to zero (w != 0 but fp8(w * scale) == 0).
// Measured exactly on the high-precision weight with its delayed-scaling slot's current scale
// (the parameter names its slot), so only under delayed scaling and not for FP8 primary weights
// (their master is the optimizer's).
struct WeightHealth {
  std::string name;
  double saturated = 0.0;
  double flushed_to_zero = 0.0;
};
std::vector<WeightHealth> fp8_weight_health(modules::Module& model);

}  // namespace octet::train
