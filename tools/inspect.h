// `octet inspect`: what a checkpoint holds (tensors, FP8 metas, bytes by usage, trainer state and
// config) as a readable report or as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tools/checkpoint.h"

namespace octet::cli {

// Bytes of a checkpoint by what they are for. Column-wise FP8 data is never stored (training
// rebuilds it from row-wise data), so it is always 0 in a file; the field says so explicitly.
struct UsageBytes {
  int64_t fp8_rowwise = 0;     // FP8 primary weights: data and scale_inv / block scales
  int64_t fp8_columnwise = 0;  // always 0 in a checkpoint
  int64_t master = 0;          // high-precision weights (model, and the optimizer's f32 masters)
  int64_t optimizer = 0;       // moments, momentum, step
  int64_t fp8_meta = 0;        // delayed-scaling scales and amax histories
};
UsageBytes usage_bytes(const Checkpoint& checkpoint);

// Everything `octet inspect --json` prints: {"path", "file_bytes", "trainer", "bytes_by_usage",
// "tensors": [{name, dtype, shape, bytes}], "fp8_metas": [{slot, scale, amax_history_head,
// amax_newest}], "config"}.
nlohmann::ordered_json inspect_json(const Checkpoint& checkpoint);
// The same as aligned text for a person.
std::string inspect_text(const Checkpoint& checkpoint);

}  // namespace octet::cli
