// LayerNormMLP (TE's fused block): norm -> fc1 -> activation -> fc2, with FP8 GEMMs inside an
// FP8 scope. The norm output and the activation are quantized for the next GEMM and no
// high-precision copy of them is kept; `recompute` saves only the inputs and redoes
// norm + fc1 + activation in backward with the forward's scales.
#pragma once

#include <cstdint>
#include <memory>

#include "modules/linear.h"
#include "modules/norm.h"

namespace octet::modules {

enum class MLPActivation : uint8_t { kGelu, kRelu, kSquaredRelu, kSilu, kSwiglu, kGeglu, kReglu };
MLPActivation mlp_activation_from_name(std::string_view name);  // "gelu", ..., "swiglu"
std::string_view mlp_activation_name(MLPActivation a);          // model.activation's name
enum class Recompute : uint8_t { kNo, kYes };

struct LayerNormMLPOptions {
  NormOptions norm;
  MLPActivation activation = MLPActivation::kGelu;
  Recompute recompute = Recompute::kNo;
  LinearOptions linear;  // bias, dtype, init, recipe, FP8 primary weights (both GEMMs)
};

class LayerNormMLP : public FP8Module {
 public:
  // fc1: hidden -> ffn (2 * ffn for gated activations), fc2: ffn -> hidden.
  LayerNormMLP(int64_t hidden, int64_t ffn, LayerNormMLPOptions options = {});
  Tensor forward(const Tensor& x, FirstMicrobatch first = FirstMicrobatch::kUnset);

  const WeightStorage& fc1_weight() const { return w1_; }
  const WeightStorage& fc2_weight() const { return w2_; }
  const NormParams& norm() const { return norm_; }
  const Tensor& fc1_bias() const { return b1_; }
  const Tensor& fc2_bias() const { return b2_; }

 private:
  int64_t hidden_, ffn_;
  LayerNormMLPOptions options_;
  NormParams norm_;
  WeightStorage w1_, w2_;
  FP8Weight cache1_, cache2_;
  Tensor b1_, b2_;
};

// LayerNormLinear: norm -> linear, optionally also returning the norm output.
enum class ReturnNormOutput : uint8_t { kNo, kYes };

struct LayerNormLinearOptions {
  NormOptions norm;
  LinearOptions linear;
  ReturnNormOutput return_norm_output = ReturnNormOutput::kNo;
};

class LayerNormLinear : public FP8Module {
 public:
  LayerNormLinear(int64_t in_features, int64_t out_features, LayerNormLinearOptions options = {});
  // y; with ReturnNormOutput::kYes, forward_with_norm_output gives (y, norm output).
  Tensor forward(const Tensor& x, FirstMicrobatch first = FirstMicrobatch::kUnset);
  std::pair<Tensor, Tensor> forward_with_norm_output(
      const Tensor& x, FirstMicrobatch first = FirstMicrobatch::kUnset);

  const WeightStorage& weight() const { return w_; }
  const NormParams& norm() const { return norm_; }
  const Tensor& bias() const { return b_; }

 private:
  int64_t in_, out_;
  LayerNormLinearOptions options_;
  NormParams norm_;
  WeightStorage w_;
  FP8Weight cache_;
  Tensor b_;
};

}  // namespace octet::modules
