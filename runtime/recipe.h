// FP8 scaling recipes (DESIGN.md "Recipes"): delayed, current and MXFP8 scaling, loaded from JSON
// (configs/recipes/*.json, keys documented in configs/README.md) with errors that name the key.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "runtime/dtype.h"

namespace octet {

enum class RecipeKind : uint8_t {
  kDelayed,  // per-tensor scale from an amax history, updated once per step
  kCurrent,  // per-tensor scale from the tensor's own amax at cast time
  kMXFP8,    // one E8M0 exponent per block of 32 values
};

enum class FP8Format : uint8_t {
  kE4M3,    // e4m3 for every tensor
  kHybrid,  // e4m3 forward (inputs, weights, outputs), e5m2 for gradients
};

enum class AmaxComputeAlgo : uint8_t {
  kMax,         // max over the whole history window
  kMostRecent,  // the newest entry only
};

// Forward tensors (inputs, weights, outputs) or backward tensors (gradients).
enum class FP8Direction : uint8_t { kForward, kBackward };

std::string_view recipe_kind_name(RecipeKind kind);             // "delayed", "current", "mxfp8"
std::string_view fp8_format_name(FP8Format format);             // "e4m3", "hybrid"
std::string_view amax_compute_algo_name(AmaxComputeAlgo algo);  // "max", "most_recent"

struct Recipe {
  RecipeKind kind = RecipeKind::kDelayed;
  FP8Format fp8_format = FP8Format::kHybrid;  // mxfp8: always e4m3
  // delayed only
  int margin = 0;  // scale = (fp8_max / amax) / 2^margin
  int64_t amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::kMax;
  bool reduce_amax = true;  // all-reduce amaxes across processes (one process: nothing to reduce)
  // current only
  bool power_2_scale = false;  // round the scale down to a power of two
  float amax_epsilon = 0.f;    // scale = fp8_max / max(amax, amax_epsilon)

  // The recipes with their documented defaults.
  static Recipe delayed(FP8Format format = FP8Format::kHybrid, int margin = 0,
                        int64_t amax_history_len = 1024,
                        AmaxComputeAlgo algo = AmaxComputeAlgo::kMax);
  static Recipe current(FP8Format format = FP8Format::kHybrid);
  static Recipe mxfp8();

  // The FP8 dtype of forward or backward tensors: hybrid gives e5m2 to gradients.
  DType dtype(FP8Direction direction) const;

  bool operator==(const Recipe& other) const = default;
};

// Parses a recipe object. Unknown keys, wrong types and out-of-range values throw octet::Error
// naming `where` + the key and what was expected, e.g. "recipe.margin: expected an integer in
// [0, 64], got -1". `where` lets a larger config name its nested recipe ("train.fp8.recipe").
Recipe recipe_from_json(const nlohmann::json& json, std::string_view where = "recipe");
// The same from JSON text (a parse error names `where` and the position).
Recipe parse_recipe(std::string_view text, std::string_view where = "recipe");
// The same from a file (configs/recipes/delayed.json, ...); errors name the path.
Recipe load_recipe(const std::string& path);
// Every key of the recipe's kind, with its value (round-trips through recipe_from_json).
nlohmann::json recipe_to_json(const Recipe& recipe);
std::string describe(const Recipe& recipe);  // the JSON text on one line

}  // namespace octet
