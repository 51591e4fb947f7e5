// The quantizers of the three recipes (DESIGN.md "Recipes"): delayed scaling (reads its slot's
// scale, records amax into the slot's history), current scaling (scale from the tensor's own amax)
// and MXFP8 (per-block exponents); make_quantizer picks one from a recipe and an FP8Meta slot.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "runtime/float8_tensor.h"
#include "runtime/fp8_meta.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/quantized_tensor.h"
#include "runtime/recipe.h"

namespace octet {

// Delayed scaling (TE's Float8Quantizer). q = fp8(x * scale) with `scale` read at cast time;
// with AmaxRecording::kRecord, max |x| (f32, before scaling, NaN ignored) is max-accumulated into
// amax_history[0] in the same pass as the cast, and, when the quantizer has cast counts, the
// cast's saturated / flushed / total counts are added to them (casts with kSkip - validation,
// recompute, the initial weight cast - count nothing, as they record no amax). Holds the slot's
// tensors and counts by handle, so FP8Meta updates are seen by the next cast. Made with
// std::make_shared (tensors keep a handle on it).
class DelayedScalingQuantizer final : public Quantizer {
 public:
  // `scale`: (1,) f32; `amax_history`: 1-D f32 whose element 0 collects the amax; `cast_counts`
  // may be null (nothing counted).
  DelayedScalingQuantizer(Tensor scale, Tensor amax_history, DType dtype,
                          std::shared_ptr<FP8CastCounts> cast_counts = nullptr);
  // The quantizer of one FP8Meta slot (its scale and history, the slot's dtype).
  static std::shared_ptr<DelayedScalingQuantizer> for_slot(FP8Meta& meta, SlotId slot);

  ScalingMode scaling_mode() const override { return ScalingMode::kPerTensor; }
  DType dtype() const override { return dtype_; }
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording amax) const override;
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const override;
  std::string describe() const override;

  const Tensor& scale() const { return scale_; }
  const Tensor& amax_history() const { return amax_history_; }
  // Where a cast made with `amax` adds its counts: the quantizer's counts for kRecord, else null
  // (for fused kernels that cast with this quantizer's state, like its own casts do).
  FP8CastCounts* counts_for(AmaxRecording amax) const {
    return amax == AmaxRecording::kRecord ? cast_counts_.get() : nullptr;
  }
  // The Float8Tensor of data a fused kernel cast with this quantizer's current scale (e.g. a
  // norm fused with its FP8 cast): scale_inv from the scale, this quantizer as its maker.
  std::shared_ptr<Float8Tensor> adopt(const Shape& shape, Tensor rowwise, Tensor columnwise,
                                      Ownership ownership) const;

 private:
  Tensor scale_;
  Tensor amax_history_;
  DType dtype_;
  std::shared_ptr<FP8CastCounts> cast_counts_;
};

enum class Power2Scale : uint8_t { kOff, kOn };  // round the scale down to a power of two

// Current scaling. amax = max |x| of this tensor, then scale = fp8_max / max(amax, epsilon);
// amax 0, inf or NaN gives scale 1; an infinite scale becomes FLT_MAX; Power2Scale::kOn rounds
// the scale down to a power of two. No state: AmaxRecording has no effect.
class CurrentScalingQuantizer final : public Quantizer {
 public:
  CurrentScalingQuantizer(DType dtype, Power2Scale power_2_scale, float amax_epsilon);

  ScalingMode scaling_mode() const override { return ScalingMode::kPerTensor; }
  DType dtype() const override { return dtype_; }
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording amax) const override;
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const override;
  std::string describe() const override;

  // The scale a tensor whose max |x| is `amax` gets.
  float scale_for(float amax) const;

 private:
  // (scale, scale_inv) for x, as (1,) f32 tensors on x's device.
  std::pair<Tensor, Tensor> scales_for(const Tensor& x) const;

  DType dtype_;
  Power2Scale power_2_scale_;
  float amax_epsilon_;
};

// MXFP8: each requested direction is cast from x with one E8M0 exponent per block of 32
// (ops::quantize_mxfp8). No state: AmaxRecording has no effect.
class MXFP8Quantizer final : public Quantizer {
 public:
  explicit MXFP8Quantizer(DType dtype = DType::kE4M3);

  ScalingMode scaling_mode() const override { return ScalingMode::kMXFP8; }
  DType dtype() const override { return dtype_; }
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording amax) const override;
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const override;
  std::string describe() const override;

 private:
  DType dtype_;
};

// The quantizer for one tensor of an FP8 module under `recipe`. Delayed scaling needs the
// module's FP8Meta (made for this same recipe) and uses `slot`'s state; current and MXFP8 use only
// the slot's direction (hybrid: e5m2 for backward slots), and `meta` may be null.
std::shared_ptr<Quantizer> make_quantizer(const Recipe& recipe, FP8Meta* meta, SlotId slot);

}  // namespace octet
