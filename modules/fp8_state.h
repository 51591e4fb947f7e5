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
#include "modules/module.h"
#include "modules/operand.h"
#include "runtime/fp8_meta.h"
#include "runtime/recipe.h"

namespace octet::modules {

// Weight caching for gradient accumulation: kYes quantizes the weight into the cache (first
// micro-batch of a step), kNo reuses the cache as is and records no weight amax, kUnset
// quantizes every forward.
enum class FirstMicrobatch : uint8_t { kUnset, kYes, kNo };

class FP8State {
 public:
  // `recipe` known up front (from the model config) makes the FP8Meta exist from construction,
  // so it is part of the state dict before the first forward.
  FP8State(int num_gemms, const std::optional<Recipe>& recipe);

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

  const Quantizer* quantizer(SlotId slot);
  // Delayed scaling: the meta (null otherwise).
  const std::shared_ptr<FP8Meta>& meta() const { return meta_; }
  // From a node's backward: the backward slots update when the pass ends (delayed only).
  void schedule_backward_update() const;

  // A quantizer for a forward slot that keeps the scale it has now (delayed scaling: a copy of
  // the slot's scale, recording nothing), so that a recompute in backward reproduces the
  // forward's FP8 values after the scope exit has updated the slot. Stateless recipes: the slot's
  // own quantizer.
  std::shared_ptr<const Quantizer> frozen(SlotId slot);

  // The meta's tensors, named "fp8_meta.forward.<i>.scale" / ".scale_inv" / ".amax_history"
  // (and backward), for the state dict.
  std::vector<std::pair<std::string, Tensor*>> buffers();

 private:
  void adopt(const Recipe& recipe, Device device);

  int num_gemms_;
  std::optional<Recipe> recipe_;
  std::shared_ptr<FP8Meta> meta_;
  std::vector<std::shared_ptr<Quantizer>> forward_q_, backward_q_;
  uint64_t generation_ = 0;
  bool locked_ = false;
};

// Casts for the fused modules; a null state means high precision (the tensor itself).
// Forward inputs record their amax per fp8_amax_recording(); gradients always record.
Operand cast_input(FP8State* state, int gemm, const Tensor& x, Usage usage);
Operand cast_grad(FP8State* state, int gemm, const Tensor& dy, Usage usage);
Operand cast_with(const Quantizer* frozen, const Tensor& x, Usage usage);  // records nothing

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
  // Usage: row-wise always; column-wise when gradients are enabled (dgrad needs it).
  static Usage needed_usage();

  // `hp` is the high-precision weight (f32/bf16). Under FP8, a quantized operand per the
  // FirstMicrobatch rule; otherwise `hp` itself.
  Operand get(const Tensor& hp, FP8State* state, int gemm, FirstMicrobatch first);

  // FP8 primary weight: the owned quantized weight, given the usage the moment needs. A weight
  // missing column-wise data that now trains gets it on demand (per-tensor: byte transpose;
  // MXFP8: requantized from `master`, which must then be given). No-grad forwards keep what is
  // there (no free-then-rebuild when alternating train and validation).
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

 protected:
  FP8Module(std::string type, int num_gemms, const std::optional<Recipe>& recipe)
      : Module(std::move(type)), fp8_(std::make_shared<FP8State>(num_gemms, recipe)) {}
  std::vector<std::pair<std::string, Tensor*>> dynamic_buffers() override {
    return fp8_->buffers();
  }
  FP8Meta* own_fp8_meta() override { return fp8_->meta().get(); }

  std::shared_ptr<FP8State> fp8_;  // shared with the graph nodes of forwards still in flight
};

}  // namespace octet::modules
