// CUDA implementations behind the CUDA backend table (cuda_backend.cpp; compiled only when nvcc
// is found, or in the CUDA emulation). The table's contract (kernels/backend.h): arguments are
// already validated by the ops layer, every tensor lives on the same CUDA device, and kernels run
// on that device's octet stream (runtime/cuda.h), in order with every other octet operation.
// Scalars that the CPU reads on the host (a scale, a scale_inv) stay on the device here: they
// are one-element f32 device tensors, read by the kernels, so no launch waits for the host.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/blockwise.h"
#include "kernels/nn.h"
#include "kernels/nvfp4.h"
#include "kernels/optim.h"
#include "kernels/quantizer.h"
#include "runtime/fp8_meta.h"
#include "runtime/tensor.h"

namespace octet::cuda {

using ops::detail::BinaryOp;

// ---- elementwise (elementwise.cu): f32/bf16/f16 in any mix, math in f32, RNE stores ----
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);  // b: a's shape or a row
void axpy(Tensor& dst, const Tensor& src, float alpha);                   // dst += alpha * src
void scale(const Tensor& x, float s, Tensor& out);
void fill(Tensor& dst, float value);           // any dtype but FP8 (u8/i32/i64 too)
void convert(const Tensor& src, Tensor& dst);  // f32/bf16/f16 <-> f32/bf16/f16
// dst (f32/bf16/f16) = value[0], read on the device (ops::fill_from_).
void fill_from(const Tensor& value, Tensor& dst);

// ---- reductions (reduce.cu): results into one-element f32 device tensors ----
void sum(const Tensor& x, Tensor& out);       // out (1,) = sum of x
void max(const Tensor& x, Tensor& out);       // out (1,) = max of x (numel > 0)
void amax(const Tensor& x, Tensor& out);      // out (1,) = max |x|, NaN ignored, 0 when empty
void sum_rows(const Tensor& x, Tensor& out);  // x (rows, cols) -> out (cols,), x's dtype
double sum_of_squares(const Tensor& x);       // f64 accumulation; waits for the result
// ops::sum_of_squares_part and ops::clip_grad_norm_from_parts_ on the device (f64 bits in the
// (1,) i64 total and norm): the sums, the norm, the factor and the scaling, with no wait.
void sum_of_squares_part(const std::vector<const Tensor*>& xs, Tensor& total);
void clip_grad_norm_from_parts(const std::vector<Tensor*>& grads, const Tensor& parts,
                               double max_norm, Tensor& norm);

// ---- FP8 per-tensor (cast.cu) ----
// q = fp8(x * scale[0]) (runtime/fp8.h rule, bit-equal to the CPU), row-wise and/or column-wise
// (the byte transpose) in one pass; max |x| max-accumulated into amax[0] (NaN ignored).
// `counts` (nullable, every cast below): what saturated and flushed, and the scale spread,
// counted on the device (runtime/fp8_stats.h, DeviceCastStats); no wait.
void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                  Tensor* amax, FP8CastCounts* counts = nullptr);
void transpose_2d(const Tensor& x, Tensor& out);                                // any element size
void dequantize_fp8(const Tensor& data, const Tensor& scale_inv, Tensor& out);  // f32/bf16 out

// ---- MXFP8 (mxfp8.cu): the layouts of kernels/cpu/mxfp8_cpu.h ----
void quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales,
                            FP8CastCounts* counts = nullptr);
void quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                               FP8CastCounts* counts = nullptr);
void dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out);

// ---- blockwise FP8 (blockwise.cu) and NVFP4 (nvfp4.cu): the layouts of
// runtime/blockwise_tensor.h and runtime/nvfp4_tensor.h, the CPU's bytes (kernels/cpu/
// block_formats_cpu.h); cast counts and the scale spread on the device, as above.
void quantize_blockwise(const Tensor& x, const ops::BlockwiseCast& cast, Tensor& data,
                        Tensor& scale_inv, FP8CastCounts* counts = nullptr);
void dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                          Tensor& out);
// out (M, N) = A·Bᵀ: cuBLASLt's native block-scaled FP8 GEMM where gemm_block_scaled takes it,
// else both operands expanded to f32 on the device and one f32 GEMM.
// OCTET_CUBLASLT_BLOCK_SCALING=0 forces the expansion.
void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                    const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks, Tensor& out,
                    const Tensor* bias, ops::Accumulate accumulate);
void transpose_scales(const Tensor& src, int64_t rows, int64_t cols, Tensor& dst);
// amax (1,) is written on the device and read there by the block cast.
void quantize_nvfp4(const Tensor& x, const ops::NVFP4Cast& cast, Tensor& data, Tensor& scales,
                    Tensor& amax, FP8CastCounts* counts = nullptr);
void expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax, float e4m3_max,
                  Tensor& out);
void hadamard16(const Tensor& x, bool inverse, Tensor& out);
// Quartet II's transform and MS-EDEN cast (kernels/math/quartet2.h; the CPU's bits).
void rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse, Tensor& out);
void quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                         Tensor& scales, Tensor& decode);
void transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows, int64_t cols,
                           Tensor& out_data, Tensor& out_scales);

// ---- GEMM (gemm.cu, cuBLASLt) ----
// out (M, N) = A·Bᵀ (+ bias) (+ out) through cuBLASLt's VEC128 / BLK128x128 scale modes (not
// both 2D), the scale_inv tensors read in place. false (nothing enqueued) where the device, the
// cuBLASLt version, the shape or the heuristic rule it out; decided and logged once per shape.
bool gemm_block_scaled(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                       const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                       Tensor& out, const Tensor* bias, ops::Accumulate accumulate);
// Blockwise GEMMs run so far (process-wide): natively, and through the f32 expansion.
struct BlockwiseGemmCounts {
  int64_t native = 0, fallback = 0;
};
BlockwiseGemmCounts blockwise_gemm_counts();
void note_blockwise_fallback();  // a fallback gemm_block_scaled was not asked about

// Which GEMM of a layer this is: the forward uses fast FP8 accumulation, dgrad and wgrad split
// accumulation (TE's defaults). kGeneric is treated like a gradient GEMM.
enum class GemmRole : uint8_t { kGeneric, kFprop, kDgrad, kWgrad };
// out (M, N) = epilogue(alpha * op(a) · op(b) * a_scale_inv[0] * b_scale_inv[0] [+ out] [+ bias]).
// Scale pointers are null for non-FP8 operands. An FP8 out (accumulate kNo) gets
// fp8(value * out_scale[0]), and max |value| max-accumulated into out_amax[0] when not null;
// out_scale is null for other outputs. kGelu needs accumulate kNo. alpha_scale (non-FP8 operands
// only; may be null): a one-element f32 on the device, alpha * alpha_scale[0] is the factor,
// read by the device (cuBLASLt's device pointer mode), not copied back.
void gemm(const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb, Tensor& out,
          float alpha, ops::Accumulate accumulate, const Tensor* bias, const Tensor* a_scale_inv,
          const Tensor* b_scale_inv, GemmRole role, ops::Epilogue epilogue, const Tensor* out_scale,
          Tensor* out_amax, const Tensor* alpha_scale = nullptr);
void release_workspace();

// What gemm settled on for each shape it has planned (on the shape's first call; later calls
// reuse it). fp8_native: FP8 operands on FP8 tensor cores; fp8_via_bf16: FP8 operands that fell
// back to exact bf16 copies (logged as a warning). For tests and tools/gpu-check.
struct GemmChoice {
  int device;
  int64_t m, n, k;
  DType a, b, out;
  bool fp8_native;
  bool fp8_via_bf16;
};
std::vector<GemmChoice> gemm_choices();

// ---- nn (activation.cu, softmax.cu, norm.cu, embedding.cu, dropout.cu, loss.cu) ----
// Floating inputs are f32, outputs are allocated f32 tensors, as in kernels/cpu/nn_cpu.h.
void activation(ops::Activation act, const Tensor& x, Tensor& y);
void activation_backward(ops::Activation act, const Tensor& dy, const Tensor& x, Tensor& dx);
void gated_activation(ops::Activation act, const Tensor& x, Tensor& y);
void gated_activation_backward(ops::Activation act, const Tensor& dy, const Tensor& x, Tensor& dx);
void softmax(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

// gamma (C,) f32, beta (C,) f32 or null; mean (rows,) is null for rmsnorm; rsigma (rows,).
void norm_forward(ops::NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                  float eps, ops::ZeroCenteredGamma zc, Tensor& y, Tensor* mean, Tensor& rsigma);
// The norm fused with the per-tensor FP8 cast of its output: no high-precision y is written.
void norm_quantize_fp8(ops::NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                       float eps, ops::ZeroCenteredGamma zc, const Tensor& scale, Tensor* rowwise,
                       Tensor* columnwise, Tensor* amax, Tensor* mean, Tensor& rsigma,
                       FP8CastCounts* counts = nullptr);
// The block scales of a block-scaled cast into its spread (BlockScaleSpread's rule), on the
// device: f32 scale_inv (blockwise; the layout's zero padding is skipped), E8M0 exponents
// (MXFP8), or NVFP4's E4M3 factors times amax / (6 * nvfp4_e4m3_max) over rows [0, rows) in
// steps of row_step, `blocks` per row, `stride` apart.
enum class SpreadScales : uint8_t { kF32, kE8M0, kNVFP4 };
void add_block_scale_spread(const Tensor& scales, SpreadScales kind, int64_t rows, int64_t row_step,
                            int64_t blocks, int64_t stride, const Tensor* amax,
                            FP8CastCounts* counts, float nvfp4_e4m3_max = 448.f);
// mean null for rmsnorm; dbeta null when not wanted.
void norm_backward(const Tensor& dy, const Tensor& x, const Tensor* mean, const Tensor& rsigma,
                   const Tensor& gamma, ops::ZeroCenteredGamma zc, Tensor& dx, Tensor& dgamma,
                   Tensor* dbeta);

// ids: i32/i64 device tensor, already checked to lie in range. table f32/bf16/f16.
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable);  // dtable zeroed here

