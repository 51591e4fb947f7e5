// The training step, evaluation and checkpoints of train::Trainer.
#include "train/trainer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "kernels/ops.h"
#include "modules/fp8_autocast.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "train/checkpoint.h"

namespace octet::train {
namespace {

constexpr const char* kStepKey = "step";
constexpr const char* kSkippedKey = "skipped_steps";
constexpr const char* kNonfiniteKey = "nonfinite_run";
constexpr const char* kWorldSizeKey = "world_size";

bool has_fp8_primary_weights(const std::vector<modules::Parameter>& params) {
  for (const modules::Parameter& p : params) {
    if (p.is_fp8()) return true;
  }
  return false;
}

// DataParallel over a communicator of several ranks, else LocalSync.
std::unique_ptr<GradientSync> make_sync(const TrainerOptions& o,
                                        const std::vector<modules::Parameter>& params) {
  if (o.comm == nullptr || o.comm->size() == 1) return std::make_unique<LocalSync>(o.comm, params);
  return std::make_unique<DataParallel>(o.comm, params, o.zero_stage, o.grad_bucket_bytes);
}

// The bytes of `t` as a hex FNV-1a digest, to compare tensors across ranks without moving them.
std::string digest(const Tensor& t) {
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(host.data());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < host.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

}  // namespace

Trainer::Trainer(modules::Module& model, TrainerOptions options)
    : model_(model),
      options_(std::move(options)),
      params_(model.parameters()),
      sync_(make_sync(options_, params_)),
      optimizer_(params_, options_.optimizer, sync_->optimizer_shards()) {
  OCTET_CHECK(options_.grad_accum >= 1, "Trainer: grad_accum must be >= 1, got ",
              options_.grad_accum);
  OCTET_CHECK(options_.max_nonfinite_steps >= 0, "Trainer: max_nonfinite_steps must be >= 0, got ",
              options_.max_nonfinite_steps);
  // Caching pays only with several micro-batches and weights cast from high precision.
  cache_weights_ = options_.cache_fp8_weights && options_.recipe.has_value() &&
                   options_.grad_accum > 1 && !has_fp8_primary_weights(params_);
  const bool on_gpu = !params_.empty() && !params_.front().tensor->device().is_cpu();
  deferred_ =
      options_.reads == StepReads::kDeferred || (options_.reads == StepReads::kAuto && on_gpu);
  sync_->attach(optimizer_);
  check_same_on_all_ranks();
  if (options_.cuda_graphs) {
    const char* key = "training.cuda_graphs";
    OCTET_CHECK(on_gpu && !params_.front().tensor->device().is_cpu(), key,
                ": CUDA graphs need a model on a CUDA device");
    OCTET_CHECK(deferred_, key,
                ": CUDA graphs need deferred step reads (a step that reads its "
                "loss on the host cannot be captured)");
    OCTET_CHECK(world_size() == 1, key, ": CUDA graphs are not captured with data parallelism (",
                world_size(), " ranks)");
    OCTET_CHECK(!options_.recipe || !options_.recipe->uses_rng_streams(), key, ": the recipe ",
                describe(*options_.recipe),
                " draws random numbers on the host each step (stochastic rounding or random "
                "signs), which a replayed step would repeat");
  }
}

int64_t Trainer::graph_nodes() const { return graph_ != nullptr ? graph_->nodes() : 0; }

void Trainer::check_same_on_all_ranks() {
  if (world_size() == 1) return;
  // A bad launch is an error naming what differs, before any step could deadlock or diverge.
  const TrainerOptions& o = options_;
  const modules::OptimizerOptions& opt = o.optimizer;
  require_same_on_all_ranks(
      sync_->comm(),
      {{"recipe", o.recipe ? describe(*o.recipe) : "none"},
       {"grad_accum", std::to_string(o.grad_accum)},
       {"grad_clip", fmt::format("{}", o.grad_clip)},
       {"zero_stage", std::to_string(static_cast<int>(o.zero_stage))},
       {"grad_bucket_bytes", std::to_string(o.grad_bucket_bytes)},
       {"cache_fp8_weights", o.cache_fp8_weights ? "true" : "false"},
       // The two read modes run different collectives: ranks must not mix them.
       {"reads", deferred_ ? "deferred" : "every step"},
       {"optimizer", fmt::format("kind {} betas {} {} eps {} weight_decay {} momentum {}",
                                 static_cast<int>(opt.kind), opt.beta1, opt.beta2, opt.eps,
                                 opt.weight_decay, opt.momentum)},
       {"schedule",
        fmt::format("lr {} warmup {} total {} min_lr_ratio {}", o.schedule.base_lr,
                    o.schedule.warmup_steps, o.schedule.total_steps, o.schedule.min_lr_ratio)},
       {"parameters", std::to_string(params_.size())}},
      "Trainer options");
  std::vector<std::pair<std::string, std::string>> state;
  for (const auto& [name, t] : model_.state_dict()) state.emplace_back(name, digest(t));
  require_same_on_all_ranks(sync_->comm(), state,
                            "the model's state (build it from the same seed on every rank)",
                            /*show_values=*/false);
}

StepResult Trainer::step(const MicroBatchLoss& loss_of) {
  run_one(loss_of);
  if (deferred_) {
    read_waiting();
    check_ready();
  }
  StepResult r = ready_.back();
  ready_.pop_back();
  if (!deferred_) check_nonfinite(r);
  return r;
}

int64_t Trainer::run_step(const MicroBatchLoss& loss_of) {
  if (deferred_ && static_cast<int64_t>(waiting_.size()) == kMaxWaitingSteps) read_waiting();
  run_one(loss_of);
  if (!deferred_) check_nonfinite(ready_.back());
  return step_;
}

std::vector<StepResult> Trainer::results() {
  read_waiting();
  check_ready();
  return std::exchange(ready_, {});
}

void Trainer::count(StepResult& r) {
  if (r.skipped) {
    ++nonfinite_run_;
    ++skipped_;
    OCTET_LOG_WARN("step {}: the loss or gradient norm is NaN/inf; step skipped ({} in a row)",
                   r.step, nonfinite_run_);
  } else {
    nonfinite_run_ = 0;
  }
  r.nonfinite_run = nonfinite_run_;
}

void Trainer::check_nonfinite(const StepResult& r) const {
  const int64_t max = options_.max_nonfinite_steps;
  if (max == 0 || r.nonfinite_run < max) return;
  OCTET_FAIL("training stopped at step ", r.step, ": the loss was NaN or inf for ", r.nonfinite_run,
             " steps in a row (max_nonfinite_steps ", max,
             "); try a lower learning rate or grad clipping. ",
             last_checkpoint_step_ >= 0
                 ? fmt::format("The last good checkpoint, {} (step {}), is kept", last_checkpoint_,
                               last_checkpoint_step_)
                 : std::string("No checkpoint was written yet"));
}

void Trainer::check_ready() {
  for (const StepResult& r : ready_) {
    try {
      check_nonfinite(r);
    } catch (...) {
      ready_.clear();
      throw;
    }
  }
}

Tensor Trainer::forward(const MicroBatchLoss& loss_of, int64_t micro) {
  const modules::FirstMicrobatch first =
      !cache_weights_
          ? modules::FirstMicrobatch::kUnset
          : (micro == 0 ? modules::FirstMicrobatch::kYes : modules::FirstMicrobatch::kNo);
  std::optional<modules::FP8Autocast> fp8;
  if (options_.recipe) {
    fp8.emplace(*options_.recipe, modules::FP8Enabled::kYes,
                world_size() > 1 ? options_.comm : nullptr);
  }
  const modules::FP8HighPrecisionForward high_precision(forward_in_high_precision());
  const modules::FP8HighPrecisionBackward high_precision_backward(options_.high_precision_backward);
  Tensor loss = loss_of(micro, first);
  if (fp8) fp8->close();  // the forward scales update here; a failure throws here
  return loss;
}

void Trainer::run_one(const MicroBatchLoss& loss_of) {
  StepResult r;
  r.step = step_ + 1;
  r.lr = options_.schedule.at(step_);
  const int64_t accum = options_.grad_accum;
  const int64_t ranks = world_size();
  // Each rank's backward yields its share of the global mean's gradient (1 / ranks of its own
  // mean's), and the buckets sum the shares. So the gradients an FP8 cast sees in backward are
  // those of one process on the global batch, and their reduced amaxes give its scales.
  const int64_t shares = accum * ranks;
  sync_->begin_step();
  // Deferred: this step's slot of the waiting losses (every rank's) and norm, on the device;
  // this rank's losses go in place in one process and are all-gathered from `mine` with several.
  const auto slot = static_cast<int64_t>(waiting_.size());
  Tensor losses, mine, norm;
  if (deferred_) {
    const Device device = params_.front().tensor->device();
    if (!waiting_losses_.defined()) {
      waiting_losses_ = Tensor::empty({kMaxWaitingSteps * ranks * accum}, DType::kF32, device);
      waiting_norms_ = Tensor::zeros({kMaxWaitingSteps}, DType::kI64, device);
    }
    if (graph_step_) {  // the same tensors every step; fit_step_graphed copies them to the slot
      losses = graph_losses_;
      norm = graph_norm_;
    } else {
      losses = waiting_losses_.slice(slot * ranks * accum, (slot + 1) * ranks * accum);
      norm = waiting_norms_.slice(slot, slot + 1);
    }
    mine = ranks == 1 ? losses : Tensor::empty({accum}, DType::kF32, device);
  }
  double loss_sum = 0.0;
  bool finite = true;  // read every step: no loss nor the norm was NaN/inf
  for (int64_t micro = 0; micro < accum && finite; ++micro) {
    const Tensor loss = forward(loss_of, micro);
    if (deferred_) {
      OCTET_CHECK(loss.numel() == 1 && loss.dtype() == DType::kF32,
                  "Trainer: the micro-batch loss must be a one-element f32 tensor, got ", loss);
      Tensor value = mine.slice(micro, micro + 1);
      ops::copy_(value, loss.reshape({1}));
    } else {
      // Every rank decides on the mean, so all of them skip a step that is not finite anywhere.
      const double value = sync_->mean(loss.item());
      if (!std::isfinite(value)) {
        finite = false;
        break;  // the graph is dropped unused; nothing it holds touches a weight
      }
      loss_sum += value;
    }
    sync_->begin_backward(micro + 1 == accum);
    autograd::backward(shares > 1 ? autograd::scale(loss, 1.f / static_cast<float>(shares)) : loss);
  }
  if (finite) sync_->finish_gradients();
  if (deferred_) {
    const modules::GradNorm measured = sync_->clip_on_device(options_.grad_clip);
    sync_->gather_losses(mine, losses);
    // No gradient: the norm is 0.0, whose bits are 0.
    norm.copy_bytes_from(measured.bits().defined()
                             ? measured.bits()
                             : Tensor::zeros({1}, DType::kI64, norm.device()));
    // Every rank's gate is made from the same bits: all ranks' losses and the global norm.
    optimizer_.step(r.lr, ops::finite_gate(losses, &norm), graph_step_ ? &graph_lr_ : nullptr);
    sync_->gather_parameters(optimizer_);
  } else {
    r.grad_norm = NAN;
    if (finite) {
      r.grad_norm = sync_->clip(options_.grad_clip);
      finite = std::isfinite(r.grad_norm);
    }
    r.loss = finite ? loss_sum / static_cast<double>(accum) : NAN;
    if (finite) {
      optimizer_.step(r.lr);
      sync_->gather_parameters(optimizer_);
    }
  }
  optimizer_.zero_grad();
  step_ = r.step;
  r.comm = sync_->step_bytes();
  if (deferred_) {
    waiting_.push_back(r);  // read_waiting() fills in the loss, the norm and the skip
  } else {
    r.skipped = !finite;
    count(r);
    ready_.push_back(r);
  }
}

void Trainer::read_waiting() {
  if (waiting_.empty()) return;
  const auto n = static_cast<int64_t>(waiting_.size());
  const int64_t accum = options_.grad_accum;
  const int64_t ranks = world_size();
  const Tensor losses = waiting_losses_.slice(0, n * ranks * accum).to(Device::cpu());
  const Tensor norms = waiting_norms_.slice(0, n).to(Device::cpu());
  std::vector<StepResult> read = std::exchange(waiting_, {});
  for (int64_t i = 0; i < n; ++i) {
    StepResult& r = read[static_cast<size_t>(i)];
    // The host's reading of the same values (as a step read every step takes them): each
    // micro-batch's loss is the mean
    // over the ranks, summed in rank order in f64 (DataParallel::mean's rule; one process: the
    // loss itself); the first non-finite one ends the sum and leaves the norm unreported.
    const float* loss = losses.data_as<float>() + i * ranks * accum;
    double loss_sum = 0.0;
    bool finite = true;
    for (int64_t micro = 0; micro < accum && finite; ++micro) {
      double value = loss[micro];
      for (int64_t rank = 1; rank < ranks; ++rank) value += loss[rank * accum + micro];
      value /= static_cast<double>(ranks);
      finite = std::isfinite(value);
      if (finite) loss_sum += value;
    }
    r.grad_norm = NAN;
    if (finite) {
      std::memcpy(&r.grad_norm, norms.data_as<int64_t>() + i, sizeof(double));
      finite = std::isfinite(r.grad_norm);
    }
    r.loss = finite ? loss_sum / static_cast<double>(accum) : NAN;
    r.skipped = !finite;
    ready_.push_back(r);
    count(ready_.back());
  }
}

bool Trainer::forward_in_high_precision() const {
  return options_.high_precision_forward_from >= 0 && step_ >= options_.high_precision_forward_from;
}

double Trainer::evaluate(const std::function<double()>& f) {
  const bool was_training = model_.training();
  model_.eval();
  double value = 0.0;
  try {
    autograd::NoGradGuard no_grad;
    const modules::FP8HighPrecisionForward high_precision(forward_in_high_precision());
    value = f();
  } catch (...) {
    if (was_training) model_.train();
    throw;
  }
  if (was_training) model_.train();
  return value;
}

void Trainer::save(const std::string& path, const SafetensorsMetadata& metadata) {
  read_waiting();  // the skipped-step counts the checkpoint holds
  check_ready();   // a run past max_nonfinite_steps writes no "last good" checkpoint
  SafetensorsMetadata all = metadata;
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{kStepKey, step_},
                                   {kSkippedKey, skipped_},
                                   {kNonfiniteKey, nonfinite_run_},
                                   {kWorldSizeKey, world_size()}}) {
    OCTET_CHECK(all.find(key) == all.end(), "Trainer::save: metadata key \"", key,
                "\" is the trainer's own");
    all.emplace(key, std::to_string(value));
  }
  const NamedTensors optimizer_state = sync_->optimizer_state(optimizer_);  // a collective
  run_collectively(sync_->comm(), [&] {
    if (rank() == 0) save_checkpoint(path, model_, optimizer_state, all);
  });
  last_checkpoint_ = path;
  last_checkpoint_step_ = step_;
}

