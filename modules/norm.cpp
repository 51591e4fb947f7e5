// Norm parameters, the shared normalisation step, and the Norm module.
#include "modules/norm.h"

#include "autograd/variable.h"
#include "kernels/ops.h"

namespace octet::modules {

void NormParams::init(int64_t features, const NormOptions& options) {
  MemTagScope tag(MemTag::kWeights);
  // With a zero-centered gamma the scale is (1 + gamma), so gamma starts at 0.
  const float one = options.zero_centered_gamma == ZeroCenteredGamma::kYes ? 0.f : 1.f;
  gamma = Tensor::full({features}, one, options.dtype);
  autograd::set_requires_grad(gamma);
  if (options.kind == NormKind::kLayerNorm) {
    beta = Tensor::zeros({features}, options.dtype);
    autograd::set_requires_grad(beta);
  }
}

ops::NormForward norm_forward(const Tensor& x, const NormParams& p, const NormOptions& options) {
  if (options.kind == NormKind::kRMSNorm) {
    return ops::rmsnorm(x, p.gamma, options.eps, options.zero_centered_gamma);
  }
  return ops::layernorm(x, p.gamma, p.beta.defined() ? &p.beta : nullptr, options.eps,
                        options.zero_centered_gamma);
}

ops::NormBackward norm_backward(const Tensor& dy, const Tensor& x, const ops::NormForward& saved,
                                const Tensor& gamma, const NormOptions& options) {
  if (options.kind == NormKind::kRMSNorm) {
    return ops::rmsnorm_backward(dy, x, saved.rsigma, gamma, options.zero_centered_gamma);
  }
  return ops::layernorm_backward(dy, x, saved.mean, saved.rsigma, gamma,
                                 options.zero_centered_gamma);
}

Norm::Norm(int64_t features, NormOptions options)
    : Module(options.kind == NormKind::kLayerNorm ? "LayerNorm" : "RMSNorm"),
      features_(features),
      options_(options) {
  params_.init(features, options);
  register_parameter("weight", &params_.gamma);
  if (params_.beta.defined()) register_parameter("bias", &params_.beta);
}

Tensor Norm::forward(const Tensor& x) {
  OCTET_CHECK(x.dim() >= 1 && x.cols() == features_, type(), "(", features_, "): input ", x,
              " must end in ", features_);
  if (options_.kind == NormKind::kRMSNorm) {
    return autograd::rms_norm(x, params_.gamma, options_.eps, options_.zero_centered_gamma);
  }
  return autograd::layer_norm(x, params_.gamma, params_.beta, options_.eps,
                              options_.zero_centered_gamma);
}

}  // namespace octet::modules
