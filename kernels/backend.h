// The backend interface: one table of operations per backend (kernels/cpu/cpu_backend.cpp,
// kernels/cuda/cuda_backend.cpp), with the same signatures on every backend, behind the ops
// layer's argument checks (ops.cpp, nn.cpp, optim.cpp, quantized.cpp, quantizer.cpp). An op a
// backend lacks throws "not supported on <backend>: <op>"; it never falls through to another.
// Internal to kernels/: callers use kernels/ops.h. Device choice: kernels/device_policy.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/nn.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "kernels/quantizer.h"
#include "runtime/device.h"
#include "runtime/fp8.h"
#include "runtime/fp8_meta.h"
#include "runtime/tensor.h"

namespace octet::ops::detail {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv };

// One slot of a batched delayed-scaling update: update_fp8_slot's rule (runtime/fp8_meta.h).
struct SlotUpdate {
  FP8Slot* slot;
  float fp8_max;
  int margin;
  AmaxComputeAlgo algo;
};

// The contract of every method: arguments were validated by the ops layer, every tensor lives on
// the backend's device (made current by the caller), outputs are allocated by the caller with
// their final shape and dtype. Scalars that live with the data (a scale, a scale_inv, an amax, a
// reduction result, a loss) are one-element f32 tensors on that device, so a GPU never waits
// for the host; token ids and targets are i32/i64 tensors there. A backend reads a scalar on the
// host only when its data is on the host. Stateless: the tables are shared by every thread.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda": the word in "not supported on ..."

  // ---- elementwise: f32/bf16/f16 in any mix, math in f32, RNE stores ----
  // out = a (op) b; b has a's shape or is a row of a's last dimension.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) const;
  virtual void axpy(Tensor& dst, const Tensor& src, float alpha) const;  // dst += alpha * src
  virtual void scale(const Tensor& x, float s, Tensor& out) const;       // out may be x
  virtual void fill(Tensor& dst, float value) const;                     // any dtype but FP8
  virtual void fill_from(const Tensor& value, Tensor& dst) const;        // ops::fill_from_
  virtual void convert(const Tensor& src, Tensor& dst) const;            // f32/bf16/f16 both ways

  // ---- reductions into out (1,) f32 ----
  virtual void sum(const Tensor& x, Tensor& out) const;
  // Each backend keeps its own rounding of sum / n (the CPU divides in f64, CUDA scales in f32).
  virtual void mean(const Tensor& x, Tensor& out) const;
  virtual void max(const Tensor& x, Tensor& out) const;       // numel > 0
  virtual void amax(const Tensor& x, Tensor& out) const;      // max |x|, NaN ignored, 0 when empty
  virtual void sum_rows(const Tensor& x, Tensor& out) const;  // (rows, cols) -> (cols,), x's dtype
  // f64 accumulation. The one reduction returned to the host: gradient clipping needs the value
  // there, and f64 has no tensor dtype.
  virtual double sum_of_squares(const Tensor& x) const;

  // ---- per-tensor FP8 ----
  // q = fp8(x * scale[0]) row-wise and/or column-wise (the byte transpose) in one pass; max |x|
  // max-accumulated into amax[0] (nullable). counts (host memory, nullable) is a CPU diagnostic:
  // a device backend leaves it untouched.
  virtual void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise,
                            Tensor* columnwise, Tensor* amax, FP8CastCounts* counts) const;
  virtual void transpose_2d(const Tensor& x, Tensor& out) const;  // any element size
  virtual void dequantize_fp8(const Tensor& data, const Tensor& scale_inv, Tensor& out) const;

  // ---- MXFP8 (layouts of kernels/cpu/mxfp8_cpu.h); counts as in quantize_fp8 ----
  virtual void quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales,
                                      FP8CastCounts* counts) const;
  virtual void quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                                         FP8CastCounts* counts) const;
  virtual void dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out) const;

  // ---- blockwise FP8 and NVFP4 (kernels/blockwise.h, kernels/nvfp4.h) ----
  // counts as in quantize_fp8; the layouts are the formats' (runtime/blockwise_tensor.h,
  // runtime/nvfp4_tensor.h).
  virtual void quantize_blockwise(const Tensor& x, const BlockwiseCast& cast, Tensor& data,
                                  Tensor& scale_inv, FP8CastCounts* counts) const;
  virtual void dequantize_blockwise(const Tensor& data, const Tensor& scale_inv,
                                    BlockScaling blocks, Tensor& out) const;
  virtual void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                              const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                              Tensor& out, const Tensor* bias, Accumulate accumulate) const;
  // dst[c][r] = src[r][c] for r < rows, c < cols of a 2-D scale tensor; the rest of dst zeroed.
  virtual void transpose_scales(const Tensor& src, int64_t rows, int64_t cols, Tensor& dst) const;
  virtual void quantize_nvfp4(const Tensor& x, const NVFP4Cast& cast, Tensor& data, Tensor& scales,
                              Tensor& amax, FP8CastCounts* counts) const;
  // amax null: e2m1 * block scale; else TE's dequantization with that tensor amax (the tensor
  // scale amax / (6 * e4m3_max)).
  virtual void expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax,
                            float e4m3_max, Tensor& out) const;
  virtual void hadamard16(const Tensor& x, bool inverse, Tensor& out) const;
  // Quartet II (kernels/nvfp4.h rht128, quantize_nvfp4_eden).
  virtual void rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse,
                      Tensor& out) const;
  virtual void quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                                   Tensor& scales, Tensor& decode) const;
  // 16x16-tiled data stored (rows, cols) -> its transpose (cols, rows): nibbles transposed, each
  // tile's scale moved with it.
  virtual void transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows,
                                     int64_t cols, Tensor& out_data, Tensor& out_scales) const;

  // ---- GEMM: out = epilogue(alpha * op(a) · op(b) * a_scale_inv * b_scale_inv [+ out] [+ bias])
  // `options` as the ops layer normalized it: a_scale_inv / b_scale_inv null for non-FP8
  // operands, out_scale set exactly for an FP8 out.
  virtual void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& out,
                    const GemmOptions& options) const;
  virtual void release_workspace() const;  // the GEMM's cached workspace

  // ---- nn: activations (x, y, dy, dx, qkv, out, dout, dqkv, logits, dlogits) f32, or also
  // bf16 and f16 where takes_16bit_activations(), each operand its own dtype, math in f32 and RNE
  // stores; parameters (gamma, beta), statistics (mean, rsigma, lse), the loss and dgamma / dbeta
  // / dtable f32; the embedding table f32/bf16/f16; u8 for the dropout mask. The ops layer
  // (nn.cpp) gives a backend without 16-bit activations f32 copies and converts its f32 results.
  virtual bool takes_16bit_activations() const { return false; }
  virtual void activation(Activation act, const Tensor& x, Tensor& y) const;
  virtual void activation_backward(Activation act, const Tensor& dy, const Tensor& x,
                                   Tensor& dx) const;
  virtual void gated_activation(Activation act, const Tensor& x, Tensor& y) const;
  virtual void gated_activation_backward(Activation act, const Tensor& dy, const Tensor& x,
                                         Tensor& dx) const;
  virtual void softmax(const Tensor& x, Tensor& y) const;
  virtual void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const;

  // gamma (C,), beta (C,) or null; mean (rows,) null for rmsnorm; rsigma (rows,).
  virtual void norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                            float eps, ZeroCenteredGamma zc, Tensor& y, Tensor* mean,
                            Tensor& rsigma) const;
  // The norm fused with the per-tensor FP8 cast of its output (no high-precision y); counts as
  // in quantize_fp8.
  virtual void norm_quantize_fp8(NormKind kind, const Tensor& x, const Tensor& gamma,
                                 const Tensor* beta, float eps, ZeroCenteredGamma zc,
                                 const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                                 Tensor* amax, Tensor* mean, Tensor& rsigma,
                                 FP8CastCounts* counts) const;
  // mean null for rmsnorm; dbeta null when not wanted.
  virtual void norm_backward(const Tensor& dy, const Tensor& x, const Tensor* mean,
                             const Tensor& rsigma, const Tensor& gamma, ZeroCenteredGamma zc,
                             Tensor& dx, Tensor& dgamma, Tensor* dbeta) const;

  // ids: i32/i64, checked to lie in range; one per output row. table f32/bf16/f16.
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor& out) const;
  virtual void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable) const;

  // Element i keeps when draw (offset + i) of `seed`'s Philox stream is >= p (24-bit).
  virtual void dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y,
                       Tensor& mask) const;
  virtual void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) const;

  // qkv (B, T, 3, H, D) -> out (B, T, H*D), lse (B, H, T).
  virtual void causal_attention(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                                Tensor& lse) const;
  virtual void causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                         const Tensor& lse, int64_t heads, float scale,
                                         Tensor& dqkv) const;

  // Fused grouped-query attention: qkv (B, T, H + 2G, D), G < H dividing H; out and lse as
  // causal_attention's. False, with nothing written, where the backend has none for the shape
  // (kernels/nn.h then repeats the key/value heads for causal_attention). The backward only
  // follows a forward that returned true for the same shape.
  virtual bool grouped_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale,
                                 Tensor& out, Tensor& lse) const;
  virtual bool grouped_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                          const Tensor& lse, int64_t heads, int64_t kv_heads,
                                          float scale, Tensor& dqkv) const;

  // qkv (B, T, H + 2G, D) -> packed (B, T, H + 2K, D) and back, K (packed's width) H or G
  // (kernels/nn.h pack_heads, rope_heads); rope (max_len, D) f32 or undefined.
  virtual void pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                          Tensor& packed) const;
  virtual void pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                                   const Tensor& rope, Tensor& dqkv) const;

  // packed (N, T, (H + 2G) * D) and f32 caches (N, max_len, G, D) (kernels/nn.h kv_cache_write,
  // cached_attention).
  virtual void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache,
                              int64_t pos) const;
  virtual void cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                                int64_t pos, float scale, Tensor& out) const;

  // targets: i32/i64, checked (on a GPU by the kernels, raised later: runtime/cuda.h). loss (1,)
  // = mean over the counted rows (0 if none); lse (N,); counted (1,) i64 = the rows whose target
  // is not ignore_index. The backward takes dloss (1,) f32 and counted where they live, and
  // scales by dloss / counted (f64 divide, rounded to f32; 0 when nothing counts).
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             Tensor& loss, Tensor& lse, Tensor& counted) const;
  virtual void cross_entropy_backward(const Tensor& dloss, const Tensor& counted,
                                      const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, int64_t ignore_index,
                                      Tensor& dlogits) const;

  // ---- optimizers (kernels/optim.h's rules) ----
  virtual void adamw_step(const std::vector<AdamWTensors>& tensors, const AdamWHyper& h) const;
  // ops::sum_of_squares_part's and ops::clip_grad_norm_from_parts_'s rules; total and norm
  // (1,) i64 receive the f64s' bits.
  virtual void sum_of_squares_part(const std::vector<const Tensor*>& xs, Tensor& total) const;
  virtual void clip_grad_norm_from_parts(const std::vector<Tensor*>& grads, const Tensor& parts,
                                         double max_norm, Tensor& norm) const;
  // buf may be undefined when momentum is 0.
  virtual void sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
                        float weight_decay, int64_t step, const DeviceStep& device_step) const;
  virtual void advance_steps(const Tensor& gate, Tensor& steps) const;
  virtual void finite_gate(const Tensor& values, const Tensor* f64_bits, Tensor& gate) const;

  // ---- scaling state ----
  // update_fp8_slot's rule for every slot of the list (one launch on a GPU), versions bumped.
  virtual void update_fp8_slots(const std::vector<SlotUpdate>& slots) const;
  // CurrentScalingQuantizer::scale_for's rule (runtime/fp8_scaling.h) into scale[0], and
  // scale_inv[0] = 1 / scale[0].
  virtual void current_scale(const Tensor& amax, float fp8_max, float amax_epsilon,
                             Power2Scale power_2, Tensor& scale, Tensor& scale_inv) const;
  virtual void reciprocal(const Tensor& x, Tensor& out) const;  // out[0] = 1 / x[0]

 protected:
  [[noreturn]] void unsupported(const char* op) const;  // "not supported on <name()>: <op>"
};

// The tables. cuda_backend() exists only in builds with the CUDA backend (or its emulation).
const Backend& cpu_backend();
const Backend& cuda_backend();

// The table of `device`'s backend; a CUDA device in a build without CUDA is an error that says
// so. Does not make the device current (kernels/device_policy.h's on_device does).
const Backend& backend_for(Device device);

}  // namespace octet::ops::detail
