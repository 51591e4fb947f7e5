// FP8Meta: slot allocation and the delayed-scaling update rule.
#include "runtime/fp8_meta.h"

#include <cmath>

#include "runtime/fp8_scaling.h"
#include "runtime/fp8_stats.h"

namespace octet {
namespace {

FP8Slot make_slot(int64_t history_len) {
  return {Tensor::full({1}, 1.f, DType::kF32), Tensor::full({1}, 1.f, DType::kF32),
          Tensor::zeros({history_len}, DType::kF32), std::make_shared<FP8CastCounts>()};
}

void check_slot(const FP8Slot& slot) {
  for (const Tensor* t : {&slot.scale, &slot.scale_inv, &slot.amax_history}) {
    OCTET_CHECK(t->defined() && t->dtype() == DType::kF32 && t->device().is_cpu(),
                "FP8 slot tensors must be f32 CPU tensors, got ", *t);
  }
  OCTET_CHECK(slot.scale.numel() == 1 && slot.scale_inv.numel() == 1,
              "FP8 slot: scale and scale_inv must have one element, got ", slot.scale, " and ",
              slot.scale_inv);
  OCTET_CHECK(slot.amax_history.dim() == 1 && slot.amax_history.numel() >= 1,
              "FP8 slot: amax_history must be 1-D and non-empty, got ", slot.amax_history);
}

}  // namespace

void update_fp8_slot(FP8Slot& slot, float fp8_max, int margin, AmaxComputeAlgo algo) {
  check_slot(slot);
  float* h = slot.amax_history.data_as<float>();
  const int64_t len = slot.amax_history.numel();
  const float newest = h[0];
  // Nothing was cast through this slot since the last update (or every value was zero).
  if (newest == 0.f) return;

  float amax = newest;
  if (algo == AmaxComputeAlgo::kMax) {
    amax = 0.f;
    for (int64_t i = 0; i < len; ++i) amax = std::fmax(amax, h[i]);  // fmax ignores NaN
  }
  for (int64_t i = 0; i + 1 < len; ++i) h[i] = h[i + 1];
  h[len - 1] = newest;
  h[0] = 0.f;
  slot.amax_history.bump_version();

  // The rule itself lives in runtime/fp8_scaling.h, shared with the CUDA slot update.
  float* scale = slot.scale.data_as<float>();
  *scale = delayed_scale(amax, *scale, fp8_max, margin);
  *slot.scale_inv.data_as<float>() = scale_inverse(*scale);
  slot.scale.bump_version();
  slot.scale_inv.bump_version();
}

FP8Meta::FP8Meta(const Recipe& recipe, int num_gemms) : recipe_(recipe), num_gemms_(num_gemms) {
  OCTET_CHECK(recipe.kind == RecipeKind::kDelayed, "FP8Meta holds delayed-scaling state; the '",
              recipe_kind_name(recipe.kind), "' recipe keeps none");
  OCTET_CHECK(num_gemms >= 1, "FP8Meta: num_gemms must be >= 1, got ", num_gemms);
  for (int i = 0; i < num_gemms * kForwardSlotsPerGemm; ++i) {
    forward_.push_back(make_slot(recipe.amax_history_len));
  }
  for (int i = 0; i < num_gemms * kBackwardSlotsPerGemm; ++i) {
    backward_.push_back(make_slot(recipe.amax_history_len));
  }
}

int FP8Meta::num_slots(FP8Direction direction) const {
  return static_cast<int>(direction == FP8Direction::kForward ? forward_.size() : backward_.size());
}

FP8Slot& FP8Meta::slot(SlotId id) {
  return const_cast<FP8Slot&>(static_cast<const FP8Meta&>(*this).slot(id));
}

const FP8Slot& FP8Meta::slot(SlotId id) const {
  const auto& slots = id.direction == FP8Direction::kForward ? forward_ : backward_;
  OCTET_CHECK(id.index >= 0 && id.index < static_cast<int>(slots.size()),
              "FP8Meta: ", id.direction == FP8Direction::kForward ? "forward" : "backward",
              " slot ", id.index, " out of range (", slots.size(), " slots for ", num_gemms_,
              " GEMMs)");
  return slots[static_cast<size_t>(id.index)];
}

FP8CastCounts FP8Meta::take_cast_counts(SlotId id) {
  FP8CastCounts& counts = *slot(id).cast_counts;
  settle_device_stats(counts, nullptr);  // what CUDA casts counted (one copy back)
  FP8CastCounts out = counts;
  counts = {};
  counts.device = out.device;  // the device words, zeroed by the settle, count on
  out.device.reset();
  return out;
}

void FP8Meta::update(FP8Direction direction) {
  auto& slots = direction == FP8Direction::kForward ? forward_ : backward_;
  const float max = fp8_max(recipe_.dtype(direction));
  for (FP8Slot& s : slots) update_fp8_slot(s, max, recipe_.margin, recipe_.amax_compute_algo);
  ++update_counts_[static_cast<size_t>(direction)];
}

}  // namespace octet
