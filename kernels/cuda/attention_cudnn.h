// cuDNN's fused causal scaled-dot-product (flash) attention, built through the cuDNN 9 backend
// graph API. The caller (attention.cu) falls back to octet's own kernels when these return false.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace octet::cuda::cudnn {

// What octet does with cuDNN's fused attention, by cuDNN version (cudnnGetVersion(): 91000 is
// 9.10.0) and direction; kv_length is the key/value sequence length (T, self-attention).
enum class CudnnRule : uint8_t {
  kUse,
  kDeclineOldVersion,         // before 9.0: no fused flash attention through this graph
  kDeclineVersion,            // 9.10.0 and 9.10.1, which cudnn-frontend refuses for SDPA
  kDeclineBackwardKvLength1,  // 9.18 and later: backward with key/value length 1 unsupported
};
inline CudnnRule cudnn_rule(int64_t version, bool backward, int64_t kv_length) {
  if (version < 90000) return CudnnRule::kDeclineOldVersion;
  if (version >= 91000 && version <= 91001) return CudnnRule::kDeclineVersion;
  if (backward && kv_length == 1 && version >= 91800) return CudnnRule::kDeclineBackwardKvLength1;
  return CudnnRule::kUse;
}

// How often cuDNN's attention ran (and succeeded) in this process; tests check that it did.
struct AttentionRuns {
  int64_t forward = 0;
  int64_t backward = 0;
};
AttentionRuns attention_runs();

// cuDNN's fused causal SDPA; false (nothing written) when cuDNN cannot run this shape.
// qkv (B, T, (H + 2G) * D) f32 laid out (B, T, H + 2G, D): H query heads, G key and value heads
// (G divides H; G == H is (B, T, 3, H, D)); out (B, T, H*D) f32; lse (B, H, T) f32, the
// natural-log log-sum-exp of each scaled, causally masked score row.
bool attention_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale, Tensor& out,
                       Tensor& lse);
// dout (B, T, H*D) f32; dqkv like qkv, fully written on success.
bool attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t heads, int64_t kv_heads, float scale, Tensor& dqkv);

}  // namespace octet::cuda::cudnn
