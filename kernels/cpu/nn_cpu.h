// Helpers shared by the CPU backend's nn files: one row of a norm (the norm kernels and the norm
// fused with the FP8 cast give the same y bit for bit through it), and ids read from a tensor.
#pragma once

#include <vector>

#include "kernels/nn.h"

namespace octet::cpu {

// One row of LayerNorm or RMSNorm: y, and the row's mean (LayerNorm; may be null) and rsigma.
class NormRow {
 public:
  NormRow(ops::NormKind type, const float* gamma, const float* beta, float eps,
          ops::ZeroCenteredGamma zc, int64_t cols);
  void operator()(const float* x, float* y, float* mean, float* rsigma) const;

 private:
  ops::NormKind type_;
  float eps_;
  int64_t cols_;
  std::vector<float> scale_, bias_;
};

// i32/i64 host tensor of ids or targets as int64 values.
std::vector<int64_t> index_values(const Tensor& ids);

}  // namespace octet::cpu
