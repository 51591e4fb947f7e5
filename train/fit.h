// What Trainer::fit runs and reports: its options (steps, batch shape, the evaluation, logging and
// checkpoint cadence), the observer that hears of each step, log point, evaluation and
// checkpoint, and the result of the run.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "modules/module.h"
#include "runtime/safetensors.h"
#include "train/evaluate.h"
#include "train/step.h"

namespace octet::train {

// The loss of one micro-batch (this rank's rows), called inside the FP8 scope with the
// weight-caching flag to pass to the model's forward.
using BatchLoss = std::function<Tensor(const data::Batch& batch, modules::FirstMicrobatch first)>;

struct FitOptions {
  int64_t steps = 0;          // train until steps_done() reaches this (a resumed trainer goes on)
  int64_t batch_size = 1;     // sequences per micro-batch on each rank
  int64_t seq_len = 0;        // tokens per sequence
  int64_t log_interval = 10;  // FitObserver::on_log every this many steps, and at the last
  // A held-out evaluation every this many steps (not at the last, which always evaluates);
  // 0: only at the end.
  int64_t eval_interval = 0;
  // A checkpoint every this many steps (not at a skipped step; the last always writes one);
  // 0: only at the end. Nothing is written while checkpoint_path is empty.
  int64_t checkpoint_interval = 0;
  std::string checkpoint_path;
  EvalOptions eval;  // its batch_size and seq_len: 0 takes fit's
  // The micro-batch loss; empty: the model's own, which must then be a modules::GPT.
  BatchLoss loss;
  // The held-out evaluation; empty: train::evaluate of the model (a modules::GPT).
  std::function<EvalResult()> evaluate;
};

// Where the run is, for progress displays.
struct FitProgress {
  int64_t total_steps = 0;
  double tokens_per_s = 0.0;  // since fit() began
  double eta_s = 0.0;         // at that rate, until total_steps
};

// Hears what fit() does; every method has a default that does nothing. Only rank 0's observer
// should print or write files (rank() says which rank this is).
class FitObserver {
 public:
  virtual ~FitObserver() = default;
  // Every step's result, in step order. Under deferred reads (a GPU) they arrive several at a
  // time: at log points, evaluations, checkpoints and the end.
  virtual void on_step(const StepResult& /*result*/, const FitProgress& /*progress*/) {}
  // Every log_interval steps and at the last: tokens per second since the previous log point.
  virtual void on_log(const StepResult& /*result*/, double /*tokens_per_s*/) {}
  virtual void on_eval(int64_t /*step*/, const EvalResult& /*result*/) {}
  virtual void on_checkpoint(int64_t /*step*/, const std::string& /*path*/) {}
  // The caller's own entries of every checkpoint's metadata (fit adds "data_state").
  virtual SafetensorsMetadata checkpoint_metadata() { return {}; }
  // Asked after each step whose result is read: true ends fit() there, with no evaluation or
  // checkpoint, as a killed process would (tests of resume use it).
  virtual bool interrupt_after(int64_t /*step*/) { return false; }
};

struct FitResult {
  int64_t start_step = 0;  // steps already done when fit() began (resume)
  int64_t end_step = 0;
  std::vector<std::pair<int64_t, double>> losses;  // (step, loss) of every step this fit ran
  std::optional<EvalResult> final_eval;            // absent when interrupted
  int64_t skipped_steps = 0;                       // in the whole run, resumed steps included
  bool interrupted = false;
  double seconds = 0.0;
};

// The metadata key of the data position fit() writes into checkpoints (data::encode_state).
inline constexpr const char* kDataStateKey = "data_state";

}  // namespace octet::train