// The CPU's Philox stream: element i keeps when draw (offset + i) of `seed` is >= p (24-bit).
void dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y, Tensor& mask);
void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

// Causal attention on packed qkv (B, T, 3, H, D): cuDNN's fused attention where it supports the
// shape, else octet's own kernels (attention.cu). out (B, T, H*D), lse (B, H, T).
void causal_attention(const Tensor& qkv, int64_t heads, float scale, Tensor& out, Tensor& lse);
void causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                               const Tensor& lse, int64_t heads, float scale, Tensor& dqkv);
// The own kernels alone (the fallback, and the reference the cuDNN path is tested against).
void causal_attention_fallback(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                               Tensor& lse);
void causal_attention_backward_fallback(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                        const Tensor& lse, int64_t heads, float scale,
                                        Tensor& dqkv);
// Grouped-query attention on qkv (B, T, H + 2G, D) through cuDNN; false (nothing written) when
// cuDNN does not take it. The backward runs only after a forward that did.
bool grouped_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale, Tensor& out,
                       Tensor& lse);
bool grouped_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                const Tensor& lse, int64_t heads, int64_t kv_heads, float scale,
                                Tensor& dqkv);
// qkv (B, T, H + 2G, D) <-> packed (B, T, H + 2K, D), K = H or G (kernels/nn.h pack_heads,
// rope_heads; rope.cu).
void pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                Tensor& packed);
void pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads, const Tensor& rope,
                         Tensor& dqkv);
// packed (N, T, (H + 2G) * D) and f32 caches (N, max_len, G, D) (kernels/nn.h cached_attention;
// cached_attention.cu).
void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache, int64_t pos);
void cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                      int64_t pos, float scale, Tensor& out);
// True when the last causal_attention call on this thread ran on cuDNN (for tests and bench).
bool last_attention_used_cudnn();

// targets: i32/i64 device tensor, checked on the device (deferred). loss (1,) f32 = mean over
// the counted rows (0 if none); lse (N,) f32; counted (1,) i64 = rows whose target is not
// ignore_index. The backward's dloss (1,) f32 and counted stay on the device.
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& loss,
                   Tensor& lse, Tensor& counted);
void cross_entropy_backward(const Tensor& dloss, const Tensor& counted, const Tensor& logits,
                            const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                            Tensor& dlogits);

// ---- optimizers (optim.cu) ----
using ops::AdamWTensors;
// Every tensor of the list in one launch (a multi-tensor kernel).
// A DeviceStep's gate and count are read by the kernels: nothing waits for them.
void adamw_step(const std::vector<AdamWTensors>& tensors, const ops::AdamWHyper& h);
void sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
              float weight_decay, int64_t step, const ops::DeviceStep& device_step);
void advance_steps(const Tensor& gate, Tensor& steps);
void finite_gate(const Tensor& values, const Tensor* f64_bits, Tensor& gate);

// ---- delayed scaling (fp8_meta.cu) ----
// update_fp8_slot's rule (runtime/fp8_meta.h) for every slot of the list, in one launch; the
// versions are the caller's to bump.
using ops::detail::SlotUpdate;
void update_fp8_slots(const std::vector<SlotUpdate>& slots);
// Current scaling, CurrentScalingQuantizer::scale_for's rule on the device: amax 0 or not finite
// gives 1; else fp8_max / max(amax, amax_epsilon), an infinite result FLT_MAX, rounded down to a
// power of two under Power2Scale::kOn. scale[0] gets it and scale_inv[0] = 1 / scale[0].
void current_scale(const Tensor& amax, float fp8_max, float amax_epsilon, Power2Scale power_2,
                   Tensor& scale, Tensor& scale_inv);
// out[0] = 1 / x[0] (a delayed slot's scale_inv for a new FP8 tensor).
void reciprocal(const Tensor& x, Tensor& out);

}  // namespace octet::cuda
