// cuDNN's fused causal scaled-dot-product (flash) attention, built through the cuDNN 9 backend
// graph API. The caller (attention.cu) falls back to octet's own kernels when these return false.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace octet::cuda::cudnn {

// cuDNN's fused causal SDPA; false (nothing written) when cuDNN cannot run this shape.
// qkv (B, T, 3*H*D) f32 laid out (B, T, 3, H, D); out (B, T, H*D) f32; lse (B, H, T) f32, the
// natural-log log-sum-exp of each scaled, causally masked score row.
bool attention_forward(const Tensor& qkv, int64_t heads, float scale, Tensor& out, Tensor& lse);
// dout (B, T, H*D) f32; dqkv (B, T, 3*H*D) f32, fully written on success.
bool attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t heads, float scale, Tensor& dqkv);

}  // namespace octet::cuda::cudnn
