// FP8 scaling recipes (DESIGN.md "Recipes"): delayed, current and MXFP8 scaling, TE's
// Float8BlockScaling ("blockwise") and NVFP4BlockScaling ("nvfp4"), torchao's row-wise scaling
// ("rowwise"), loaded from JSON
// (configs/recipes/*.json, keys documented in configs/README.md) with errors that name the key,
// and custom recipes made in code (TE's CustomRecipe): a factory of quantizers per slot.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "runtime/dtype.h"
#include "runtime/fp8_slot.h"

namespace octet {

class Quantizer;

enum class RecipeKind : uint8_t {
  kDelayed,    // per-tensor scale from an amax history, updated once per step
  kCurrent,    // per-tensor scale from the tensor's own amax at cast time
  kMXFP8,      // one E8M0 exponent per block of 32 values
  kBlockwise,  // one f32 scale per 1x128 (activations, gradients) or 128x128 (weights) block
  kNVFP4,      // E2M1 values, one E4M3 scale per 16 values and one f32 tensor scale
  kRowwise,    // one f32 scale per row of a GEMM operand, along the dimension it reduces
  kCustom,     // quantizers from a CustomRecipe made in code (never from JSON)
};

// The block shape of one tensor role under the blockwise recipe.
enum class BlockScaling : uint8_t {
  k1D = 1,  // 1x128: blocks of 128 consecutive values along the dimension the GEMM reduces
  k2D = 2,  // 128x128 tiles
};

enum class FP8Format : uint8_t {
  kE4M3,    // e4m3 for every tensor
  kHybrid,  // e4m3 forward (inputs, weights, outputs), e5m2 for gradients
};

enum class AmaxComputeAlgo : uint8_t {
  kMax,         // max over the whole history window
  kMostRecent,  // the newest entry only
};

// A recipe made in code: it names itself and makes the quantizer of every slot of an FP8 module
// (quantizers with their own formats, e.g. one that exists only in a test). Stateless as far as
// octet is concerned: any state lives in the quantizers it makes.
class CustomRecipe {
 public:
  virtual ~CustomRecipe() = default;
  virtual std::string name() const = 0;
  // The element dtype of the slot's quantized data.
  virtual DType dtype(FP8Direction direction) const = 0;
  virtual std::shared_ptr<Quantizer> make_quantizer(SlotId slot) const = 0;
};

// "delayed", "current", "mxfp8", "blockwise", "nvfp4", "rowwise", "custom"
std::string_view recipe_kind_name(RecipeKind kind);
std::string_view fp8_format_name(FP8Format format);             // "e4m3", "hybrid"
std::string_view amax_compute_algo_name(AmaxComputeAlgo algo);  // "max", "most_recent"

// How NVFP4 trains: TE's NVFP4BlockScaling, or Quartet II (arXiv 2601.22813): 1x16 blocks with
// 4over6 (MSE, block scales up to 256; with nvfp4_4over6 "none", every block scaled to 6 under the
// 448 bound) for both forward operands, and a backward that re-casts the forward's input and
// weight and the output gradient with a 128-point random-sign Hadamard transform and MS-EDEN
// (kernels/math/quartet2.h).
enum class NVFP4Method : uint8_t { kTE, kQuartet2 };
std::string_view nvfp4_method_name(NVFP4Method method);  // "te", "quartet2"

// Which NVFP4 tensors a setting covers (TE's scopes): weights, activations (inputs and outputs),
// both, or none; gradients never.
enum class NVFP4Scope : uint8_t { kNone, kWeights, kActivations, kAll };
std::string_view nvfp4_scope_name(NVFP4Scope scope);  // "none", "weights", "activations", "all"
inline bool covers_weights(NVFP4Scope s) {
  return s == NVFP4Scope::kWeights || s == NVFP4Scope::kAll;
}
inline bool covers_activations(NVFP4Scope s) {
  return s == NVFP4Scope::kActivations || s == NVFP4Scope::kAll;
}

struct Recipe {
  RecipeKind kind = RecipeKind::kDelayed;
  FP8Format fp8_format = FP8Format::kHybrid;  // mxfp8: always e4m3
  // delayed only
  int margin = 0;  // scale = (fp8_max / amax) / 2^margin
  int64_t amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::kMax;
  // Data parallel: all-reduce (MAX) every slot's newest amax across the ranks before each update
  // (modules/fp8_autocast.h); false: each rank keeps its own. One process: nothing to reduce.
  bool reduce_amax = true;
  // current, blockwise and rowwise
  bool power_2_scale = false;  // round the scale down to a power of two (default on but current)
  float amax_epsilon = 0.f;    // scale = fp8_max / max(amax, amax_epsilon)
  // blockwise only: which tensors get 1D (1x128) and which 2D (128x128) blocks; no GEMM may
  // multiply two 2D operands, so at most one of the three is 2D
  BlockScaling x_block_scaling = BlockScaling::k1D;     // inputs (and outputs)
  BlockScaling w_block_scaling = BlockScaling::k2D;     // weights
  BlockScaling grad_block_scaling = BlockScaling::k1D;  // output and input gradients
  // nvfp4 only: the method, then TE's switches (each on by default; quartet2 fixes its own, but
  // for 4over6, which it takes too, "all" by default)
  NVFP4Method nvfp4_method = NVFP4Method::kTE;
  bool random_hadamard_transform = true;  // 16x16 RHT on the wgrad GEMM's operands
  bool stochastic_rounding = true;        // gradients rounded stochastically
  bool weight_2d_quantization = true;     // 16x16 blocks for weights (else 1x16)
  // TE's 4over6 (off by default): the tensors whose blocks each keep the nearer of a map-to-4 and
  // a map-to-6 cast, the error that decides (MAE, or MSE with four_over_six_mse), and the
  // 4over6 tensors whose tensor scale allows for block scales up to 256 rather than 448
  NVFP4Scope four_over_six = NVFP4Scope::kNone;
  NVFP4Scope four_over_six_e4m3_256 = NVFP4Scope::kAll;
  bool four_over_six_mse = false;
  // custom only: the quantizer factory (recipes compare equal when they share it)
  std::shared_ptr<const CustomRecipe> custom;

