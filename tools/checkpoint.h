// The checkpoints of `octet train`: the library's checkpoint (train/checkpoint.h: model,
// optimizer, every FP8 meta, the Trainer's step and skipped steps) plus what the command line
// needs to resume exactly and to rebuild the model alone: the trainer's generator, the data
// position and the resolved run config, as "__metadata__" entries "rng", "data_state"
// (data::encode_state) and "config" (JSON).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "data/dataset.h"
#include "runtime/rng.h"
#include "tools/config.h"
#include "train/checkpoint.h"

namespace octet::cli {

inline constexpr std::string_view kCheckpointFile = "checkpoint.safetensors";

struct TrainerState {
  int64_t step = 0;           // optimizer steps done
  int64_t skipped_steps = 0;  // non-finite steps skipped so far
  RngState rng;               // the trainer's generator
  data::DataState data;
  config::RunConfig config;
};

// The metadata entries of `state` that the Trainer does not write itself (rng, data, config).
SafetensorsMetadata run_metadata(const TrainerState& state);

// A run's checkpoint read and checked: the library's checks, then bad run metadata, each an
// octet::Error naming the file.
struct Checkpoint : train::Checkpoint {
  TrainerState state;
};
Checkpoint read_checkpoint(const std::string& path);

// Copies the checkpoint's model state into `model` (names, shapes and dtypes must match: the
// error names the first that does not). FP8 primary weights come back row-wise only; training
// rebuilds column-wise data from them on demand.
void load_model_state(modules::Module& model, const Checkpoint& checkpoint);

// Throws, naming the first key that differs, when `run` cannot continue from a checkpoint
// written under `saved`: every model.*, fp8.* and data.* key and optimizer.kind must be equal.
void check_resumable(const config::RunConfig& saved, const config::RunConfig& run,
                     const std::string& path);

}  // namespace octet::cli
