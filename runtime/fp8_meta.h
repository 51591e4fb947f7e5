// Delayed-scaling state of one FP8 module (DESIGN.md "Recipes", "Details that matter"): per slot a
// scale, its inverse and an amax history, and the once-per-step update rule.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/fp8.h"
#include "runtime/recipe.h"
#include "runtime/tensor.h"

namespace octet {

class Communicator;

struct FP8Slot {
  Tensor scale;         // (1,) f32: the cast multiplies by it; starts at 1
  Tensor scale_inv;     // (1,) f32: 1 / scale, rounded to nearest
  Tensor amax_history;  // (amax_history_len,) f32, zeros at first; [0] collects this step's amax
  // Saturated / flushed / total elements of the casts that recorded amax since the last
  // FP8Meta::take_cast_counts: diagnostics only, so not in the state dict, and never read by the
  // update rule. Shared, like the tensors, with the slot's quantizer, which adds to it.
  std::shared_ptr<FP8CastCounts> cast_counts = std::make_shared<FP8CastCounts>();
};

// The update rule for one slot, exactly as DESIGN.md states it:
// - newest amax (history[0]) is 0: nothing rolls, the scale stays;
// - otherwise amax = max over the history (kMax, NaN ignored) or history[0] (kMostRecent), the
//   history rolls like TE's torch.roll(history, -1): entry i+1 moves to i, history[0] wraps to the
//   end, and the new history[0] is 0;
// - scale = (fp8_max / amax) / 2^margin when amax is finite and > 0, else the old scale; an
//   infinite scale becomes FLT_MAX; scale_inv = 1 / scale.
// CPU tensors only (the slots are tiny; the CUDA backend would keep a host copy).
void update_fp8_slot(FP8Slot& slot, float fp8_max, int margin, AmaxComputeAlgo algo);

class FP8Meta {
 public:
  // `recipe` must be a delayed recipe; `num_gemms` >= 1. Tensors are allocated on the CPU under
  // the caller's MemTagScope.
  FP8Meta(const Recipe& recipe, int num_gemms);

  const Recipe& recipe() const { return recipe_; }
  int num_gemms() const { return num_gemms_; }
  int num_slots(FP8Direction direction) const;

  FP8Slot& slot(SlotId id);
  const FP8Slot& slot(SlotId id) const;
  DType dtype(SlotId id) const { return recipe_.dtype(id.direction); }

  // Applies the update rule to every slot of one direction (forward: at the outermost FP8 scope's
  // exit; backward: at the end of the backward pass).
  void update(FP8Direction direction);
  // The slots of one direction, for a batched update across metas (ops::update_fp8_metas, one
  // launch for every CUDA slot of every module), which then calls count_update.
  std::vector<FP8Slot>& slots(FP8Direction direction) {
    return direction == FP8Direction::kForward ? forward_ : backward_;
  }
  void count_update(FP8Direction direction) { ++update_counts_[static_cast<size_t>(direction)]; }
  // How many times update() ran for a direction: the FP8 scope promises once per step.
  int64_t update_count(FP8Direction direction) const {
    return update_counts_[static_cast<size_t>(direction)];
  }
  // The slot's cast counts since the previous call (or since construction), reset to zero: a
  // metrics log takes them once per logged step.
  FP8CastCounts take_cast_counts(SlotId id);

  // The ranks of a data-parallel run whose amaxes this meta's updates reduce over (one packed
  // all-reduce(MAX) of history[0] before an update, when the recipe's reduce_amax says so): the
  // group of the FP8 scope its module's last training forward ran in; null in one process.
  const std::shared_ptr<Communicator>& amax_group() const { return amax_group_; }
  void set_amax_group(std::shared_ptr<Communicator> group) { amax_group_ = std::move(group); }

 private:
  Recipe recipe_;
  int num_gemms_;
  std::vector<FP8Slot> forward_;
  std::vector<FP8Slot> backward_;
  int64_t update_counts_[2] = {0, 0};
  std::shared_ptr<Communicator> amax_group_;
};

}  // namespace octet
