// Trainer::fit: the training loop over a dataset, with its evaluation, checkpoint and log cadence.
#include <algorithm>
#include <chrono>
#include <utility>

#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "runtime/error.h"
#include "train/trainer.h"

namespace octet::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool every(int64_t interval, int64_t step) { return interval > 0 && step % interval == 0; }

void check_fit_options(const FitOptions& o, int64_t steps_done) {
  OCTET_CHECK(o.batch_size > 0 && o.seq_len > 0,
              "Trainer::fit: batch_size and seq_len must be > 0,", " got ", o.batch_size, " and ",
              o.seq_len);
  OCTET_CHECK(o.log_interval > 0, "Trainer::fit: log_interval must be > 0, got ", o.log_interval);
  OCTET_CHECK(o.eval_interval >= 0 && o.checkpoint_interval >= 0,
              "Trainer::fit: eval_interval and checkpoint_interval must be >= 0, got ",
              o.eval_interval, " and ", o.checkpoint_interval);
  OCTET_CHECK(o.steps >= steps_done, "Trainer::fit: steps ", o.steps, " is below the ", steps_done,
              " steps already done");
}

// The model's own loss: GPT::loss.
BatchLoss model_loss(modules::Module& model) {
  auto* gpt = dynamic_cast<modules::GPT*>(&model);
  OCTET_CHECK(gpt != nullptr, "Trainer::fit: the model is not a modules::GPT, so ",
              "FitOptions::loss must say how to compute its loss");
  return [gpt](const data::Batch& b, modules::FirstMicrobatch first) {
    return gpt->loss(b.inputs, b.targets, first);
  };
}

// The loop's clocks: the rate since fit() began and since the last log point.
struct Rates {
  Clock::time_point loop_start = Clock::now(), interval_start = Clock::now();
  int64_t first_step = 0, tokens_per_step = 0, interval_tokens = 0;

  FitProgress progress(int64_t step, int64_t total) const {
    const double elapsed = seconds_since(loop_start);
    const auto done = static_cast<double>(step - first_step);
    return {total, done * static_cast<double>(tokens_per_step) / std::max(elapsed, 1e-9),
            elapsed / done * static_cast<double>(total - step)};
  }
  double interval_rate() {
    const double rate =
        static_cast<double>(interval_tokens) / std::max(seconds_since(interval_start), 1e-9);
    interval_start = Clock::now();
    interval_tokens = 0;
    return rate;
  }
};

}  // namespace

void Trainer::fit_step(data::Dataset& data, const FitOptions& o, const BatchLoss& loss) {
  if (options_.cuda_graphs) {
    fit_step_graphed(data, o, loss);
    return;
  }
  const int64_t ranks = world_size(), rows = o.batch_size;
  run_step([&](int64_t, modules::FirstMicrobatch first) {
    // This rank's rows of the global batch; every rank's cursor moves past all of it.
    const data::Batch batch =
        data.next_rows(data::Split::kTrain, rows * ranks, o.seq_len, rank() * rows, rows);
    return loss(batch, first);
  });
}

