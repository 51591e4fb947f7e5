// The FP8 state of one module: its recipe, its FP8Meta (delayed scaling), one quantizer per
// slot, and how its weights become GEMM operands (fresh each forward, cached across
// micro-batches, or FP8 primary weights), with the usage rules of DESIGN.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/nn.h"
#include "kernels/quantizer.h"
#include "modules/module.h"
#include "modules/operand.h"
#include "runtime/fp8_meta.h"
#include "runtime/fp8_stats.h"
#include "runtime/recipe.h"

namespace octet::modules {

// Weight caching for gradient accumulation: kYes quantizes the weight into the cache (first
// micro-batch of a step), kNo reuses the cache as is and records no weight amax, kUnset
// quantizes every forward.
enum class FirstMicrobatch : uint8_t { kUnset, kYes, kNo };

// The quantizers one GEMM of an FP8 module casts with, taken when its forward runs. Its backward
// casts with these, so a graph backwards under the recipe that built it, whatever the module ran
// since (a forward under another recipe rebuilds the module's state, never an existing graph's).
// All null without FP8.
struct GemmQuantizers {
  std::shared_ptr<const Quantizer> input, weight, grad_output;
  std::shared_ptr<FP8Meta> meta;  // delayed scaling: its backward slots update after backward
  // The forward in high precision (modules/fp8_autocast.h FP8HighPrecisionForward): only the
  // backward casts.
  bool forward_high_precision = false;
  // The backward in high precision (FP8HighPrecisionBackward): the forward GEMM's casts only.
  bool backward_high_precision = false;
  bool fp8() const { return input != nullptr; }
};

class FP8State {
 public:
  // `recipe` known up front (from the model config) makes the FP8Meta exist from construction,
  // so it is part of the state dict before the first forward. `seed` seeds the slots' stochastic
  // rounding streams (nvfp4 gradients).
  FP8State(int num_gemms, const std::optional<Recipe>& recipe, uint64_t seed = 0);

  // Called by forward when FP8 is on: adopts the scope's recipe (a different recipe rebuilds the
  // meta and the quantizers, on `device`, where the forward runs) and, for delayed scaling,
  // registers the forward-slot update.
  void begin_forward(const Recipe& recipe, Device device);
  const Recipe& recipe() const;
  // FP8 primary weights are cast with this recipe's quantizers: a scope with another recipe is
  // then an error (the weights would keep the old format and a meta nobody updates).
  void lock_recipe() { locked_ = true; }
  bool has_recipe() const { return recipe_.has_value(); }
  uint64_t generation() const { return generation_; }  // bumps on every recipe change

  const Quantizer* quantizer(SlotId slot) { return quantizer_handle(slot).get(); }
  const std::shared_ptr<Quantizer>& quantizer_handle(SlotId slot);
  // The quantizers of GEMM `gemm` under the current recipe, for a forward to keep.
  GemmQuantizers gemm_quantizers(int gemm);
  // Delayed scaling: the meta (null otherwise).
  const std::shared_ptr<FP8Meta>& meta() const { return meta_; }
  int num_gemms() const { return num_gemms_; }

  // A quantizer for a forward slot that keeps the scale it has now (Quantizer::frozen), so that
  // a recompute in backward reproduces the forward's FP8 values after the scope exit has updated
  // the slot.
  std::shared_ptr<const Quantizer> frozen(SlotId slot) { return quantizer(slot)->frozen(); }

  // The meta's tensors, named "fp8_meta.forward.<i>.scale" / ".scale_inv" / ".amax_history"
  // (and backward), for the state dict.
  std::vector<std::pair<std::string, Tensor*>> buffers();
  // The names among buffers() whose every value must be a finite number > 0: each slot's scale
  // and scale_inv (checked before a state dict is loaded).
  std::vector<std::string> positive_buffers() const;
  // State that stays on the host wherever the module runs (the host decides it, so no device
  // waits for it): the stochastic-rounding streams, "fp8_state.backward.<i>.rng" (i64 (2,):
  // seed and offset), so a resumed run draws exactly the numbers it would have.
  std::vector<std::pair<std::string, Tensor*>> host_buffers();

  // Recipes without an FP8Meta keep per slot what their casts did (saturated / flushed counts,
  // block-scale spread); null for slots of recipes with a meta (it has its own counts). Taking
  // them resets them, so a metrics log reads each cast once.
  bool has_slot_stats() const { return !forward_stats_.empty(); }
  SlotStats take_slot_stats(SlotId slot);
  // Every cast count this state keeps (its meta's slots' and its own), for a caller that adds
  // the host's side of replayed casts (train::Trainer under CUDA graphs).
  std::vector<FP8CastCounts*> cast_counts();

