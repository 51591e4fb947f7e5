// The training loop as a library class. fit() runs a whole run on a dataset: the steps, the
// held-out evaluations, checkpoints and log points at their intervals, the non-finite stop, and
// the host reads of each step's results; an observer hears of each. `octet train` is fit() with
// the run directory as its observer; an application calls it the same way:
//
//   train::Trainer trainer(model, options);                 // model: a modules::GPT
//   train::FitOptions fit;  fit.steps = 1000; fit.batch_size = 8; fit.seq_len = 256;
//   fit.checkpoint_path = "run/checkpoint.safetensors"; fit.checkpoint_interval = 100;
//   trainer.resume(fit.checkpoint_path, dataset);           // to continue a run, exactly
//   const train::FitResult r = trainer.fit(dataset, fit);
//
// Underneath, step() is one optimizer step from gradient-accumulated micro-batches under the
// recipe's FP8 scope (weights cached across micro-batches), global gradient clipping, NaN/inf
// steps skipped (too many in a row stop the run) and the learning-rate schedule; a loop of its own
// can call it for any module:
//
//   for (...) {
//     const train::StepResult r = trainer.step([&](int64_t micro, modules::FirstMicrobatch first) {
//       return model.loss(inputs[micro], targets[micro], first);  // inside the FP8 scope
//     });
//   }
//   trainer.save("run/checkpoint.safetensors");   // model, optimizer, FP8 metas, step
//   trainer.load("run/checkpoint.safetensors");   // and back, bit for bit
//
// Data parallel: with options.comm = world_communicator() under `mpirun -np N`, every rank
// builds the same model and trainer and passes step() its own part of each global batch; the
// trainer averages the gradients, reduces the FP8 amaxes, and (ZeRO-1) shards the optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "modules/fp8_state.h"
#include "modules/module.h"
#include "modules/optimizer.h"
#include "runtime/comm.h"
#include "runtime/cuda.h"
#include "runtime/recipe.h"
#include "runtime/safetensors.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/fit.h"
#include "train/gradient_sync.h"
#include "train/step.h"

namespace octet::train {

// When a step's loss, gradient norm and skip decision reach the host.
enum class StepReads : uint8_t {
  kAuto,       // kDeferred for a model on a GPU, else kEveryStep
  kEveryStep,  // each micro-batch's loss is read as it comes: a NaN ends the step at once
  // Everything stays on the device until results() (or step(), save(), load()) reads every
  // step run since, in one copy back: the host never waits inside a step. Every micro-batch
  // runs, forward and backward, and the device skips the update (ops::finite_gate,
  // Optimizer::step(lr, gate)) when a loss or the norm is NaN/inf; FP8 amaxes of a non-finite
  // backward reach the scaling state as they do in TransformerEngine, whose delayed scaling
  // (like octet's) keeps a scale whose amax is not finite. Data parallel: the ranks' losses
  // are all-gathered and the norm's parts stay tensors where they live (NCCL: on the GPUs), so
  // every rank's gate is the same bits and nothing reaches the host before the read either.
  kDeferred,
};

struct TrainerOptions {
  modules::OptimizerOptions optimizer;
  modules::LrSchedule schedule;
  std::optional<Recipe> recipe;  // the FP8 scope around every forward; none: high precision
  // From this step (steps done, 0-based) on, the forward GEMMs run in high precision and the
  // backward stays under the recipe (modules::FP8HighPrecisionForward), evaluation included;
  // -1: never. A function of the step, so a resumed run switches where the run would have.
  int64_t high_precision_forward_from = -1;
  // The backward GEMMs in high precision, the forward under the recipe
  // (modules::FP8HighPrecisionBackward), on every step; exclusive with the above.
  bool high_precision_backward = false;
  int64_t grad_accum = 1;  // micro-batches per optimizer step (the loss is averaged)
  double grad_clip = 1.0;  // max global L2 norm of the gradients; <= 0 only measures
  // Steps in a row whose loss or gradient norm is NaN/inf before step() throws.
  int64_t max_nonfinite_steps = 10;
  // Quantize each FP8 weight once per step (first micro-batch) and reuse it for the others; only
  // with several micro-batches, and never for FP8 primary weights (already FP8).
  bool cache_fp8_weights = true;
  // Data parallel (train/data_parallel.h): the ranks that train the model together; null, or
  // one rank, is this process alone. Every rank must build the same model from the same seed
  // and the same options (checked, with an error naming what differs, before the first step).
  std::shared_ptr<Communicator> comm;
  ZeroStage zero_stage = ZeroStage::kNone;       // kOptimizerState: ZeRO-1
  int64_t grad_bucket_bytes = int64_t{1} << 20;  // f32 gradient bytes per reduced bucket
  StepReads reads = StepReads::kAuto;
  // fit()'s steps captured once into a CUDA graph and replayed (cuda::Graph): the host queues a
  // step with one launch. Each step's batch is uploaded into the same device tensors and its
  // learning rate into a device scalar before the replay; the first kGraphWarmupSteps steps (and
  // the first after the forward's switch to high precision) run eagerly, the next is captured.
  // Needs deferred reads on a CUDA device, one process, and a recipe without random streams
  // (checked, naming training.cuda_graphs); the model must draw no host randomness per step
  // (no dropout). Losses, gradients, weights and FP8 state are bit-identical to running without.
  // Trainer::step() and run_step() with a loss of their own run eagerly.
  bool cuda_graphs = false;
};

class Trainer {
 public:
  // The loss of micro-batch `micro` of the step (0-based), called inside the FP8 scope; `first`
  // is the weight-caching flag to pass to the model's forward.
  using MicroBatchLoss = std::function<Tensor(int64_t micro, modules::FirstMicrobatch first)>;

