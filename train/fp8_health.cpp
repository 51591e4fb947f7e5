// FP8 slot and weight health from the modules' FP8 states.
#include "train/fp8_health.h"

#include <algorithm>
#include <cmath>

#include "modules/fp8_state.h"
#include "runtime/fp8_meta.h"

namespace octet::train {

namespace {

// The delayed-scaling view of a slot and its counts (taken).
void read_delayed(FP8Meta& meta, SlotId id, SlotHealth& h) {
  const FP8Slot& slot = meta.slot(id);
  SlotHealth::Delayed d;
  d.scale = slot.scale.item();
  const std::vector<float> history = slot.amax_history.to_floats();
  for (float a : history) {
    if (!std::isnan(a)) d.amax = std::max(d.amax, a);
  }
  // After an update the newest amax has rolled to the end (history[0] restarts at 0).
  d.amax_newest = history.back();
  h.delayed = d;
  h.counts = meta.take_cast_counts(id);
}

}  // namespace

std::vector<SlotHealth> fp8_slot_health(modules::Module& model) {
  std::vector<SlotHealth> out;
  for (const auto& [module, state] : model.fp8_states()) {
    FP8Meta* meta = state->meta().get();
    // A state that has run no recipe yet (or keeps its module in high precision) has no slots.
    if (meta == nullptr && !state->has_slot_stats()) continue;
    for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
      const int per_gemm =
          d == FP8Direction::kForward ? kForwardSlotsPerGemm : kBackwardSlotsPerGemm;
      const int slots = meta != nullptr ? meta->num_slots(d) : state->num_gemms() * per_gemm;
      for (int i = 0; i < slots; ++i) {
        SlotHealth h;
        h.name = (module.empty() ? "" : module + ".") +
                 (d == FP8Direction::kForward ? "forward." : "backward.") + std::to_string(i);
        if (meta != nullptr) {
          read_delayed(*meta, {d, i}, h);
        } else {
          SlotStats stats = state->take_slot_stats({d, i});
          h.counts = stats.counts;
          h.scales = std::move(stats.scales);
        }
        if (h.counts.total > 0) {
          const double total = static_cast<double>(h.counts.total);
          h.saturated_fraction = static_cast<double>(h.counts.saturated) / total;
          h.flushed_fraction = static_cast<double>(h.counts.flushed) / total;
        }
        out.push_back(std::move(h));
      }
    }
  }
  return out;
}

std::vector<WeightHealth> fp8_weight_health(modules::Module& model) {
  std::vector<WeightHealth> out;
  for (const modules::Parameter& p : model.parameters()) {
    if (p.fp8_state == nullptr || p.is_fp8() || p.fp8_state->meta() == nullptr) continue;
    const FP8Meta& meta = *p.fp8_state->meta();
    const SlotId id = forward_slot(p.fp8_gemm, ForwardTensor::kWeight);
    const DType dtype = meta.dtype(id);
    const float max = fp8_max(dtype);
    const float scale = meta.slot(id).scale.item();
    int64_t saturated = 0, flushed = 0, counted = 0;
    for (float x : p.tensor->to_floats()) {
      if (std::isnan(x)) continue;
      ++counted;
      const float scaled = x * scale;
      if (std::fabs(scaled) > max) ++saturated;
      if (x != 0.f) {
        const uint8_t code = dtype == DType::kE4M3 ? to_e4m3(scaled) : to_e5m2(scaled);
        if ((code & 0x7F) == 0) ++flushed;
      }
    }
    const double total = static_cast<double>(std::max<int64_t>(counted, 1));
    out.push_back(
        {p.name, static_cast<double>(saturated) / total, static_cast<double>(flushed) / total});
  }
  return out;
}

}  // namespace octet::train
