// CPU implementations behind the nn ops of the CPU backend table (cpu_backend.cpp). Arguments are
// validated by kernels/nn.cpp, floating inputs are already f32 (except the embedding table,
// converted row by row), and outputs are allocated f32 tensors (u8 for the dropout mask).
#pragma once

#include <vector>

#include "kernels/nn.h"

namespace octet::cpu {

void activation(ops::Activation act, const Tensor& x, Tensor& y);
void activation_backward(ops::Activation act, const Tensor& dy, const Tensor& x, Tensor& dx);
void gated_activation(ops::Activation act, const Tensor& x, Tensor& y);
void gated_activation_backward(ops::Activation act, const Tensor& dy, const Tensor& x, Tensor& dx);

void softmax(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

// One row of LayerNorm (layer = true) or RMSNorm: y, and the row's mean (LayerNorm; may be null)
// and rsigma. Shared by the norm kernels and the norm fused with the FP8 cast, so both give the
// same y bit for bit.

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

// The norm of every row of x (rows, C) cast to FP8 in the same pass: each row is normalized into
// a one-row buffer and cast from there (row-wise and/or column-wise, amax of the norm
// output max-accumulated into *amax), so no high-precision output exists. mean may be null;
// counts (nullable) gets the cast's saturated / flushed / total counts added.
void norm_quantize_fp8(const Tensor& x, const NormRow& norm, float scale, Tensor* rowwise,
                       Tensor* columnwise, float* amax, float* mean, float* rsigma,
                       FP8CastCounts* counts);

// gamma, beta: (C,) f32; beta may be null. mean is null for rmsnorm.
void layernorm(const Tensor& x, const float* gamma, const float* beta, float eps,
               ops::ZeroCenteredGamma zc, Tensor& y, float* mean, float* rsigma);
void rmsnorm(const Tensor& x, const float* gamma, float eps, ops::ZeroCenteredGamma zc, Tensor& y,
             float* rsigma);
// mean is null for rmsnorm; so is dbeta when no beta gradient is wanted.
void norm_backward(const Tensor& dy, const Tensor& x, const float* mean, const float* rsigma,
                   const float* gamma, ops::ZeroCenteredGamma zc, Tensor& dx, float* dgamma,
                   float* dbeta);

// i32/i64 host tensor of ids or targets as int64 values.
std::vector<int64_t> index_values(const Tensor& ids);
// ids: validated, one per output row.
void embedding(const Tensor& table, const std::vector<int64_t>& ids, Tensor& out);
void embedding_backward(const Tensor& dy, const std::vector<int64_t>& ids, Tensor& dtable);

// Draws [offset, offset + numel) of the stream of `seed`.
void dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y, Tensor& mask);
void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

void causal_attention(const Tensor& qkv, int64_t heads, float scale, Tensor& out, Tensor& lse);
// dqkv arrives uninitialised; every element is written.
void causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                               const Tensor& lse, int64_t heads, float scale, Tensor& dqkv);
// qkv (B, T, H + 2G, D) <-> packed (B, T, 3, H, D), f32 (kernels/nn.h pack_heads).
void pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                Tensor& packed);
void pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads, const Tensor& rope,
                         Tensor& dqkv);

// packed (N, T, 3, H, D) and f32 caches (N, max_len, H, D) (kernels/nn.h cached_attention).
void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache, int64_t pos);
void cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                      int64_t pos, float scale, Tensor& out);

// Returns the sum of the counted rows' losses (f64, summed in row order); fills lse (N,).
double cross_entropy(const Tensor& logits, const std::vector<int64_t>& targets,
                     int64_t ignore_index, float* lse);
void cross_entropy_backward(float grad_per_row, const Tensor& logits,
                            const std::vector<int64_t>& targets, const float* lse,
                            int64_t ignore_index, Tensor& dlogits);

}  // namespace octet::cpu