  // Optimizes every parameter of `model`, which must outlive the trainer (and be on its device
  // already: the optimizer's state is made where the parameters live).
  Trainer(modules::Module& model, TrainerOptions options);

  // One optimizer step: grad_accum micro-batches (forward in the FP8 scope, backward of
  // loss / grad_accum), clipping, the update at schedule.at(step), zero_grad. A NaN/inf loss
  // ends the step at once (the remaining micro-batches are not asked for) and skips the update;
  // max_nonfinite_steps such steps in a row throw octet::Error. The gradient's global norm and
  // the loss are reported. Data parallel: the loss is the mean over the ranks (a NaN on one
  // rank skips the step on all), and accumulation, clipping and the norm see the gradient
  // averaged over the ranks.
  // Under deferred reads it runs the step and reads it (with every step run before it: their
  // results wait in results()).
  StepResult step(const MicroBatchLoss& loss);

  // Trains on `data` until steps_done() reaches options.steps (FitOptions, train/fit.h): each
  // step draws this rank's rows of a global batch of batch_size x world_size() sequences (every
  // rank's cursor moves past all of it); evaluations, checkpoints (with the data position) and
  // log points come at their intervals, and the last step is always evaluated and checkpointed.
  // max_nonfinite_steps non-finite steps in a row throw, naming the last good checkpoint, which
  // stays in place. Deferred reads are read at log points, evaluations, checkpoints and the end.
  FitResult fit(data::Dataset& data, const FitOptions& options, FitObserver* observer = nullptr);
  // load() and the checkpoint's data position into `data`, to continue a fit() exactly.
  void resume(const std::string& path, data::Dataset& data);
  void resume(const Checkpoint& checkpoint, data::Dataset& data);
  // The same step without reading anything (deferred reads; with reads every step it is step()
  // and keeps the result for results()). Returns the step's number.
  int64_t run_step(const MicroBatchLoss& loss);
  // The results of the steps run since the last call, in order: under deferred reads one copy
  // back of every waiting step's losses and one of their norms. The skipped-step counts move
  // here, and max_nonfinite_steps throws here, at the step that reached it. At most
  // kMaxWaitingSteps wait: the next run_step reads them first.
  std::vector<StepResult> results();
  static constexpr int64_t kMaxWaitingSteps = 256;
  bool deferred_reads() const { return deferred_; }

  // Runs `f` with the model in eval mode and gradients disabled (no FP8 scale moves), then
  // restores the mode; `f` opens FP8 scopes with recipe() where it runs the model.
  double evaluate(const std::function<double()>& f);

  // Writes the model, the optimizer, every FP8 meta and the trainer's own state ("step",
  // "skipped_steps", "nonfinite_run", "world_size") with the caller's `metadata`
  // (train/checkpoint.h). Data parallel: a collective; rank 0 writes the one file (ZeRO-1's
  // optimizer state gathered first), and a failure to write is an error on every rank.
  void save(const std::string& path, const SafetensorsMetadata& metadata = {});
  // Restores all of it; returns the checkpoint's metadata for the caller's own entries. Any
  // number of ranks loads a checkpoint written by any number (every rank reads the file).
  SafetensorsMetadata load(const std::string& path);
  void load(const Checkpoint& checkpoint);  // a checkpoint already read