  // The recipes with their documented defaults.
  static Recipe delayed(FP8Format format = FP8Format::kHybrid, int margin = 0,
                        int64_t amax_history_len = 1024,
                        AmaxComputeAlgo algo = AmaxComputeAlgo::kMax);
  static Recipe current(FP8Format format = FP8Format::kHybrid);
  static Recipe mxfp8();
  static Recipe blockwise(FP8Format format = FP8Format::kE4M3);
  static Recipe nvfp4();
  static Recipe rowwise(FP8Format format = FP8Format::kE4M3);
  static Recipe custom_recipe(std::shared_ptr<const CustomRecipe> factory);

  // The Quartet II form of nvfp4.
  static Recipe nvfp4_quartet2();

  // Whether the recipe's backward casts draw from per-slot random streams (kept in checkpoints,
  // so a resume draws what the run would have): nvfp4's stochastic rounding and Quartet II.
  bool uses_rng_streams() const;
  // Quartet II: the backward re-casts the forward's operands (kernels/nvfp4.h).
  bool is_quartet2() const {
    return kind == RecipeKind::kNVFP4 && nvfp4_method == NVFP4Method::kQuartet2;
  }

  // Whether the recipe keeps per-slot state in an FP8Meta (scales and amax histories that the
  // FP8 scope updates once per step): delayed scaling only.
  bool uses_fp8_meta() const;

  // The element dtype of forward or backward tensors: hybrid gives e5m2 to gradients; nvfp4's
  // E2M1 values are packed two to a byte, so its dtype is u8.
  DType dtype(FP8Direction direction) const;
  // blockwise: the block shape of a slot's tensors (weights w_, gradients grad_, others x_).
  BlockScaling block_scaling(SlotId slot) const;

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
// Every key of the recipe's kind, with its value (round-trips through recipe_from_json; a custom
// recipe is written as {"recipe": "custom", "name": ...} and cannot be read back).
nlohmann::json recipe_to_json(const Recipe& recipe);
std::string describe(const Recipe& recipe);  // the JSON text on one line

}  // namespace octet