 private:
  void adopt(const Recipe& recipe, Device device);

  SlotContext context(SlotId slot) const;

  struct MetaBuffer {
    std::string name;
    Tensor* tensor;
    bool positive;  // a scale: every value finite and > 0
  };
  std::vector<MetaBuffer> meta_buffers() const;

  int num_gemms_;
  uint64_t seed_;
  std::optional<Recipe> recipe_;
  std::shared_ptr<FP8Meta> meta_;
  std::vector<std::shared_ptr<SlotStats>> forward_stats_, backward_stats_;
  std::vector<Tensor> backward_rng_;  // nvfp4 with stochastic rounding: one stream per slot
  std::vector<std::shared_ptr<Quantizer>> forward_q_, backward_q_;
  uint64_t generation_ = 0;
  bool locked_ = false;
};

// Checks the operands of GEMM `gemm` against the shape rules of the formats `recipe` casts them
// to, before anything runs or changes (call it before FP8State::begin_forward): `what` + " input"
// (rows, in), " weight" (out, in), " output gradient" (rows, out). The error names the operand,
// its shape and the rule.
void check_gemm_shapes(const Recipe& recipe, int gemm, const std::string& what, int64_t rows,
                       int64_t in, int64_t out);

// `x` cast with a frozen quantizer (records nothing), or `x` itself for a null quantizer.
Operand cast_with(const Quantizer* frozen, const Tensor& x, Usage usage);

// The norm of x as the input of GEMM `gemm`: high precision (null quantizer), or cast to FP8 with
// `quantizer` — under delayed scaling in the same pass as the norm (ops::norm_fp8), so no
// high-precision copy exists; other recipes normalize, cast, and drop the f32 output. `stats`
// receives mean and rsigma for backward. `amax` says whether the cast records.
struct NormSpec {
  const Tensor& gamma;
  const Tensor& beta;  // undefined for RMSNorm / no beta
  ops::NormKind kind;
  float eps;
  ops::ZeroCenteredGamma zero_centered_gamma;
};
Operand norm_operand(const Tensor& x, const NormSpec& norm, const Quantizer* quantizer, Usage usage,
                     AmaxRecording amax, ops::NormForward& stats);

// One weight of an FP8 module as a GEMM operand.
class FP8Weight {
 public:
  // Usage: row-wise always; column-wise when gradients are enabled (dgrad needs it), unless the
  // weight's quantizer says the backward re-casts the row-wise data (Quartet II).
  static Usage needed_usage(const Quantizer* quantizer);

  // `hp` is the high-precision weight (f32/bf16). Under FP8, a quantized operand per the
  // FirstMicrobatch rule; otherwise `hp` itself.
  Operand get(const Tensor& hp, FP8State* state, int gemm, FirstMicrobatch first);

  // FP8 primary weight: the owned quantized weight, given the usage the moment needs. A weight
  // missing column-wise data that now trains gets it on demand, as its format makes it
  // (per-tensor: byte transpose; MXFP8: requantized from `master`, the f32 copy the optimizer
  // holds, or null when there is none). No-grad forwards keep what is there (no
  // free-then-rebuild when alternating train and validation).
  static Operand primary(const std::shared_ptr<QuantizedTensor>& weight, const Tensor* master);

  bool cached() const { return cache_ != nullptr; }
  void clear_cache() { cache_.reset(); }

 private:
  std::shared_ptr<QuantizedTensor> cache_;
  uint64_t cache_generation_ = 0;
};

// The base of the FP8 modules (Linear, LayerNormLinear, LayerNormMLP): their FP8State, whose
// meta tensors are module buffers (in the state dict) and whose meta the trainer reads for health.
class FP8Module : public Module {
 public:
  FP8State& fp8_state() { return *fp8_; }
  FP8State* own_fp8_state() override { return fp8_.get(); }

 protected:
  FP8Module(std::string type, int num_gemms, const std::optional<Recipe>& recipe, uint64_t seed = 0)
      : Module(std::move(type)), fp8_(std::make_shared<FP8State>(num_gemms, recipe, seed)) {}
  std::vector<std::pair<std::string, Tensor*>> dynamic_buffers() override {
    return fp8_->buffers();
  }
  std::vector<std::pair<std::string, Tensor*>> dynamic_host_buffers() override {
    return fp8_->host_buffers();
  }
  // A weight of GEMM `gemm` (its parameter knows which FP8 slot casts it).
  template <typename W>
  void register_gemm_weight(std::string name, W& w, int gemm) {
    register_weight(std::move(name), w, fp8_.get(), gemm);
  }

  std::shared_ptr<FP8State> fp8_;  // shared with the graph nodes of forwards still in flight
};

}  // namespace octet::modules
