// Linear: y = x·Wᵀ + b, in high precision or, inside an FP8 scope, with FP8 GEMMs (TE's Linear):
// the input is cast by the recipe's input quantizer, the weight per the weight-caching rule or
// as an FP8 primary weight, and backward casts the output gradient.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "modules/fp8_state.h"
#include "modules/module.h"

namespace octet::modules {

enum class Bias : uint8_t { kNo, kYes };
enum class FP8PrimaryWeights : uint8_t { kNo, kYes };
// kHigh: the module runs in high precision even inside an FP8 scope (per-module precision: the
// layers a user keeps out of FP8).
enum class Precision : uint8_t { kFP8, kHigh };

// Options shared by the FP8 modules.
struct LinearOptions {
  Bias bias = Bias::kYes;
  DType dtype = DType::kF32;     // parameter dtype (f32 or bf16)
  float init_std = 0.02f;        // weights ~ N(0, init_std), biases 0
  uint64_t seed = 0;             // initialisation stream
  std::optional<Recipe> recipe;  // known up front: FP8 metas exist from construction
  FP8PrimaryWeights fp8_primary_weights = FP8PrimaryWeights::kNo;  // needs `recipe`
  Precision precision = Precision::kFP8;
};

// Makes a weight (out, in) of `options`: f32/bf16 leaf, or an owned FP8 primary weight cast with
// a scratch amax (its slot's history stays zero), with column-wise data only when gradients are
// enabled. Used by every FP8 module for each of its weights.
struct WeightStorage {
  Tensor hp;                             // high-precision value (the leaf), unless FP8 primary
  std::shared_ptr<QuantizedTensor> fp8;  // FP8 primary weight
  Tensor fp8_leaf;                       // handle on fp8's row-wise data: the gradient's leaf
  Tensor initial_master;                 // f32 value fp8 was cast from, for the optimizer

  void init(int64_t out, int64_t in, const LinearOptions& options, FP8State& state, int gemm,
            uint64_t seed);
  bool is_fp8() const { return fp8 != nullptr; }
  const Tensor& leaf() const { return is_fp8() ? fp8_leaf : hp; }
  // This forward's operand (see FP8Weight).
  Operand operand(FP8Weight& cache, FP8State* state, int gemm, FirstMicrobatch first);
};

class Linear : public FP8Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});

  // x (..., in) -> (..., out). Under an FP8 scope, FP8 GEMMs with the scope's recipe; shapes
  // that break the FP8 GEMM rule are a clear error naming the shape.
  Tensor forward(const Tensor& x, FirstMicrobatch first = FirstMicrobatch::kUnset);

  const Tensor& weight() const { return weight_.leaf(); }
  const std::shared_ptr<QuantizedTensor>& fp8_weight() const { return weight_.fp8; }
  const Tensor& bias() const { return bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  LinearOptions options_;
  WeightStorage weight_;
  FP8Weight weight_cache_;
  Tensor bias_;
};

// y = x·Wᵀ with a weight owned elsewhere (a GPT's LM head: the tied token embedding's table or
// the untied head's), no bias: inside an FP8 scope the GEMMs of Linear, under the recipe, with the
// weight cast per the weight-caching rule; its gradient goes to the owner's leaf. Only the FP8
// state is this module's.
class ForeignWeightLinear : public FP8Module {
 public:
  ForeignWeightLinear(std::string what, const std::optional<Recipe>& recipe, uint64_t seed,
                      Precision precision = Precision::kFP8);

  // x (..., in) -> (..., out) for `weight` (out, in).
  Tensor forward(const Tensor& x, const Tensor& weight,
                 FirstMicrobatch first = FirstMicrobatch::kUnset);

 private:
  std::string what_;  // for errors: "LM head"
  Precision precision_;
  FP8Weight weight_cache_;
};

}  // namespace octet::modules