  int64_t steps_done() const { return step_; }
  int64_t skipped_steps() const { return skipped_; }  // of the steps whose results were read
  const std::optional<Recipe>& recipe() const { return options_.recipe; }
  const TrainerOptions& options() const { return options_; }
  modules::Optimizer& optimizer() { return optimizer_; }
  modules::Module& model() { return model_; }
  // Data parallel: the gradient reduction (null in one process).
  const DataParallel* data_parallel() const {
    return dynamic_cast<const DataParallel*>(sync_.get());
  }
  // The optimizer's state as full tensors, named as Optimizer::state_dict names them (ZeRO-1:
  // gathered from every rank, a collective).
  NamedTensors optimizer_state() { return sync_->optimizer_state(optimizer_); }
  int rank() const { return sync_->comm().rank(); }
  int world_size() const { return sync_->comm().size(); }

 private:
  void check_same_on_all_ranks();
  // Micro-batch `micro`'s loss, its forward in the recipe's FP8 scope.
  Tensor forward(const MicroBatchLoss& loss, int64_t micro);
  // Whether this step's forwards run in high precision (options_.high_precision_forward_from).
  bool forward_in_high_precision() const;
  // The step, for both read modes: read every step, each loss reaches the host as it comes and a
  // NaN/inf one ends the step at once (its result joins ready_); deferred, the losses and the
  // norm stay on the device, where they gate the update, and the step waits in waiting_.
  void run_one(const MicroBatchLoss& loss);
  // The waiting steps' results into ready_ (deferred reads).
  void read_waiting();
  // After a step's result is known: the skipped-step counts.
  void count(StepResult& r);
  // Throws when `r` ends max_nonfinite_steps non-finite steps in a row, naming the last good
  // checkpoint; check_ready() does it for every read result, in step order.
  void check_nonfinite(const StepResult& r) const;
  void check_ready();
  // fit()'s parts: one step on this rank's rows, the results read and reported, the evaluation.
  void fit_step(data::Dataset& data, const FitOptions& o, const BatchLoss& loss);
  EvalResult fit_evaluate(data::Dataset& data, const FitOptions& o);
  void fit_save(data::Dataset& data, const FitOptions& o, FitObserver* observer);

  modules::Module& model_;
  TrainerOptions options_;
  std::vector<modules::Parameter> params_;
  // The other ranks: DataParallel, or LocalSync in one process (never null).
  std::unique_ptr<GradientSync> sync_;
  modules::Optimizer optimizer_;
  bool cache_weights_ = false;
  int64_t step_ = 0;
  int64_t skipped_ = 0;
  int64_t nonfinite_run_ = 0;
  // The checkpoint last written or loaded, named when too many non-finite steps stop the run.
  std::string last_checkpoint_;
  int64_t last_checkpoint_step_ = -1;
  bool deferred_ = false;
  // Deferred reads: the waiting steps (number, lr, bytes sent; the rest filled when read), and
  // their values on the model's device: per step, every rank's grad_accum f32 losses (rank
  // major) and one f64 norm (as i64 bits).
  std::vector<StepResult> waiting_;
  Tensor waiting_losses_, waiting_norms_;
  std::vector<StepResult> ready_;  // read, not yet returned by results()

  // CUDA graphs (options_.cuda_graphs): fit()'s step reads its batch from graph_batches_ (one per
  // micro-batch) and its rate from graph_lr_, and writes its losses and norm to graph_losses_
  // and graph_norm_, copied into the waiting slot after it.
  void fit_step_graphed(data::Dataset& data, const FitOptions& o, const BatchLoss& loss);
  std::unique_ptr<cuda::Graph> graph_;
  bool graph_step_ = false;            // run_one() uses the graph's tensors
  bool graph_high_precision_ = false;  // forward_in_high_precision() when captured
  int64_t graph_warmup_left_ = kGraphWarmupSteps;
  std::vector<data::Batch> graph_batches_;
  Tensor graph_lr_, graph_losses_, graph_norm_;
  // The elements each FP8 cast count took in the captured step, added again per replay.
  std::vector<std::pair<FP8CastCounts*, int64_t>> graph_cast_totals_;

 public:
  static constexpr int64_t kGraphWarmupSteps = 2;
  int64_t graph_nodes() const;  // operations in the captured step; 0 before the capture
};

// How many ranks trained the checkpoint (1 for checkpoints of one process, or written before
// the trainer recorded it).
int64_t checkpoint_world_size(const Checkpoint& checkpoint);

}  // namespace octet::train
