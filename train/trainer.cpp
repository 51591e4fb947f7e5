// The training step, evaluation and checkpoints of train::Trainer.
#include "train/trainer.h"

#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "modules/fp8_autocast.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "train/checkpoint.h"

namespace octet::train {
namespace {

constexpr const char* kStepKey = "step";
constexpr const char* kSkippedKey = "skipped_steps";
constexpr const char* kNonfiniteKey = "nonfinite_run";

bool has_fp8_primary_weights(const std::vector<modules::Parameter>& params) {
  for (const modules::Parameter& p : params) {
    if (p.is_fp8()) return true;
  }
  return false;
}

}  // namespace

Trainer::Trainer(modules::Module& model, TrainerOptions options)
    : model_(model),
      options_(std::move(options)),
      params_(model.parameters()),
      optimizer_(params_, options_.optimizer) {
  OCTET_CHECK(options_.grad_accum >= 1, "Trainer: grad_accum must be >= 1, got ",
              options_.grad_accum);
  OCTET_CHECK(options_.max_nonfinite_steps >= 0, "Trainer: max_nonfinite_steps must be >= 0, got ",
              options_.max_nonfinite_steps);
  // Caching pays only with several micro-batches and weights cast from high precision.
  cache_weights_ = options_.cache_fp8_weights && options_.recipe.has_value() &&
                   options_.grad_accum > 1 && !has_fp8_primary_weights(params_);
}

StepResult Trainer::step(const MicroBatchLoss& loss_of) {
  StepResult r;
  r.step = step_ + 1;
  r.lr = options_.schedule.at(step_);
  const int64_t accum = options_.grad_accum;
  double loss_sum = 0.0;
  bool finite = true;
  for (int64_t micro = 0; micro < accum && finite; ++micro) {
    const modules::FirstMicrobatch first =
        !cache_weights_
            ? modules::FirstMicrobatch::kUnset
            : (micro == 0 ? modules::FirstMicrobatch::kYes : modules::FirstMicrobatch::kNo);
    Tensor loss;
    {
      std::optional<modules::FP8Autocast> fp8;
      if (options_.recipe) fp8.emplace(*options_.recipe);
      loss = loss_of(micro, first);
      if (fp8) fp8->close();  // the forward scales update here; a failure throws here
    }
    const double value = loss.item();
    if (!std::isfinite(value)) {
      finite = false;
      break;  // the graph is dropped unused; nothing it holds touches a weight
    }
    autograd::backward(accum > 1 ? autograd::scale(loss, 1.f / static_cast<float>(accum)) : loss);
    loss_sum += value;
  }
  r.grad_norm = NAN;
  if (finite) {
    r.grad_norm = modules::clip_grad_norm(params_, options_.grad_clip);
    finite = std::isfinite(r.grad_norm);
  }
  r.loss = finite ? loss_sum / static_cast<double>(accum) : NAN;
  if (finite) {
    optimizer_.step(r.lr);
    nonfinite_run_ = 0;
  } else {
    ++nonfinite_run_;
    ++skipped_;
    OCTET_LOG_WARN("step {}: the loss or gradient norm is NaN/inf; step skipped ({} in a row)",
                   r.step, nonfinite_run_);
  }
  optimizer_.zero_grad();
  step_ = r.step;
  r.skipped = !finite;
  r.nonfinite_run = nonfinite_run_;
  OCTET_CHECK(options_.max_nonfinite_steps == 0 || nonfinite_run_ < options_.max_nonfinite_steps,
              "training stopped at step ", r.step, ": the loss was NaN or inf for ", nonfinite_run_,
              " steps in a row (max_nonfinite_steps ", options_.max_nonfinite_steps,
              "); try a lower learning rate or grad clipping");
  return r;
}

double Trainer::evaluate(const std::function<double()>& f) {
  const bool was_training = model_.training();
  model_.eval();
  double value = 0.0;
  try {
    autograd::NoGradGuard no_grad;
    value = f();
  } catch (...) {
    if (was_training) model_.train();
    throw;
  }
  if (was_training) model_.train();
  return value;
}

void Trainer::save(const std::string& path, const SafetensorsMetadata& metadata) {
  SafetensorsMetadata all = metadata;
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{kStepKey, step_},
                                   {kSkippedKey, skipped_},
                                   {kNonfiniteKey, nonfinite_run_}}) {
    OCTET_CHECK(all.find(key) == all.end(), "Trainer::save: metadata key \"", key,
                "\" is the trainer's own");
    all.emplace(key, std::to_string(value));
  }
  save_checkpoint(path, model_, &optimizer_, all);
}

SafetensorsMetadata Trainer::load(const std::string& path) {
  const Checkpoint c = read_checkpoint(path);
  load(c);
  return c.metadata;
}

void Trainer::load(const Checkpoint& c) {
  const int64_t step = metadata_int(c, kStepKey);
  const int64_t skipped = metadata_int(c, kSkippedKey);
  // Checkpoints written before the trainer recorded it resume with no skipped step in a row.
  const int64_t nonfinite =
      c.metadata.count(kNonfiniteKey) != 0 ? metadata_int(c, kNonfiniteKey) : 0;
  load_checkpoint(c, model_, &optimizer_);
  step_ = step;
  skipped_ = skipped;
  nonfinite_run_ = nonfinite;
}

}  // namespace octet::train
