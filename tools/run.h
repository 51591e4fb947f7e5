// `octet train`, `eval` and `generate` from a config: the dataset, the GPT (FP8 per the recipe)
// and the Trainer it describes; train() hands the loop to Trainer::fit with the run directory
// (config, metrics.jsonl, loss curve, checkpoints, memory summary) as its observer.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "modules/gpt.h"
#include "runtime/comm.h"
#include "tools/config.h"
#include "train/evaluate.h"
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
// Whether a model the run had trained `step` steps runs its forward in high precision
// (fp8.high_precision_after): eval and generate use the model as its training ended.
bool forward_in_high_precision(const config::RunConfig& config, int64_t step);

// ---- evaluation ----

using train::EvalResult;
using train::generate_tokens;

// The config's training.eval_* keys as train::evaluate's options.
train::EvalOptions eval_options(const config::RunConfig& config, const data::Dataset& dataset);
// train::evaluate of `model` on `dataset` under the run's recipe with the config's eval keys.
EvalResult evaluate(modules::GPT& model, data::Dataset& dataset, const config::RunConfig& config,
                    Communicator* comm = nullptr);

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
