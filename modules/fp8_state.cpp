// FP8 module state and weight operands.
#include "modules/fp8_state.h"

#include <utility>

#include "autograd/grad_mode.h"
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "kernels/quantizer.h"
#include "modules/fp8_autocast.h"
#include "runtime/memory.h"

namespace octet::modules {

FP8State::FP8State(int num_gemms, const std::optional<Recipe>& recipe, uint64_t seed)
    : num_gemms_(num_gemms), seed_(seed) {
  if (recipe) adopt(*recipe, Device::cpu());
}

void FP8State::adopt(const Recipe& recipe, Device device) {
  recipe_ = recipe;
  ++generation_;
  meta_.reset();
  if (recipe.uses_fp8_meta()) {
    MemTagScope tag(MemTag::kOther);
    meta_ = std::make_shared<FP8Meta>(recipe, num_gemms_);
    // A meta first made by a forward lives where that forward runs (the module's device).
    for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
      for (FP8Slot& s : meta_->slots(d)) {
        for (Tensor* t : {&s.scale, &s.scale_inv, &s.amax_history}) t->move_storage_to(device);
      }
    }
  }
  forward_q_.assign(static_cast<size_t>(num_gemms_ * kForwardSlotsPerGemm), nullptr);
  backward_q_.assign(static_cast<size_t>(num_gemms_ * kBackwardSlotsPerGemm), nullptr);
  forward_stats_.clear();
  backward_stats_.clear();
  backward_rng_.clear();
  if (!meta_) {
    auto fresh = [] { return std::make_shared<SlotStats>(); };
    for (size_t i = 0; i < forward_q_.size(); ++i) forward_stats_.push_back(fresh());
    for (size_t i = 0; i < backward_q_.size(); ++i) backward_stats_.push_back(fresh());
  }
  if (recipe.uses_rng_streams()) {
    MemTagScope tag(MemTag::kOther);
    for (size_t i = 0; i < backward_q_.size(); ++i) {
      Tensor stream = Tensor::empty({2}, DType::kI64);
      // One stream per slot of each module: seeded by the module's seed and the slot.
      stream.data_as<int64_t>()[0] =
          static_cast<int64_t>((seed_ * 0x9E3779B97F4A7C15ull) ^ (0xD1B54A32D192ED03ull * (i + 1)));
      stream.data_as<int64_t>()[1] = 0;
      backward_rng_.push_back(stream);
    }
  }
}

SlotContext FP8State::context(SlotId slot) const {
  SlotContext c;
  c.meta = meta_.get();
  const auto i = static_cast<size_t>(slot.index);
  const bool forward = slot.direction == FP8Direction::kForward;
  const auto& stats = forward ? forward_stats_ : backward_stats_;
  if (i < stats.size()) c.stats = stats[i];
  if (!forward && i < backward_rng_.size()) c.rng = backward_rng_[i];
  return c;
}

std::vector<FP8CastCounts*> FP8State::cast_counts() {
  std::vector<FP8CastCounts*> out;
  for (const auto* stats : {&forward_stats_, &backward_stats_}) {
    for (const auto& s : *stats) out.push_back(&s->counts);
  }
  if (meta_ != nullptr) {
    for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
      for (int i = 0; i < meta_->num_slots(d); ++i)
        out.push_back(meta_->slot({d, i}).cast_counts.get());
    }
  }
  return out;
}

SlotStats FP8State::take_slot_stats(SlotId slot) {
  const auto& stats = slot.direction == FP8Direction::kForward ? forward_stats_ : backward_stats_;
  const auto i = static_cast<size_t>(slot.index);
  OCTET_CHECK(i < stats.size(), "FP8 state has no statistics for ",
              slot.direction == FP8Direction::kForward ? "forward" : "backward", " slot ",
              slot.index, " (a recipe with an FP8Meta counts in the meta)");
  SlotStats& s = *stats[i];
  settle_device_stats(s.counts, &s.scales);  // what CUDA casts counted (one copy back)
  SlotStats out = std::exchange(s, SlotStats{});
  s.counts.device = out.counts.device;  // the device words, zeroed by the settle, count on
  out.counts.device.reset();
  return out;
}

void FP8State::begin_forward(const Recipe& recipe, Device device) {
  OCTET_CHECK(!locked_ || (recipe_ && *recipe_ == recipe),
              "this module's FP8 primary weights were ", "made for recipe ",
              recipe_ ? describe(*recipe_) : std::string("?"), "; the FP8 scope's recipe is ",
              describe(recipe), " (build the model with the recipe it will run under)");
  if (!recipe_ || !(*recipe_ == recipe)) adopt(recipe, device);
  if (meta_ && autograd::grad_enabled()) register_fp8_forward(meta_);
}

