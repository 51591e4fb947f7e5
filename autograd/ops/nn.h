// Differentiable neural-network operations: activations (plain and gated), softmax, LayerNorm and
// RMSNorm, embedding lookup, dropout, causal self-attention on packed QKV, cross-entropy.
#pragma once

#include <cstdint>

#include "kernels/nn.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace octet::autograd {

using ops::Activation;
using ops::ZeroCenteredGamma;

Tensor gelu(const Tensor& x);  // tanh form
Tensor relu(const Tensor& x);
Tensor squared_relu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor activation(Activation act, const Tensor& x);
// x (..., 2n) = [a | g] -> act(a) * g (swiglu = kSilu, geglu = kGelu, reglu = kRelu).
Tensor gated_activation(Activation act, const Tensor& x);

Tensor softmax(const Tensor& x);  // over the last dimension

// gamma, beta (C,); beta may be undefined. zero_centered_gamma: the scale is (1 + gamma).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                  ZeroCenteredGamma zc = ZeroCenteredGamma::kNo);
Tensor rms_norm(const Tensor& x, const Tensor& gamma, float eps,
                ZeroCenteredGamma zc = ZeroCenteredGamma::kNo);

// table (V, C), ids (i32/i64, any shape) -> (ids..., C); gradient flows to the table.
Tensor embedding(const Tensor& table, const Tensor& ids);

// Inverted dropout with a mask drawn from `gen` (seeded, thread-count independent); p = 0 or
// gradients disabled in inference mode return x unchanged.
Tensor dropout(const Tensor& x, float p, Generator& gen);

// qkv (B, T, 3*H*D) as (B, T, 3, H, D) -> (B, T, H*D); scale usually 1/sqrt(D).
Tensor causal_attention(const Tensor& qkv, int64_t heads, float scale);
// Grouped-query: qkv (B, T, (H + 2G) * D) as (B, T, H + 2G, D) (kernels/nn.h causal_attention).
Tensor causal_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale);

// qkv (B, T, (H + 2G) * D) -> (B, T, 3 * H * D) for causal_attention: query and key heads rotated
// by their positions (rope: the (max_len, D) f32 table of ops::rope_table, or undefined for none),
// key and value heads repeated for their H/G query heads (kernels/nn.h pack_heads).
Tensor pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope);
// The same without the repetition: (B, T, (H + 2G) * D) in and out (kernels/nn.h rope_heads).
Tensor rope_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope);

// Mean cross-entropy over rows of logits (N, V) whose target (i32/i64, (N,)) != ignore_index.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

}  // namespace octet::autograd
