// The training loop of `octet train`: config -> dataset -> GPT (FP8 per the recipe) -> optimizer,
// with gradient accumulation, clipping, skipped non-finite steps, evaluation, checkpoints, exact
// resume, and the run directory (config, metrics.jsonl, loss curve, memory summary).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "modules/gpt.h"
#include "runtime/comm.h"
#include "tools/config.h"
#include "tools/data.h"
#include "train/trainer.h"

namespace octet::cli {

// ---- the model a config describes (shared by train, eval and generate) ----

// The recipe of the run, or nullopt when fp8.enabled is false.
std::optional<Recipe> run_recipe(const config::RunConfig& config);
// model.seq_len, or the data's natural length when it is 0.
int64_t run_seq_len(const config::RunConfig& config, const data::Dataset& dataset);
// Vocabulary from the data when model.vocab is 0 (a smaller one than the data needs is an error),
// seed from training.seed.
modules::GPTConfig gpt_config(const config::RunConfig& config, const data::Dataset& dataset);
// The Trainer's options a config describes (optimizer, schedule, recipe, accumulation, ...).
train::TrainerOptions trainer_options(const config::RunConfig& config);

// ---- evaluation ----

struct EvalResult {
  data::Metric metric = data::Metric::kLoss;
  double value = 0.0;  // accuracy in [0, 1], bits per byte, or loss
  // The mean cross-entropy (nats per token) over the first eval_batches validation batches, for
  // every dataset: the held-out counterpart of the training loss.
  double loss = 0.0;
  int64_t examples = 0;  // held-out problems (tasks) or validation tokens
  std::vector<std::string> mistakes;
  std::string name() const;  // "accuracy", "bits_per_byte", "loss"
  std::string text() const;  // "accuracy 99.7%", "bits per byte 1.234", "loss 3.210"
};

// Held-out evaluation of `model` on `dataset` with the config's training.eval_* keys: the mean loss
// over the first eval_batches validation batches, and exact match of greedy answers (tasks) or
// that loss as is or in bits per byte (text)
// (loss, bits per byte for text). Runs with gradients disabled, so no FP8 scale moves.
// Data parallel (`comm` of several ranks): each rank evaluates its share of the batches and the
// ranks add up the counts and losses (the examples of mistakes are this rank's).
EvalResult evaluate(modules::GPT& model, data::Dataset& dataset, const config::RunConfig& config,
                    Communicator* comm = nullptr);

// Greedy (temperature 0) or sampled continuation of (N, P) prompts under the run's FP8 recipe, as
// the model was trained; returns (N, new_tokens). GPT::generate runs in inference mode.
Tensor generate_tokens(modules::GPT& model, const std::optional<Recipe>& recipe,
                       const Tensor& prompts, int64_t new_tokens, float temperature,
                       Generator* gen);

// ---- training ----

enum class Resume : uint8_t { kNo, kYes };
enum class ProgressStyle : uint8_t {
  kLive,   // one line rewritten in place (a terminal)
  kLines,  // a plain line now and then (a log file or pipe)
  kQuiet,  // nothing but the closing summary
};

// Test hooks: faults a real run can meet, made to happen on purpose.
struct TrainHooks {
  // > 0: end right after this step as if the process were killed (no final checkpoint or eval).
  int64_t interrupt_after_step = 0;
  // Steps (1-based) whose loss is replaced by NaN before the non-finite check.
  std::function<bool(int64_t step)> poison_loss;
};

struct TrainResult {
  int64_t start_step = 0;  // steps already done when this run started (resume)
  int64_t end_step = 0;
  std::vector<std::pair<int64_t, double>> losses;  // (step, loss) of every step this run ran
  std::optional<EvalResult> final_eval;            // absent when interrupted
  int64_t skipped_steps = 0;
  double seconds = 0.0;
  std::string run_dir;
  std::string summary;  // the closing line
};

// Trains per `config` into config.output.dir. With Resume::kYes, continues exactly from the run
// directory's checkpoint (whose config must be compatible). Progress goes to `out`; warnings to
// the log. Throws octet::Error for bad input and when too many steps in a row are non-finite (the
// last good checkpoint stays in place).
//
// Data parallel when a launcher started several processes (world_communicator()): every rank
// checks that it runs the same config as rank 0, reads its own rows of each global batch of
// N x training.batch_size sequences, and trains the same model; rank 0 alone prints and writes
// the run directory. A resume may use another number of ranks (the data position is global).
TrainResult train(const config::RunConfig& config, Resume resume, std::ostream& out,
                  ProgressStyle style, const TrainHooks& hooks = {});

}  // namespace octet::cli