const Recipe& FP8State::recipe() const {
  OCTET_CHECK(recipe_.has_value(), "FP8 state has no recipe yet (no FP8 forward ran)");
  return *recipe_;
}

const std::shared_ptr<Quantizer>& FP8State::quantizer_handle(SlotId slot) {
  auto& list = slot.direction == FP8Direction::kForward ? forward_q_ : backward_q_;
  OCTET_CHECK(slot.index >= 0 && static_cast<size_t>(slot.index) < list.size(), "FP8 state of ",
              num_gemms_, " GEMM(s) has no ",
              slot.direction == FP8Direction::kForward ? "forward" : "backward", " slot ",
              slot.index);
  auto& q = list[static_cast<size_t>(slot.index)];
  if (!q) q = make_quantizer(recipe(), context(slot), slot);
  return q;
}

GemmQuantizers FP8State::gemm_quantizers(int gemm) {
  GemmQuantizers q;
  q.input = quantizer_handle(forward_slot(gemm, ForwardTensor::kInput));
  q.weight = quantizer_handle(forward_slot(gemm, ForwardTensor::kWeight));
  q.grad_output = quantizer_handle(backward_slot(gemm, BackwardTensor::kGradOutput));
  q.meta = meta_;
  q.forward_high_precision = fp8_forward_high_precision();
  q.backward_high_precision = fp8_backward_high_precision();
  OCTET_CHECK(!(q.forward_high_precision && q.backward_high_precision),
              "the forward and the backward both in high precision (fp8.high_precision_after and "
              "fp8.high_precision_backward): that is a high-precision run; turn FP8 off instead");
  if (q.forward_high_precision) {
    // The backward casts the kept input and weight as this forward would have (the scales of
    // now, whatever the scope's exit updates before the backward runs).
    q.input = q.input->frozen();
    q.weight = q.weight->frozen();
  }
  return q;
}

void check_gemm_shapes(const Recipe& recipe, int gemm, const std::string& what, int64_t rows,
                       int64_t in, int64_t out) {
  const auto format = [&](SlotId slot) { return quantized_format_for(recipe, slot); };
  ops::check_fp8_gemm_shape(format(forward_slot(gemm, ForwardTensor::kInput)), {rows, in},
                            what + " input");
  ops::check_fp8_gemm_shape(format(forward_slot(gemm, ForwardTensor::kWeight)), {out, in},
                            what + " weight");
  ops::check_fp8_gemm_shape(format(backward_slot(gemm, BackwardTensor::kGradOutput)), {rows, out},
                            what + " output gradient");
  if (recipe.is_quartet2()) {
    OCTET_CHECK(rows % 128 == 0 && in % 128 == 0 && out % 128 == 0, what,
                ": NVFP4's quartet2 method needs the GEMM's rows (prod(leading dims)), in and out "
                "features to be multiples of 128 (its backward transform runs along each GEMM's "
                "inner dimension), got rows ",
                rows, ", in ", in, ", out ", out,
                "; keep this module in high precision (fp8.high_precision_modules) or change the "
                "shape");
  }
}

Operand cast_with(const Quantizer* frozen, const Tensor& x, Usage usage) {
  if (frozen == nullptr) return {x, nullptr};
  return make_operand(x, frozen, usage, Ownership::kInternal, AmaxRecording::kSkip);
}

Operand norm_operand(const Tensor& x, const NormSpec& norm, const Quantizer* quantizer, Usage usage,
                     AmaxRecording amax, ops::NormForward& stats) {
  const auto* delayed = dynamic_cast<const DelayedScalingQuantizer*>(quantizer);
  if (delayed != nullptr) {
    Tensor row, col;
    if (has_usage(usage, Usage::kRowwise)) {
      row = Tensor::empty(x.shape(), delayed->dtype(), x.device());
    }
    if (has_usage(usage, Usage::kColumnwise)) {
      col = Tensor::empty({x.cols(), x.rows()}, delayed->dtype(), x.device());
    }
    Tensor newest = delayed->amax_history().slice(0, 1);
    stats = ops::norm_fp8(norm.kind, x, norm.gamma, norm.beta.defined() ? &norm.beta : nullptr,
                          norm.eps, norm.zero_centered_gamma, delayed->scale(),
                          row.defined() ? &row : nullptr, col.defined() ? &col : nullptr,
                          amax == AmaxRecording::kRecord ? &newest : nullptr,
                          delayed->counts_for(amax));
    return {Tensor(), delayed->adopt(x.shape(), row, col, Ownership::kInternal)};
  }
  const Tensor* beta = norm.beta.defined() ? &norm.beta : nullptr;
  stats = norm.kind == ops::NormKind::kLayerNorm
              ? ops::layernorm(x, norm.gamma, beta, norm.eps, norm.zero_centered_gamma)
              : ops::rmsnorm(x, norm.gamma, norm.eps, norm.zero_centered_gamma);
  Tensor y = std::move(stats.y);
  if (quantizer == nullptr) return {y, nullptr};
  return make_operand(y, quantizer, usage, Ownership::kInternal, amax);
}