SafetensorsMetadata Trainer::load(const std::string& path) {
  Checkpoint c;
  run_collectively(sync_->comm(), [&] { c = read_checkpoint(path); });
  load(c);
  return c.metadata;
}

void Trainer::load(const Checkpoint& c) {
  read_waiting();  // steps run before the load keep their results; the counts restart below
  graph_.reset();  // captured from the state before: an eager step, then a new capture
  graph_warmup_left_ = 1;
  int64_t step = 0, skipped = 0, nonfinite = 0;
  auto restore = [&] {
    step = metadata_int(c, kStepKey);
    skipped = metadata_int(c, kSkippedKey);
    // Checkpoints written before the trainer recorded it resume with no skipped step in a row.
    nonfinite = c.metadata.count(kNonfiniteKey) != 0 ? metadata_int(c, kNonfiniteKey) : 0;
    load_checkpoint(c, model_, &optimizer_);
  };
  run_collectively(sync_->comm(), restore);
  sync_->after_load(optimizer_);
  check_same_on_all_ranks();
  step_ = step;
  skipped_ = skipped;
  nonfinite_run_ = nonfinite;
  last_checkpoint_ = c.path;
  last_checkpoint_step_ = step;
}

int64_t checkpoint_world_size(const Checkpoint& c) {
  // Checkpoints written before the key existed came from one process.
  return c.metadata.count(kWorldSizeKey) != 0 ? metadata_int(c, kWorldSizeKey) : 1;
}

}  // namespace octet::train
