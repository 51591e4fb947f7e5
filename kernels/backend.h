// The backend interface: the list of operations every backend defines (kernels/cpu/cpu_backend.h,
// kernels/cuda/cuda_backend.h), with the same signatures on every backend, behind the ops
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
#include "kernels/rowwise.h"
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

// The contract of every op: arguments were validated by the ops layer, every tensor lives on the
// backend's device (made current by the caller), outputs are allocated by the caller with their
// final shape and dtype. Scalars that live with the data (a scale, a scale_inv, an amax, a
// reduction result, a loss) are one-element f32 tensors on that device, so a GPU never waits
// for the host; token ids and targets are i32/i64 tensors there. A backend reads a scalar on the
// host only when its data is on the host. Stateless: the tables are shared by every thread.
//
// Every op is declared once, in this list: X(return type, name, parameters). The interface
// (Backend) and each backend's class (OCTET_BACKEND_OVERRIDES) are made from it, and each backend
// defines an op in the file of its kernel (kernels/cpu/*.cpp, kernels/cuda/*.cu).
// clang-format off
#define OCTET_BACKEND_OPS(X)                                                                      \
  /* ---- elementwise: f32/bf16/f16 in any mix, math in f32, RNE stores ---- */                   \
  /* out = a (op) b; b has a's shape or is a row of a's last dimension. */                        \
  X(void, binary, (ops::detail::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out))      \
  X(void, axpy, (Tensor& dst, const Tensor& src, float alpha)) /* dst += alpha * src */           \
  X(void, scale, (const Tensor& x, float s, Tensor& out))      /* out may be x */                 \
  X(void, fill, (Tensor& dst, float value))                    /* any dtype but FP8 */            \
  X(void, fill_from, (const Tensor& value, Tensor& dst))       /* ops::fill_from_ */              \
  X(void, convert, (const Tensor& src, Tensor& dst))           /* f32/bf16/f16 both ways */       \
  /* ---- reductions into out (1,) f32 ---- */                                                    \
  X(void, sum, (const Tensor& x, Tensor& out))                                                    \
  /* Each backend keeps its own rounding of sum / n (the CPU divides in f64, CUDA scales in   */  \
  /* f32). */                                                                                     \
  X(void, mean, (const Tensor& x, Tensor& out))                                                   \
  X(void, max, (const Tensor& x, Tensor& out))      /* numel > 0 */                               \
  X(void, amax, (const Tensor& x, Tensor& out))     /* max |x|, NaN ignored, 0 when empty */      \
  X(void, sum_rows, (const Tensor& x, Tensor& out)) /* (rows, cols) -> (cols,), x's dtype */      \
  /* f64 accumulation. The one reduction returned to the host: gradient clipping needs the    */  \
  /* value there, and f64 has no tensor dtype. */                                                 \
  X(double, sum_of_squares, (const Tensor& x))                                                    \
  /* ---- per-tensor FP8 ---- */                                                                  \
  /* q = fp8(x * scale[0]) row-wise and/or column-wise (the byte transpose) in one pass; max  */  \
  /* |x| max-accumulated into amax[0] (nullable). counts (host memory, nullable): what        */  \
  /* saturated and flushed, and the scale spread (a device backend counts on the device).     */  \
  /* scale_inv (nullable): scale_inverse(scale[0]) into scale_inv[0] by the same launch.      */  \
  X(void, quantize_fp8, (const Tensor& x, const Tensor& scale, Tensor* rowwise,                   \
                         Tensor* columnwise, Tensor* amax, FP8CastCounts* counts,                 \
                         Tensor* scale_inv))                                                      \
  X(void, transpose_2d, (const Tensor& x, Tensor& out)) /* any element size */                    \
  X(void, dequantize_fp8, (const Tensor& data, const Tensor& scale_inv, Tensor& out))             \
  /* ---- MXFP8 (layouts of kernels/mxfp8.h); counts as in quantize_fp8 ---- */                   \
  X(void, quantize_mxfp8_rowwise, (const Tensor& x, Tensor& data, Tensor& scales,                 \
                                   FP8CastCounts* counts))                                        \
  X(void, quantize_mxfp8_columnwise, (const Tensor& x, Tensor& data, Tensor& scales,              \
                                      FP8CastCounts* counts))                                     \
  X(void, dequantize_mxfp8, (const Tensor& data, const Tensor& scales, Tensor& out))              \
  /* ---- blockwise FP8 and NVFP4 (kernels/blockwise.h, kernels/nvfp4.h); counts as in        */  \
  /* quantize_fp8; the layouts are the formats' (runtime/blockwise_tensor.h,                  */  \
  /* runtime/nvfp4_tensor.h) ---- */                                                              \
  X(void, quantize_blockwise, (const Tensor& x, const ops::BlockwiseCast& cast, Tensor& data,     \
                               Tensor& scale_inv, FP8CastCounts* counts))                         \
  /* 1x128 blocks in both directions from one read of x (cast.blocks k1D): rowwise and its    */  \
  /* scale_inv as quantize_blockwise of x, columnwise (cols, rows) and its scale_inv as       */  \
  /* quantize_blockwise of x's transpose; counts as those two casts add them. */                  \
  X(void, quantize_blockwise_both, (const Tensor& x, const ops::BlockwiseCast& cast,              \
                                    Tensor& rowwise, Tensor& rowwise_scale_inv,                   \
                                    Tensor& columnwise, Tensor& columnwise_scale_inv,             \
                                    FP8CastCounts* counts))                                       \
  X(void, dequantize_blockwise, (const Tensor& data, const Tensor& scale_inv,                     \
                                 BlockScaling blocks, Tensor& out))                               \
  X(void, blockwise_gemm, (const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,     \
                           const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,     \
                           Tensor& out, const Tensor* bias, ops::Accumulate accumulate))          \
  /* dst[c][r] = src[r][c] for r < rows, c < cols of a 2-D scale tensor; the rest of dst      */  \
  /* zeroed. */                                                                                   \
  X(void, transpose_scales, (const Tensor& src, int64_t rows, int64_t cols, Tensor& dst))         \
  X(void, quantize_nvfp4, (const Tensor& x, const ops::NVFP4Cast& cast, Tensor& data,             \
                           Tensor& scales, Tensor& amax, FP8CastCounts* counts))                  \
  /* amax null: e2m1 * block scale; else TE's dequantization with that tensor amax (the       */  \
  /* tensor scale amax / (6 * e4m3_max)). */                                                      \
  X(void, expand_nvfp4, (const Tensor& data, const Tensor& scales, const Tensor* amax,            \
                         float e4m3_max, Tensor& out))                                            \
  X(void, hadamard16, (const Tensor& x, bool inverse, Tensor& out))                               \
  /* Quartet II (kernels/nvfp4.h rht128, quantize_nvfp4_eden). */                                 \
  X(void, rht128, (const Tensor& x, uint64_t seed, uint64_t offset, bool inverse, Tensor& out))   \
  X(void, quantize_nvfp4_eden, (const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,    \
                                Tensor& scales, Tensor& decode))                                  \
  /* Row-wise FP8 (kernels/rowwise.h): data (rows, cols) and scale_inv (rows,), one per row. */  \
  X(void, quantize_rowwise, (const Tensor& x, const ops::RowwiseCast& cast, Tensor& data,         \
                             Tensor& scale_inv, FP8CastCounts* counts))                           \
  X(void, dequantize_rowwise, (const Tensor& data, const Tensor& scale_inv, Tensor& out))         \
  /* 16x16-tiled data stored (rows, cols) -> its transpose (cols, rows): nibbles transposed,  */  \
  /* each tile's scale moved with it. */                                                          \
  X(void, transpose_nvfp4_tiles, (const Tensor& data, const Tensor& scales, int64_t rows,         \
                                  int64_t cols, Tensor& out_data, Tensor& out_scales))            \
  /* ---- GEMM: out = epilogue(alpha * op(a) . op(b) * a_scale_inv * b_scale_inv [+ out]      */  \
  /* [+ bias]); `options` as the ops layer normalized it: a_scale_inv / b_scale_inv null for  */  \
  /* non-FP8 operands, out_scale set exactly for an FP8 out. ---- */                              \
  X(void, gemm, (const Tensor& a, ops::Transpose ta, const Tensor& b, ops::Transpose tb,          \
                 Tensor& out, const ops::GemmOptions& options))                                   \
  X(void, release_workspace, ()) /* the GEMM's cached workspace */                                \
  /* ---- nn: activations (x, y, dy, dx, qkv, out, dout, dqkv, logits, dlogits) f32, or also  */  \
  /* bf16 and f16 where takes_16bit_activations(), each operand its own dtype, math in f32    */  \
  /* and RNE stores; parameters (gamma, beta), statistics (mean, rsigma, lse), the loss and   */  \
  /* dgamma / dbeta / dtable f32; the embedding table f32/bf16/f16; u8 for the dropout mask.  */  \
  /* The ops layer (nn.cpp) gives a backend without 16-bit activations f32 copies. ---- */        \
  X(void, activation, (ops::Activation act, const Tensor& x, Tensor& y))                          \
  X(void, activation_backward, (ops::Activation act, const Tensor& dy, const Tensor& x,           \
                                Tensor& dx))                                                      \
  X(void, gated_activation, (ops::Activation act, const Tensor& x, Tensor& y))                    \
  X(void, gated_activation_backward, (ops::Activation act, const Tensor& dy, const Tensor& x,     \
                                      Tensor& dx))                                                \
  X(void, softmax, (const Tensor& x, Tensor& y))                                                  \
  X(void, softmax_backward, (const Tensor& dy, const Tensor& y, Tensor& dx))                      \
  /* gamma (C,), beta (C,) or null; mean (rows,) null for rmsnorm; rsigma (rows,). */             \
  X(void, norm_forward, (ops::NormKind kind, const Tensor& x, const Tensor& gamma,                \
                         const Tensor* beta, float eps, ops::ZeroCenteredGamma zc, Tensor& y,     \
                         Tensor* mean, Tensor& rsigma))                                           \
  /* The norm fused with the per-tensor FP8 cast of its output (no high-precision y); counts  */  \
  /* as in quantize_fp8. */                                                                       \
  X(void, norm_quantize_fp8, (ops::NormKind kind, const Tensor& x, const Tensor& gamma,           \
                              const Tensor* beta, float eps, ops::ZeroCenteredGamma zc,           \
                              const Tensor& scale, Tensor* rowwise, Tensor* columnwise,           \
                              Tensor* amax, Tensor* mean, Tensor& rsigma,                         \
                              FP8CastCounts* counts))                                             \
  /* mean null for rmsnorm; dbeta null when not wanted. */                                        \
  X(void, norm_backward, (const Tensor& dy, const Tensor& x, const Tensor* mean,                  \
                          const Tensor& rsigma, const Tensor& gamma, ops::ZeroCenteredGamma zc,   \
                          Tensor& dx, Tensor& dgamma, Tensor* dbeta))                             \
  /* ids: i32/i64, checked to lie in range; one per output row. table f32/bf16/f16. */            \
  X(void, embedding, (const Tensor& table, const Tensor& ids, Tensor& out))                       \
  X(void, embedding_backward, (const Tensor& dy, const Tensor& ids, Tensor& dtable))              \
  /* Element i keeps when draw (offset + i) of `seed`'s Philox stream is >= p (24-bit). */        \
  X(void, dropout, (const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y,          \
                    Tensor& mask))                                                                \
  X(void, dropout_backward, (const Tensor& dy, const Tensor& mask, float p, Tensor& dx))          \
  /* qkv (B, T, 3, H, D) -> out (B, T, H*D), lse (B, H, T). */                                    \
  X(void, causal_attention, (const Tensor& qkv, int64_t heads, float scale, Tensor& out,          \
                             Tensor& lse))                                                        \
  X(void, causal_attention_backward, (const Tensor& dout, const Tensor& qkv, const Tensor& out,   \
                                      const Tensor& lse, int64_t heads, float scale,              \
                                      Tensor& dqkv))                                              \
  /* Fused grouped-query attention: qkv (B, T, H + 2G, D), G < H dividing H; out and lse as   */  \
  /* causal_attention's. False, with nothing written, where the backend has none for the      */  \
  /* shape (kernels/nn.h then repeats the key/value heads for causal_attention). The backward */  \
  /* only follows a forward that returned true for the same shape. */                             \
  X(bool, grouped_attention, (const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale,    \
                              Tensor& out, Tensor& lse))                                          \
  X(bool, grouped_attention_backward, (const Tensor& dout, const Tensor& qkv, const Tensor& out,  \
                                       const Tensor& lse, int64_t heads, int64_t kv_heads,        \
                                       float scale, Tensor& dqkv))                                \
  /* qkv (B, T, H + 2G, D) -> packed (B, T, H + 2K, D) and back, K (packed's width) H or G    */  \
  /* (kernels/nn.h pack_heads, rope_heads); rope (max_len, D) f32 or undefined. */                \
  X(void, pack_heads, (const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,    \
                       Tensor& packed))                                                           \
  X(void, pack_heads_backward, (const Tensor& dpacked, int64_t heads, int64_t kv_heads,           \
                                const Tensor& rope, Tensor& dqkv))                                \
  /* packed (N, T, (H + 2G) * D) and f32 caches (N, max_len, G, D) (kernels/nn.h              */  \
  /* kv_cache_write, cached_attention). */                                                        \
  X(void, kv_cache_write, (const Tensor& packed, Tensor& k_cache, Tensor& v_cache, int64_t pos))  \
  X(void, cached_attention, (const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,   \
                             int64_t pos, float scale, Tensor& out))                              \
  /* targets: i32/i64, checked (on a GPU by the kernels, raised later: runtime/cuda.h). loss  */  \
  /* (1,) = mean over the counted rows (0 if none); lse (N,); counted (1,) i64 = the rows     */  \
  /* whose target is not ignore_index. The backward takes dloss (1,) f32 and counted where    */  \
  /* they live, and scales by dloss / counted (f64 divide, rounded to f32; 0 when nothing     */  \
  /* counts). */                                                                                  \
  X(void, cross_entropy, (const Tensor& logits, const Tensor& targets, int64_t ignore_index,      \
                          Tensor& loss, Tensor& lse, Tensor& counted))                            \
  X(void, cross_entropy_backward, (const Tensor& dloss, const Tensor& counted,                    \
                                   const Tensor& logits, const Tensor& targets,                   \
                                   const Tensor& lse, int64_t ignore_index, Tensor& dlogits))     \
  /* ---- optimizers (kernels/optim.h's rules) ---- */                                            \
  X(void, adamw_step, (const std::vector<ops::AdamWTensors>& tensors,                             \
                       const ops::AdamWHyper& h))                                                 \
  /* ops::sum_of_squares_part's and ops::clip_grad_norm_from_parts_'s rules; total and norm   */  \
  /* (1,) i64 receive the f64s' bits. */                                                          \
  X(void, sum_of_squares_part, (const std::vector<const Tensor*>& xs, Tensor& total))             \
  X(void, clip_grad_norm_from_parts, (const std::vector<Tensor*>& grads, const Tensor& parts,     \
                                      double max_norm, Tensor& norm))                             \
  /* buf may be undefined when momentum is 0. */                                                  \
  X(void, sgd_step, (Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,   \
                     float weight_decay, int64_t step, const ops::DeviceStep& device_step))       \
  X(void, advance_steps, (const Tensor& gate, Tensor& steps))                                     \
  X(void, finite_gate, (const Tensor& values, const Tensor* f64_bits, Tensor& gate))              \
  /* ---- scaling state ---- */                                                                   \
  /* update_fp8_slot's rule for every slot of the list (one launch on a GPU), versions        */  \
  /* bumped. */                                                                                   \
  X(void, update_fp8_slots, (const std::vector<ops::detail::SlotUpdate>& slots))                  \
  /* CurrentScalingQuantizer::scale_for's rule (runtime/fp8_scaling.h) into scale[0], and     */  \
  /* scale_inv[0] = 1 / scale[0]. */                                                              \
  X(void, current_scale, (const Tensor& amax, float fp8_max, float amax_epsilon,                  \
                          Power2Scale power_2, Tensor& scale, Tensor& scale_inv))                 \
  X(void, reciprocal, (const Tensor& x, Tensor& out)) /* out[0] = 1 / x[0] */
// clang-format on

#define OCTET_BACKEND_VIRTUAL_(ret, op, params) virtual ret op params const;
#define OCTET_BACKEND_OVERRIDE_(ret, op, params) ret op params const override;
// Every op of the list as an override, in a backend's class: the backend defines each one.
#define OCTET_BACKEND_OVERRIDES OCTET_BACKEND_OPS(OCTET_BACKEND_OVERRIDE_)

// The interface. Each op's default throws "not supported on <name()>: <op>" (kernels/backend.cpp),
// for a backend that does not declare OCTET_BACKEND_OVERRIDES (a new one, as it starts out).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda": the word in "not supported on ..."
  // Whether the nn ops take bf16 and f16 activations (above); else the ops layer converts.
  virtual bool takes_16bit_activations() const { return false; }
  OCTET_BACKEND_OPS(OCTET_BACKEND_VIRTUAL_)

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