std::vector<FP8State::MetaBuffer> FP8State::meta_buffers() const {
  std::vector<MetaBuffer> out;
  if (!meta_) return out;
  for (FP8Direction d : {FP8Direction::kForward, FP8Direction::kBackward}) {
    const std::string dir = d == FP8Direction::kForward ? "forward" : "backward";
    for (int i = 0; i < meta_->num_slots(d); ++i) {
      FP8Slot& s = meta_->slot({d, i});
      const std::string base = "fp8_meta." + dir + "." + std::to_string(i);
      out.push_back({base + ".scale", &s.scale, true});
      out.push_back({base + ".scale_inv", &s.scale_inv, true});
      out.push_back({base + ".amax_history", &s.amax_history, false});
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> FP8State::buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (MetaBuffer& b : meta_buffers()) out.emplace_back(std::move(b.name), b.tensor);
  return out;
}

std::vector<std::string> FP8State::positive_buffers() const {
  std::vector<std::string> out;
  for (MetaBuffer& b : meta_buffers()) {
    if (b.positive) out.push_back(std::move(b.name));
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> FP8State::host_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t i = 0; i < backward_rng_.size(); ++i) {
    out.emplace_back("fp8_state.backward." + std::to_string(i) + ".rng", &backward_rng_[i]);
  }
  return out;
}

Usage FP8Weight::needed_usage(const Quantizer* quantizer) {
  const bool recast = quantizer != nullptr && quantizer->backward_recasts_rowwise();
  return autograd::grad_enabled() && !recast ? Usage::kBoth : Usage::kRowwise;
}

Operand FP8Weight::get(const Tensor& hp, FP8State* state, int gemm, FirstMicrobatch first) {
  // A high-precision forward multiplies the weight itself; the backward casts what it needs.
  // So does a high-precision backward: its forward GEMM casts the weight it keeps (LinearGemm).
  if (state == nullptr || fp8_forward_high_precision() || fp8_backward_high_precision()) {
    return {hp, nullptr};
  }
  const Quantizer* q = state->quantizer(forward_slot(gemm, ForwardTensor::kWeight));
  const Usage usage = needed_usage(q);
  if (first == FirstMicrobatch::kUnset) {
    // A fresh cast per forward: the operation's own (counted as activations), so it hands its
    // buffers to the context.
    MemTagScope tag(MemTag::kActivations);
    return {Tensor(), q->quantize(hp, usage, Ownership::kInternal, fp8_amax_recording())};
  }
  MemTagScope tag(MemTag::kWeights);  // a cache is owned state, like the weight itself
  // A cache made before Module::to moved the weight is on the old device: remake it.
  if (cache_ && cache_->device() != hp.device()) cache_.reset();
  switch (first) {
    case FirstMicrobatch::kUnset:
      break;
    case FirstMicrobatch::kYes:
      if (cache_ && cache_generation_ == state->generation() && has_usage(cache_->usage(), usage)) {
        ops::quantize_into(*cache_, hp, fp8_amax_recording());
      } else {
        cache_ = q->quantize(hp, usage, Ownership::kOwned, fp8_amax_recording());
        cache_generation_ = state->generation();
      }
      return {Tensor(), cache_};
    case FirstMicrobatch::kNo:
      OCTET_CHECK(cache_ != nullptr && cache_generation_ == state->generation(),
                  "forward with first_microbatch = false needs a weight cache made by a "
                  "first_microbatch = true forward under the same recipe");
      if (!has_usage(cache_->usage(), usage)) {
        // Rebuilt when it lacks a usage now needed (no amax is recorded for a reused cache).
        cache_ = q->quantize(hp, usage, Ownership::kOwned, AmaxRecording::kSkip);
      }
      return {Tensor(), cache_};
  }
  OCTET_FAIL("unknown FirstMicrobatch value");
}

Operand FP8Weight::primary(const std::shared_ptr<QuantizedTensor>& weight, const Tensor* master) {
  const Usage usage = needed_usage(weight->quantizer().get());
  if (!has_usage(weight->usage(), usage)) {
    MemTagScope tag(MemTag::kWeights);
    // The format decides whether it needs the master (its error says so when it is missing).
    ops::update_usage(*weight, weight->usage() | usage, master);
  }
  return {Tensor(), weight};
}

}  // namespace octet::modules