void Trainer::fit_step_graphed(data::Dataset& data, const FitOptions& o, const BatchLoss& loss) {
  if (static_cast<int64_t>(waiting_.size()) == kMaxWaitingSteps) read_waiting();
  const Device device = params_.front().tensor->device();
  const int64_t accum = options_.grad_accum;
  // This step's batches and rate into the tensors the step reads, queued before it.
  if (graph_batches_.empty()) {
    for (int64_t micro = 0; micro < accum; ++micro) {
      graph_batches_.push_back({Tensor::empty({o.batch_size, o.seq_len}, DType::kI32, device),
                                Tensor::empty({o.batch_size, o.seq_len}, DType::kI32, device)});
    }
    graph_lr_ = Tensor::empty({1}, DType::kF32, device);
    graph_losses_ = Tensor::empty({accum}, DType::kF32, device);
    graph_norm_ = Tensor::zeros({1}, DType::kI64, device);
  }
  for (data::Batch& staged : graph_batches_) {
    const data::Batch b =
        data.next_rows(data::Split::kTrain, o.batch_size, o.seq_len, 0, o.batch_size);
    OCTET_CHECK(
        b.inputs.shape() == staged.inputs.shape() && b.targets.shape() == staged.targets.shape(),
        "training.cuda_graphs: the captured step reads batches like ", staged.inputs,
        " but the data gave ", b.inputs, " (a dynamic shape cannot be replayed)");
    staged.inputs.copy_bytes_from(b.inputs);
    staged.targets.copy_bytes_from(b.targets);
  }
  Tensor lr = Tensor::empty({1}, DType::kF32);
  lr.data_as<float>()[0] = options_.schedule.at(step_);
  graph_lr_.copy_bytes_from(lr);

  const bool high_precision = forward_in_high_precision();
  if (graph_ != nullptr && high_precision != graph_high_precision_) {
    graph_.reset();  // another forward: one eager step, then a new capture
    graph_warmup_left_ = 1;
  }
  auto loss_of = [&](int64_t micro, modules::FirstMicrobatch first) {
    return loss(graph_batches_[static_cast<size_t>(micro)], first);
  };
  graph_step_ = true;
  try {
    if (graph_ == nullptr && graph_warmup_left_ > 0) {
      --graph_warmup_left_;
      run_one(loss_of);
    } else if (graph_ == nullptr) {
      // The host counts the elements each FP8 cast takes: what the step adds, each replay adds.
      std::vector<FP8CastCounts*> counts;
      for (const auto& [name, state] : model_.fp8_states()) {
        for (FP8CastCounts* c : state->cast_counts()) counts.push_back(c);
      }
      std::vector<int64_t> before;
      for (const FP8CastCounts* c : counts) before.push_back(c->total);
      auto graph = std::make_unique<cuda::Graph>(device);
      graph->begin_capture();
      run_one(loss_of);  // recorded, not run: the host's side of the step happens here
      graph->end_capture();
      graph_cast_totals_.clear();
      for (size_t i = 0; i < counts.size(); ++i) {
        graph_cast_totals_.emplace_back(counts[i], counts[i]->total - before[i]);
      }
      graph_ = std::move(graph);
      graph_high_precision_ = high_precision;
      graph_->replay();
    } else {
      // The host's side of run_one for a replayed step.
      StepResult r;
      r.step = step_ + 1;
      r.lr = options_.schedule.at(step_);
      sync_->begin_step();
      graph_->replay();
      optimizer_.device_step_replayed();
      for (const auto& [counts, total] : graph_cast_totals_) counts->total += total;
      step_ = r.step;
      r.comm = sync_->step_bytes();
      waiting_.push_back(r);
    }
  } catch (...) {
    graph_step_ = false;
    graph_.reset();
    throw;
  }
  graph_step_ = false;
  // The step's losses and norm into its waiting slot; checked launches may have run.
  const auto slot = static_cast<int64_t>(waiting_.size()) - 1;
  waiting_losses_.slice(slot * accum, (slot + 1) * accum).copy_bytes_from(graph_losses_);
  Tensor norm = waiting_norms_.slice(slot, slot + 1);
  norm.copy_bytes_from(graph_norm_);
  (void)cuda::device_check_record(device);
}

EvalResult Trainer::fit_evaluate(data::Dataset& data, const FitOptions& o) {
  // Evaluated as this step trains: its forward in high precision after the switch.
  const modules::FP8HighPrecisionForward high_precision(forward_in_high_precision());
  if (o.evaluate) return o.evaluate();
  auto* gpt = dynamic_cast<modules::GPT*>(&model_);
  OCTET_CHECK(gpt != nullptr, "Trainer::fit: the model is not a modules::GPT, so FitOptions::",
              "evaluate must say how to evaluate it");
  EvalOptions eval = o.eval;
  if (eval.batch_size == 0) eval.batch_size = o.batch_size;
  if (eval.seq_len == 0) eval.seq_len = o.seq_len;
  return train::evaluate(*gpt, data, eval, options_.recipe, options_.comm.get());
}

