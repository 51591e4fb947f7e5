// LayerNorm and RMSNorm modules (eps, zero_centered_gamma), and the normalisation step the
// fused FP8 modules share.
#pragma once

#include <cstdint>

#include "autograd/ops/nn.h"
#include "modules/module.h"

namespace octet::modules {

using ops::ZeroCenteredGamma;

using ops::NormKind;

struct NormOptions {
  NormKind kind = NormKind::kLayerNorm;
  float eps = 1e-5f;
  ZeroCenteredGamma zero_centered_gamma = ZeroCenteredGamma::kNo;
  DType dtype = DType::kF32;
};

// The norm's parameters: gamma (1, or 0 with zero-centered gamma) and, for LayerNorm, beta (0).
struct NormParams {
  Tensor gamma, beta;
  void init(int64_t features, const NormOptions& options);
};

// Forward and backward of the normalisation over the last dimension (ops kernels).
ops::NormForward norm_forward(const Tensor& x, const NormParams& p, const NormOptions& options);
ops::NormBackward norm_backward(const Tensor& dy, const Tensor& x, const ops::NormForward& saved,
                                const Tensor& gamma, const NormOptions& options);

class Norm : public Module {
 public:
  Norm(int64_t features, NormOptions options = {});
  Tensor forward(const Tensor& x);
  const Tensor& gamma() const { return params_.gamma; }
  const Tensor& beta() const { return params_.beta; }

 private:
  int64_t features_;
  NormOptions options_;
  NormParams params_;
};

}  // namespace octet::modules
