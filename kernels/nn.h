// Forward and backward operations of the neural-network layers (activations, softmax, norms,
// embedding, dropout, causal attention, cross-entropy) that the autograd functions call.
// Included by kernels/ops.h. Activations keep their dtype, as in PyTorch and TransformerEngine: an
// op's activation outputs and input gradients (y, dx, out, dqkv, dlogits; the embedding's rows)
// have the dtype of the input they come from (x, y, qkv, logits, the table: f32, bf16 or f16),
// computed in f32 and rounded to it once. Statistics (mean, rsigma, lse), the loss and the
// parameter gradients (dgamma, dbeta, dtable) are f32; the autograd engine rounds a parameter's
// gradient to its dtype.
#pragma once

#include <cstdint>

#include "runtime/fp8.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace octet::ops {

// ---- activations ----
enum class Activation : uint8_t {
  kGelu,         // tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kRelu,         // max(x, 0)
  kSquaredRelu,  // max(x, 0)^2
  kSilu,         // x * sigmoid(x)
};
const char* activation_name(Activation act);  // "gelu", "relu", "srelu", "silu"

Tensor activation(Activation act, const Tensor& x);
Tensor activation_backward(Activation act, const Tensor& dy, const Tensor& x);  // dy * f'(x)
// Gated forms (TE's geglu / reglu / sreglu / swiglu): x (..., 2n) splits along the last dim into
// [a | g]; y (..., n) = act(a) * g. Backward gives dx (..., 2n) = [dy * g * act'(a) | dy * act(a)].
Tensor gated_activation(Activation act, const Tensor& x);
Tensor gated_activation_backward(Activation act, const Tensor& dy, const Tensor& x);

// ---- softmax over the last dimension ----
Tensor softmax(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);  // y = softmax(x)

// ---- LayerNorm / RMSNorm over the last dimension (C) ----
enum class ZeroCenteredGamma : uint8_t { kNo, kYes };  // kYes: the scale is (1 + gamma)

struct NormForward {
  Tensor y;       // x's shape
  Tensor mean;    // (rows,) f32; undefined for rmsnorm
  Tensor rsigma;  // (rows,) f32: 1 / sqrt(var + eps), or 1 / sqrt(mean(x^2) + eps) for rmsnorm
};
// gamma and beta are (C,); beta may be null (no shift).
NormForward layernorm(const Tensor& x, const Tensor& gamma, const Tensor* beta, float eps,
                      ZeroCenteredGamma zc);
NormForward rmsnorm(const Tensor& x, const Tensor& gamma, float eps, ZeroCenteredGamma zc);

// The norm fused with the per-tensor FP8 cast of its output (delayed scaling), in one pass: rows
// are normalized one at a time into a one-row buffer and cast from it, so no high-precision output
// is made. q = fp8(y * scale) row-wise (x's shape) and/or column-wise ((C, rows)); max |y| is
// max-accumulated into amax[0], y being the f32 normalization: the FP8 values equal quantize_fp8
// of the layernorm of x's values in f32 bit for bit. (For an f32 x that is layernorm's y; a bf16
// or f16 layernorm rounds its y to x's dtype, which this fused cast does not, as TE's fused
// norm + cast kernel does not.)
// Returns mean (LayerNorm) and rsigma; y is undefined. `counts` (nullable) gets the cast's
// saturated / flushed / total counts added, as quantize_fp8's does.
enum class NormKind : uint8_t { kLayerNorm, kRMSNorm };
NormForward norm_fp8(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                     float eps, ZeroCenteredGamma zc, const Tensor& scale, Tensor* rowwise,
                     Tensor* columnwise, Tensor* amax, FP8CastCounts* counts = nullptr);

struct NormBackward {
  Tensor dx;      // x's shape
  Tensor dgamma;  // (C,)
  Tensor dbeta;   // (C,) for layernorm; undefined for rmsnorm
};
NormBackward layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                const Tensor& rsigma, const Tensor& gamma, ZeroCenteredGamma zc);
NormBackward rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& rsigma,
                              const Tensor& gamma, ZeroCenteredGamma zc);

// ---- embedding ----
// table (V, C), ids i32/i64 of any shape -> (ids..., C). An id outside [0, V) is an error naming
// the id, its position and V.
Tensor embedding(const Tensor& table, const Tensor& ids);
// dtable (V, C): the rows of dy (ids..., C) summed per id, in position order (deterministic).
Tensor embedding_backward(const Tensor& dy, const Tensor& ids, int64_t num_embeddings);

