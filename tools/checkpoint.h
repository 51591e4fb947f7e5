// The checkpoints of `octet train`: the library's checkpoint (train/checkpoint.h: model,
// optimizer, every FP8 meta, the Trainer's step and skipped steps) plus what the command line
// needs to resume exactly and to rebuild the model alone: the trainer's generator, the data
// position, the resolved run config and the tokenizer, as "__metadata__" entries "rng",
// "data_state" (data::encode_state), "config" (JSON) and "tokenizer" (data::Tokenizer::serialize,
// so that the checkpoint alone turns text into its model's tokens and back).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "modules/gpt.h"
#include "runtime/rng.h"
#include "tools/config.h"
#include "train/checkpoint.h"
#include "train/hf_checkpoint.h"

namespace octet::cli {

inline constexpr std::string_view kCheckpointFile = "checkpoint.safetensors";

struct TrainerState {
  int64_t step = 0;           // optimizer steps done
  int64_t skipped_steps = 0;  // non-finite steps skipped so far
  RngState rng;               // the trainer's generator
  data::DataState data;
  config::RunConfig config;
  // What the run's text goes through; none for tasks and token shards without data.tokenizer.
  std::optional<data::Tokenizer> tokenizer;
};

// The metadata entries of `state` that the Trainer does not write itself (rng, data, config,
// tokenizer).
SafetensorsMetadata run_metadata(const TrainerState& state);

// A run's checkpoint read and checked: the library's checks, then bad run metadata, each an
// octet::Error naming the file.
struct Checkpoint : train::Checkpoint {
  TrainerState state;
};
Checkpoint read_checkpoint(const std::string& path);

// The tokenizer of the checkpoint's model: the one it carries, or byte tokens for a model trained
// on text before checkpoints carried one; none for tasks and token shards without a tokenizer.
std::optional<data::Tokenizer> checkpoint_tokenizer(const Checkpoint& checkpoint);

// Copies the checkpoint's model state into `model` (names, shapes and dtypes must match: the
// error names the first that does not). FP8 primary weights come back row-wise only; training
// rebuilds column-wise data from them on demand.
void load_model_state(modules::Module& model, const Checkpoint& checkpoint);

// Throws, naming the first key that differs, when `run` cannot continue from a checkpoint
// written under `saved`: every model.*, fp8.* and data.* key and optimizer.kind must be equal.
void check_resumable(const config::RunConfig& saved, const config::RunConfig& run,
                     const std::string& path);

// ---- models without their data, Hugging Face folders, and --init ----

// The GPT a config describes, built with no dataset: model.vocab and model.seq_len must be set.
// For commands that only run or convert a model (import, export, generate --prompt-ids).
modules::GPTConfig gpt_config_without_data(const config::RunConfig& config);

// The run config of a model imported from the Hugging Face folder `folder`: its model.* keys,
// fp8.enabled=false (high precision until a recipe is chosen), every other key at its default.
// A hyperparameter the run config cannot hold is an error naming the folder and the key.
config::RunConfig imported_run_config(const train::HfModel& hf, const std::string& folder);

// Writes `hf` as a run checkpoint at `path` (atomically): its weights, step 0, the config of
// imported_run_config, and the folder's bos/eos token ids ("hf_token_ids") for export.
void write_imported_checkpoint(const train::HfModel& hf, const std::string& folder,
                               const std::string& path);

// The token ids write_imported_checkpoint recorded (none for a checkpoint octet trained).
train::HfExportOptions hf_export_options(const Checkpoint& checkpoint);

// model.vocab and model.seq_len, where they are 0 (taken from the data), from the sizes of the
// checkpoint's token and position embeddings, or (no position embedding: model.arch llama) from
// the length of the built-in task it was trained on.
void complete_model_keys(config::RunConfig& config, const Checkpoint& checkpoint);

// The weights `octet train --init SOURCE` starts from: a Hugging Face folder or a run checkpoint
// (FP8 primary weights dequantized), as f32 parameter values, with the model.* keys they need.
struct InitWeights {
  config::ModelConfig model;
  NamedTensors values;
};
InitWeights read_init_weights(const std::string& source);

// Hands the weights of --init from the command to train(): set before the run, taken by
// load_init_weights right after the model is built. Empty values: none.
void set_init_weights(NamedTensors values);
// Loads the weights set_init_weights holds into `model` (FP8 primary weights quantized from them,
// their f32 masters set to them) and lets them go; does nothing when none are held.
void load_init_weights(modules::GPT& model);

}  // namespace octet::cli
