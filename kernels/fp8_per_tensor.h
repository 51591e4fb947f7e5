// Per-tensor FP8 (DESIGN.md "Recipes"): one f32 scale per tensor. The quantizers of delayed
// scaling (reads its slot's scale, records amax into the slot's history) and current scaling
// (scale from the tensor's own amax), the once-per-step delayed update, and the format's entry in
// the format table (the GEMM on ops::gemm with both scale_inv, column-wise data as a byte
// transpose of the row-wise data).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/float8_tensor.h"
#include "runtime/fp8_meta.h"
#include "runtime/fp8_stats.h"
#include "runtime/quantized_tensor.h"

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

  std::string_view format() const override { return kPerTensorFormat; }
  DType dtype() const override { return dtype_; }
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording amax) const override;
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const override;
  std::string describe() const override;
  // A copy of the slot's scale now, with a scratch history: later updates do not reach it.
  std::shared_ptr<const Quantizer> frozen() const override;

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
  // `stats`: where amax-recording casts add their counts and their scale (CPU; null: nowhere).
  CurrentScalingQuantizer(DType dtype, Power2Scale power_2_scale, float amax_epsilon,
                          std::shared_ptr<SlotStats> stats = nullptr);

  std::string_view format() const override { return kPerTensorFormat; }
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
  // The slot's counts when this cast records, else null; record_scale adds a cast's scale_inv.
  FP8CastCounts* counts_for(AmaxRecording amax) const;
  void record_scale(const Tensor& scale_inv, AmaxRecording amax) const;

  DType dtype_;
  Power2Scale power_2_scale_;
  float amax_epsilon_;
  std::shared_ptr<SlotStats> stats_;
};

namespace ops {

// The once-per-step update (FP8Meta::update's rule) of `direction`'s slots of every meta: CPU
// metas slot by slot, the slots of all CUDA metas together in one launch.
void update_fp8_metas(const std::vector<FP8Meta*>& metas, FP8Direction direction);

}  // namespace ops
}  // namespace octet