// ---- dropout ----
struct DropoutForward {
  Tensor y;     // x * mask / (1 - p)
  Tensor mask;  // u8, x's shape: 1 = kept
};
// Element i keeps when draw (gen.offset + i) of gen's Philox stream is >= p as a 24-bit uniform,
// so the mask is the same for any thread count; gen advances by numel draws. p in [0, 1].
DropoutForward dropout(const Tensor& x, float p, Generator& gen);
Tensor dropout_backward(const Tensor& dy, const Tensor& mask, float p);

// ---- causal multi-head self-attention on packed QKV (llm.c layout) ----
struct AttentionForward {
  Tensor out;  // (B, T, H*D)
  Tensor lse;  // (B, H, T) f32: log-sum-exp of each scaled, masked score row
};
// qkv (B, T, 3*H*D) laid out as (B, T, 3, H, D); scale is usually 1/sqrt(D).
AttentionForward causal_attention(const Tensor& qkv, int64_t heads, float scale);
// dqkv (B, T, 3*H*D), from the forward's out and lse (the probabilities are recomputed).
Tensor causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, float scale);
// Grouped-query attention: qkv (B, T, (H + 2G) * D) laid out as (B, T, H + 2G, D), G dividing H;
// query head h reads key and value head h / (H/G). The backend's fused grouped attention where
// it has one (cuDNN's); otherwise the key and value heads are repeated (pack_heads without a
// table) for the H-head kernels, and the gradient summed back. G == H is the call above.
AttentionForward causal_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale);
Tensor causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, int64_t kv_heads, float scale);

// ---- rotary positions and grouped-query heads, packed for causal_attention ----
// qkv (B, T, (H + 2G) * D) laid out as (B, T, H + 2G, D): H query heads, then G key heads, then
// G value heads (G divides H). Returns (B, T, 3 * H * D) as causal_attention's (B, T, 3, H, D):
// query and key heads rotated by their position t (math/rope.h, with row t of `rope`), and key
// and value head g repeated for query heads g * H/G .. (g + 1) * H/G - 1 (Hugging Face's
// repeat_kv). rope: (max_len >= T, D) f32 on qkv's device, each row D/2 cosines then D/2 sines
// (rope_table); undefined: no rotation.
Tensor pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope);
// dqkv (B, T, (H + 2G) * D) from dpacked (B, T, 3 * H * D): each repeated head's gradients summed
// in head order, then rotated back.
Tensor pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                           const Tensor& rope);
// pack_heads without the repetition: (B, T, (H + 2G) * D) in and out, query and key heads
// rotated, value heads copied (the grouped-query causal_attention's input); and its gradient.
Tensor rope_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope);
Tensor rope_heads_backward(const Tensor& dqkv, int64_t heads, int64_t kv_heads, const Tensor& rope);
// The table pack_heads reads, on the CPU: for position t and frequency i < D/2,
// inv_freq = f32(1 / theta^(2i / D)), angle = f32(t) * inv_freq in f32, and the cosine and sine
// of that angle rounded to f32 (Hugging Face computes them in f32 the same way).
Tensor rope_table(int64_t max_len, int64_t head_dim, double theta);

// ---- attention over a key/value cache (generation) ----
// k_cache, v_cache: (N, max_len, G, D) f32, on packed's device, G key/value heads. packed is
// (N, T, (H + 2G) * D), H query heads (a multiple of G) then G key heads then G value heads
// (causal_attention's grouped layout; G = H is (N, T, 3, H, D)). kv_cache_write copies its keys
// and values into cache rows [pos, pos + T). cached_attention gives (N, T, H * D) in packed's
// dtype: query row t (position pos + t) of head h attends to cache rows 0 .. pos + t of key/value
// head h / (H / G), which must have been written.
void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache, int64_t pos);
Tensor cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                        int64_t pos, float scale);

// ---- cross-entropy over logits (N, V) and targets (N,) i32/i64 ----
// A target outside [0, V) that is not ignore_index is an error naming it and its row: at once on
// the CPU; on CUDA the kernels find it and the host raises it at its next read from the device
// (runtime/cuda.h, check_device_errors), so a training step copies no targets back.
struct CrossEntropyForward {
  Tensor loss;     // (1,) f32: mean over the counted rows; 0 when no row counts
  Tensor lse;      // (N,) f32: log-sum-exp of every logit row
  Tensor counted;  // (1,) i64, on the logits' device: rows whose target != ignore_index
};
CrossEntropyForward cross_entropy(const Tensor& logits, const Tensor& targets,
                                  int64_t ignore_index);
// dlogits (N, V) = dloss * (softmax - onehot) / count; 0 on ignored rows (and everywhere when
// count is 0). dloss (1,) floating and counted (forward's) on the logits' device: nothing is
// read back.
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, int64_t ignore_index, const Tensor& counted);
// The same from host values (tests, callers with a known count).
Tensor cross_entropy_backward(float dloss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, int64_t ignore_index, int64_t count);

}  // namespace octet::ops
