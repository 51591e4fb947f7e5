// Training checkpoints as safetensors files: the model's state dict (FP8 primary weights as
// F8_E4M3/F8_E5M2 with scale_inv, every FP8 meta), the optimizer state, and the trainer state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "modules/module.h"
#include "modules/optimizer.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"
#include "tools/config.h"
#include "tools/data.h"

namespace octet::train {

// Tensor names are "model.<state dict name>" and "optimizer.<state dict name>". The trainer state
// lives in "__metadata__" (string values): format, version, step, skipped_steps, rng, data_state
// (data::encode_state) and config (the resolved run config as JSON).
inline constexpr std::string_view kCheckpointFormat = "octet-checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr std::string_view kModelPrefix = "model.";
inline constexpr std::string_view kOptimizerPrefix = "optimizer.";
inline constexpr std::string_view kCheckpointFile = "checkpoint.safetensors";

struct TrainerState {
  int64_t step = 0;           // optimizer steps done
  int64_t skipped_steps = 0;  // non-finite steps skipped so far
  RngState rng;               // the trainer's generator
  data::DataState data;
  config::RunConfig config;
};

// Writes atomically (a temporary file renamed into place): a crash mid-save keeps the previous
// checkpoint. `optimizer` may be null (an inference export holds no optimizer state).
void save_checkpoint(const std::string& path, modules::Module& model, modules::Optimizer* optimizer,
                     const TrainerState& state);

// A checkpoint read and checked: every malformed or truncated file, a safetensors file that is not
// an octet checkpoint, and bad metadata are octet::Errors naming the file.
struct Checkpoint {
  std::string path;
  TrainerState state;
  NamedTensors model;      // names without the "model." prefix
  NamedTensors optimizer;  // names without the "optimizer." prefix
  SafetensorsMetadata metadata;
  NamedTensors tensors;  // every tensor with its full name, in file order
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

}  // namespace octet::train
