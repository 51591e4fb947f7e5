// Checkpoints of a module and its optimizer as safetensors files, with no CLI config: one call
// saves the module's state dict (FP8 primary weights in their format's checkpoint form, every
// FP8 meta), the optimizer's state and the caller's metadata; one call restores them.
//
// Layout: tensors "model.<state dict name>" and "optimizer.<state dict name>"; "__metadata__"
// (string values) holds "format" and "version", "fp8_recipes" (JSON: each FP8 module's recipe by
// module name, for modules whose recipe is known), "quantized" (JSON: per FP8 primary weight its
// format, dtype and shape, so a reader needs no model to tell what the bytes are) and whatever
// the caller adds (the Trainer: step and skipped_steps; `octet train`: rng, data, config).
#pragma once

#include <string>
#include <string_view>

#include "modules/module.h"
#include "modules/optimizer.h"
#include "runtime/safetensors.h"

namespace octet::train {

inline constexpr std::string_view kCheckpointFormat = "octet-checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr std::string_view kModelPrefix = "model.";
inline constexpr std::string_view kOptimizerPrefix = "optimizer.";

// Writes atomically (a temporary file renamed into place): a crash mid-save keeps the previous
// checkpoint. `optimizer` may be null (an inference export holds no optimizer state). Keys of
// `metadata` that octet writes itself are an error.
void save_checkpoint(const std::string& path, modules::Module& model, modules::Optimizer* optimizer,
                     const SafetensorsMetadata& metadata = {});
// The same with the optimizer's state given as tensors (ZeRO-1: the shards gathered,
// train::DataParallel::optimizer_state), named as Optimizer::state_dict names them.
void save_checkpoint(const std::string& path, modules::Module& model,
                     const NamedTensors& optimizer_state, const SafetensorsMetadata& metadata = {});

// A checkpoint read and checked: every malformed or truncated file, a safetensors file that is
// not an octet checkpoint, and a tensor outside model./optimizer. are octet::Errors naming the
// file.
struct Checkpoint {
  std::string path;
  NamedTensors model;      // names without the "model." prefix
  NamedTensors optimizer;  // names without the "optimizer." prefix
  SafetensorsMetadata metadata;
  NamedTensors tensors;  // every tensor with its full name, in file order
};
Checkpoint read_checkpoint(const std::string& path);

// Copies the checkpoint's model state into `model` and, when `optimizer` is not null, its
// optimizer state (names, shapes and dtypes must match: the error names the file and the first
// that does not). An FP8 module whose recipe is known and differs from the one the checkpoint
// was trained with is refused, naming both. FP8 primary weights come back row-wise only;
// training rebuilds column-wise data on demand.
void load_checkpoint(const Checkpoint& checkpoint, modules::Module& model,
                     modules::Optimizer* optimizer);
// read_checkpoint + load_checkpoint; returns the metadata (the caller's entries among it).
SafetensorsMetadata load_checkpoint(const std::string& path, modules::Module& model,
                                    modules::Optimizer* optimizer);

// An integer the caller saved in the metadata (e.g. "step"); a missing or malformed entry is an
// error naming the file and the key.
int64_t metadata_int(const Checkpoint& checkpoint, const std::string& key);
// A string entry; missing is an error naming the file and the key.
const std::string& metadata_at(const Checkpoint& checkpoint, const std::string& key);

}  // namespace octet::train
