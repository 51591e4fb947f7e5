// The FP8 scope (TE's fp8_autocast): turns FP8 on with a recipe for the modules that run inside
// it, and runs the once-per-step delayed-scaling updates (DESIGN.md "Recipes").
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "runtime/comm.h"
#include "runtime/fp8_meta.h"
#include "runtime/quantized_tensor.h"
#include "runtime/recipe.h"

namespace octet::modules {

enum class FP8Enabled : uint8_t { kNo, kYes };

// RAII, thread-local, nestable. The innermost scope decides whether FP8 is on and with which
// recipe (an inner FP8Enabled::kNo turns it off inside). When the outermost scope exits with
// gradients enabled, the forward slots of every FP8Meta registered inside it update once; with
// gradients disabled (validation, inference) nothing updates. A scope left by an exception updates
// nothing (the amaxes stay in history[0] and join the next step's).
//
// The update can fail (a CUDA error, a corrupt slot). close() exits the scope and throws that
// error where the caller can handle it; a destructor must not throw, so a scope that was not
// closed logs the error and keeps it: the next FP8 scope opened on this thread throws it, so it
// is never lost.
//
// Data parallel (TE's fp8_group): `amax_group` is the ranks the scope's modules keep identical
// FP8 state over. Under a delayed recipe with reduce_amax, every update first all-reduces (MAX)
// the newest amax of every slot of every module in it, packed into one call: the forward slots'
// at the outermost scope's exit, the backward slots' at the end of the backward pass (the group
// of the scope the module's forward ran in). Null inherits the enclosing scope's group; none, or
// one rank, reduces nothing.
class FP8Autocast {
 public:
  explicit FP8Autocast(const Recipe& recipe, FP8Enabled enabled = FP8Enabled::kYes,
                       std::shared_ptr<Communicator> amax_group = nullptr);
  ~FP8Autocast();
  FP8Autocast(const FP8Autocast&) = delete;
  FP8Autocast& operator=(const FP8Autocast&) = delete;

  // Exits the scope now (the destructor then does nothing); throws when the update fails.
  void close();

 private:
  bool previous_enabled_;
  std::shared_ptr<const Recipe> previous_recipe_;
  std::shared_ptr<Communicator> previous_group_;
  int uncaught_at_entry_;
  bool closed_ = false;
};

namespace detail {
enum class HighPrecisionPass : uint8_t { kForward, kBackward };
bool& high_precision_flag(HighPrecisionPass pass);  // the pass's thread-local switch

// Sets the pass's switch to `on` while it lives and gives it back its previous value after.
template <HighPrecisionPass kPass>
class HighPrecisionScope {
 public:
  explicit HighPrecisionScope(bool on = true)
      : previous_(std::exchange(high_precision_flag(kPass), on)) {}
  ~HighPrecisionScope() { high_precision_flag(kPass) = previous_; }
  HighPrecisionScope(const HighPrecisionScope&) = delete;
  HighPrecisionScope& operator=(const HighPrecisionScope&) = delete;

 private:
  bool previous_;
};
}  // namespace detail

// The forward GEMMs in high precision while this lives (fp8.high_precision_after: NVIDIA's switch
// for the last steps of a run): FP8 modules whose forward runs inside cast nothing forward and
// multiply the high-precision input and weight; their backward still casts, under the scope's
// recipe, dY and the input and weight the forward kept. Thread-local, nestable; `on` false turns
// it off inside. FP8 primary weights cannot take it (no high-precision weight to multiply).
using FP8HighPrecisionForward = detail::HighPrecisionScope<detail::HighPrecisionPass::kForward>;
bool fp8_forward_high_precision();

// The backward GEMMs in high precision while this lives (fp8.high_precision_backward: the
// "forward-only" ablation of the 4-bit literature): FP8 modules whose forward runs inside cast the
// input and weight for the forward GEMM only, keep the high-precision input and weight for
// backward, and multiply dY by them without casting. Exclusive with FP8HighPrecisionForward;
// FP8 primary weights and recomputed MLPs cannot take it.
using FP8HighPrecisionBackward = detail::HighPrecisionScope<detail::HighPrecisionPass::kBackward>;
bool fp8_backward_high_precision();

bool fp8_enabled();          // inside a scope with FP8 on
const Recipe& fp8_recipe();  // the active recipe; throws unless fp8_enabled()
int fp8_scope_depth();       // 0 outside every scope

// What an FP8 module's casts pass for AmaxRecording: kRecord with gradients enabled, kSkip
// otherwise (evaluation data never moves training scales).
AmaxRecording fp8_amax_recording();

// Called by an FP8 module's forward under delayed scaling: `meta`'s forward slots update when the
// outermost scope exits (once, however often the module ran). Throws outside a scope.
void register_fp8_forward(const std::shared_ptr<FP8Meta>& meta);

// Called from an FP8 module's backward (inside autograd's backward pass): `meta`'s backward slots
// update when this pass ends, once per pass however many of the module's nodes call it.
void schedule_fp8_backward_update(const std::shared_ptr<FP8Meta>& meta);

}  // namespace octet::modules