void Trainer::fit_save(data::Dataset& data, const FitOptions& o, FitObserver* observer) {
  if (o.checkpoint_path.empty()) return;
  SafetensorsMetadata metadata = observer->checkpoint_metadata();
  OCTET_CHECK(metadata.find(kDataStateKey) == metadata.end(), "Trainer::fit: metadata key \"",
              kDataStateKey, "\" is fit's own");
  metadata.emplace(kDataStateKey, data::encode_state(data.state()));
  save(o.checkpoint_path, metadata);
  observer->on_checkpoint(step_, o.checkpoint_path);
}

FitResult Trainer::fit(data::Dataset& data, const FitOptions& o, FitObserver* observer) {
  const auto t0 = Clock::now();
  check_fit_options(o, step_);
  FitObserver silent;
  if (observer == nullptr) observer = &silent;
  const BatchLoss loss = o.loss ? o.loss : model_loss(model_);
  FitResult result;
  result.start_step = step_;
  Rates rates;
  rates.first_step = step_;
  rates.tokens_per_step = o.batch_size * o.seq_len * options_.grad_accum * world_size();
  // Each read result, in step order: checked (the non-finite stop, which ends the run before
  // the step is reported), then reported.
  auto take = [&](const StepResult& r) {
    check_nonfinite(r);
    result.losses.emplace_back(r.step, r.loss);
    observer->on_step(r, rates.progress(r.step, o.steps));
    if (r.step % o.log_interval == 0 || r.step == o.steps) {
      observer->on_log(r, rates.interval_rate());
    }
  };
  while (step_ < o.steps) {
    fit_step(data, o, loss);
    const int64_t step = step_;
    rates.interval_tokens += rates.tokens_per_step;
    const bool last = step == o.steps;
    const bool evaluates = every(o.eval_interval, step) && !last;
    const bool checkpoints = every(o.checkpoint_interval, step) && !last;
    const bool interrupts = observer->interrupt_after(step);
    // Deferred reads wait for a step that needs its result: the host queues the next step while
    // the device runs this one.
    if (deferred_ && !every(o.log_interval, step) && !last && !evaluates && !checkpoints &&
        !interrupts) {
      continue;
    }
    read_waiting();
    bool skipped = false;
    for (const StepResult& r : std::exchange(ready_, {})) {
      take(r);
      skipped = r.skipped;  // the last one is this step's
    }
    if (interrupts) {
      result.interrupted = true;
      break;
    }
    if (evaluates) observer->on_eval(step, fit_evaluate(data, o));
    if (checkpoints && !skipped) fit_save(data, o, observer);
  }
  if (!result.interrupted) {
    result.final_eval = fit_evaluate(data, o);
    observer->on_eval(step_, *result.final_eval);
    fit_save(data, o, observer);
  }
  result.end_step = step_;
  result.skipped_steps = skipped_;
  result.seconds = seconds_since(t0);
  return result;
}

void Trainer::resume(const std::string& path, data::Dataset& data) {
  Checkpoint c;
  run_collectively(sync_->comm(), [&] { c = read_checkpoint(path); });
  resume(c, data);
}

void Trainer::resume(const Checkpoint& c, data::Dataset& data) {
  const auto found = c.metadata.find(kDataStateKey);
  OCTET_CHECK(found != c.metadata.end(), "checkpoint ", c.path, ": no __metadata__ \"",
              kDataStateKey, "\" (the data position), so fit() cannot continue from it");
  const data::DataState before = data.state();
  try {
    data.set_state(data::decode_state(found->second));  // checked against this dataset
  } catch (const Error& e) {
    OCTET_FAIL("checkpoint ", c.path, ": __metadata__ \"", kDataStateKey, "\" does not fit ",
               data.describe(), ": ", e.what());
  }
  try {
    load(c);
  } catch (...) {
    data.set_state(before);
    throw;
  }
}

}  // namespace octet::train
