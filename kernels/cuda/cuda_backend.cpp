// The CUDA backend's table: adapters from the interface (kernels/backend.h) to the launchers of
// kernels/cuda (cuda_ops.h). Plain C++ (no device code), so every CUDA build compiles it with the
// host compiler, the emulation build included. Scalars stay on the device: nothing here reads one.
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/nvfp4_tensor.h"

namespace octet::ops::detail {
namespace {

// Every entry of a block-scaled cast's scale tensor into the slot's spread (counting casts only).
void flat_spread(const Tensor& scales, cuda::SpreadScales kind, FP8CastCounts* counts) {
  if (counts == nullptr || scales.numel() == 0) return;
  cuda::add_block_scale_spread(scales, kind, 1, 1, scales.numel(), scales.numel(), nullptr, counts);
}

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  bool takes_16bit_activations() const override { return true; }  // the kernels' ActIn / ActOut

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) const override {
    cuda::binary(op, a, b, out);
  }
  void axpy(Tensor& dst, const Tensor& src, float alpha) const override {
    cuda::axpy(dst, src, alpha);
  }
  void scale(const Tensor& x, float s, Tensor& out) const override { cuda::scale(x, s, out); }
  void fill(Tensor& dst, float value) const override { cuda::fill(dst, value); }
  void fill_from(const Tensor& value, Tensor& dst) const override { cuda::fill_from(value, dst); }
  void convert(const Tensor& src, Tensor& dst) const override { cuda::convert(src, dst); }

  void sum(const Tensor& x, Tensor& out) const override { cuda::sum(x, out); }
  void mean(const Tensor& x, Tensor& out) const override {
    cuda::sum(x, out);
    cuda::scale(out, static_cast<float>(1.0 / static_cast<double>(x.numel())), out);
  }
  void max(const Tensor& x, Tensor& out) const override { cuda::max(x, out); }
  void amax(const Tensor& x, Tensor& out) const override { cuda::amax(x, out); }
  void sum_rows(const Tensor& x, Tensor& out) const override { cuda::sum_rows(x, out); }
  double sum_of_squares(const Tensor& x) const override { return cuda::sum_of_squares(x); }

  void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                    Tensor* amax, FP8CastCounts* counts) const override {
    // The counts are kept on the device and read when a metrics log takes them.
    cuda::quantize_fp8(x, scale, rowwise, columnwise, amax, counts);
  }
  void transpose_2d(const Tensor& x, Tensor& out) const override { cuda::transpose_2d(x, out); }
  void dequantize_fp8(const Tensor& data, const Tensor& scale_inv, Tensor& out) const override {
    cuda::dequantize_fp8(data, scale_inv, out);
  }

  // Counts, and the spread of the block scales, on the device (as in quantize_fp8).
  void quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales,
                              FP8CastCounts* counts) const override {
    cuda::quantize_mxfp8_rowwise(x, data, scales, counts);
    flat_spread(scales, cuda::SpreadScales::kE8M0, counts);
  }
  void quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                                 FP8CastCounts* counts) const override {
    cuda::quantize_mxfp8_columnwise(x, data, scales, counts);
    flat_spread(scales, cuda::SpreadScales::kE8M0, counts);
  }
  void dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out) const override {
    cuda::dequantize_mxfp8(data, scales, out);
  }

  void quantize_blockwise(const Tensor& x, const BlockwiseCast& cast, Tensor& data,
                          Tensor& scale_inv, FP8CastCounts* counts) const override {
    cuda::quantize_blockwise(x, cast, data, scale_inv, counts);
    flat_spread(scale_inv, cuda::SpreadScales::kF32, counts);
  }
  void dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                            Tensor& out) const override {
    cuda::dequantize_blockwise(data, scale_inv, blocks, out);
  }
  void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                      const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                      Tensor& out, const Tensor* bias, Accumulate accumulate) const override {
    cuda::blockwise_gemm(a, a_scale_inv, a_blocks, b, b_scale_inv, b_blocks, out, bias, accumulate);
  }
  void transpose_scales(const Tensor& src, int64_t rows, int64_t cols, Tensor& dst) const override {
    cuda::transpose_scales(src, rows, cols, dst);
  }
  void quantize_nvfp4(const Tensor& x, const NVFP4Cast& cast, Tensor& data, Tensor& scales,
                      Tensor& amax, FP8CastCounts* counts) const override {
    cuda::quantize_nvfp4(x, cast, data, scales, amax, counts);
    // Each block's dequantization scale, a 16x16 tile's once per 16 rows (NVFP4Quantizer::cast).
    if (counts == nullptr) return;
    const int64_t rows = x.rows();
    cuda::add_block_scale_spread(scales, cuda::SpreadScales::kNVFP4, rows,
                                 cast.tiles_2d ? kNVFP4BlockLen : 1, x.cols() / kNVFP4BlockLen,
                                 scales.size(1), &amax, counts, cast.e4m3_max);
  }
  void expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax, float e4m3_max,
                    Tensor& out) const override {
    cuda::expand_nvfp4(data, scales, amax, e4m3_max, out);
  }
  void rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse,
              Tensor& out) const override {
    cuda::rht128(x, seed, offset, inverse, out);
  }
  void quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                           Tensor& scales, Tensor& decode) const override {
    cuda::quantize_nvfp4_eden(v, seed, offset, data, scales, decode);
  }
  void hadamard16(const Tensor& x, bool inverse, Tensor& out) const override {
    cuda::hadamard16(x, inverse, out);
  }
  void transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows, int64_t cols,
                             Tensor& out_data, Tensor& out_scales) const override {
    cuda::transpose_nvfp4_tiles(data, scales, rows, cols, out_data, out_scales);
  }

  void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& out,
            const GemmOptions& o) const override {
    // Fast FP8 accumulation is the forward GEMM's; everything else accumulates split.
    const cuda::GemmRole role = o.fp8_accumulation == FP8Accumulation::kFast
                                    ? cuda::GemmRole::kFprop
                                    : cuda::GemmRole::kGeneric;
    cuda::gemm(a, ta, b, tb, out, o.alpha, o.accumulate, o.bias, o.a_scale_inv, o.b_scale_inv, role,
               o.epilogue, o.out_scale, o.out_amax, o.alpha_scale);
  }
  void release_workspace() const override { cuda::release_workspace(); }

  void activation(Activation act, const Tensor& x, Tensor& y) const override {
    cuda::activation(act, x, y);
  }
  void activation_backward(Activation act, const Tensor& dy, const Tensor& x,
                           Tensor& dx) const override {
    cuda::activation_backward(act, dy, x, dx);
  }
  void gated_activation(Activation act, const Tensor& x, Tensor& y) const override {
    cuda::gated_activation(act, x, y);
  }
  void gated_activation_backward(Activation act, const Tensor& dy, const Tensor& x,
                                 Tensor& dx) const override {
    cuda::gated_activation_backward(act, dy, x, dx);
  }
  void softmax(const Tensor& x, Tensor& y) const override { cuda::softmax(x, y); }
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const override {
    cuda::softmax_backward(dy, y, dx);
  }

  void norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                    float eps, ZeroCenteredGamma zc, Tensor& y, Tensor* mean,
                    Tensor& rsigma) const override {
    cuda::norm_forward(kind, x, gamma, beta, eps, zc, y, mean, rsigma);
  }
  void norm_quantize_fp8(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                         float eps, ZeroCenteredGamma zc, const Tensor& scale, Tensor* rowwise,
                         Tensor* columnwise, Tensor* amax, Tensor* mean, Tensor& rsigma,
                         FP8CastCounts* counts) const override {
    cuda::norm_quantize_fp8(kind, x, gamma, beta, eps, zc, scale, rowwise, columnwise, amax, mean,
                            rsigma, counts);
  }
  void norm_backward(const Tensor& dy, const Tensor& x, const Tensor* mean, const Tensor& rsigma,
                     const Tensor& gamma, ZeroCenteredGamma zc, Tensor& dx, Tensor& dgamma,
                     Tensor* dbeta) const override {
    cuda::norm_backward(dy, x, mean, rsigma, gamma, zc, dx, dgamma, dbeta);
  }

  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) const override {
    cuda::embedding(table, ids, out);
  }
  void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable) const override {
    cuda::embedding_backward(dy, ids, dtable);
  }

  void dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y,
               Tensor& mask) const override {
    cuda::dropout(x, p, seed, offset, y, mask);
  }
  void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) const override {
    cuda::dropout_backward(dy, mask, p, dx);
  }

  void causal_attention(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                        Tensor& lse) const override {
    cuda::causal_attention(qkv, heads, scale, out, lse);
  }
  void causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, float scale,
                                 Tensor& dqkv) const override {
    cuda::causal_attention_backward(dout, qkv, out, lse, heads, scale, dqkv);
  }

  bool grouped_attention(const Tensor& qkv, int64_t heads, int64_t kv_heads, float scale,
                         Tensor& out, Tensor& lse) const override {
    return cuda::grouped_attention(qkv, heads, kv_heads, scale, out, lse);
  }
  bool grouped_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, int64_t heads, int64_t kv_heads, float scale,
                                  Tensor& dqkv) const override {
    return cuda::grouped_attention_backward(dout, qkv, out, lse, heads, kv_heads, scale, dqkv);
  }

  void pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                  Tensor& packed) const override {
    cuda::pack_heads(qkv, heads, kv_heads, rope, packed);
  }
  void pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                           const Tensor& rope, Tensor& dqkv) const override {
    cuda::pack_heads_backward(dpacked, heads, kv_heads, rope, dqkv);
  }

  void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache,
                      int64_t pos) const override {
    cuda::kv_cache_write(packed, k_cache, v_cache, pos);
  }
  void cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                        int64_t pos, float scale, Tensor& out) const override {
    cuda::cached_attention(packed, k_cache, v_cache, pos, scale, out);
  }

  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Tensor& loss, Tensor& lse, Tensor& counted) const override {
    cuda::cross_entropy(logits, targets, ignore_index, loss, lse, counted);
  }
  void cross_entropy_backward(const Tensor& dloss, const Tensor& counted, const Tensor& logits,
                              const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                              Tensor& dlogits) const override {
    cuda::cross_entropy_backward(dloss, counted, logits, targets, lse, ignore_index, dlogits);
  }

  void adamw_step(const std::vector<AdamWTensors>& tensors, const AdamWHyper& h) const override {
    cuda::adamw_step(tensors, h);
  }
  void sum_of_squares_part(const std::vector<const Tensor*>& xs, Tensor& total) const override {
    cuda::sum_of_squares_part(xs, total);
  }
  void clip_grad_norm_from_parts(const std::vector<Tensor*>& grads, const Tensor& parts,
                                 double max_norm, Tensor& norm) const override {
    cuda::clip_grad_norm_from_parts(grads, parts, max_norm, norm);
  }
  void sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
                float weight_decay, int64_t step, const DeviceStep& device_step) const override {
    cuda::sgd_step(master, grad, buf, lr, momentum, weight_decay, step, device_step);
  }
  void advance_steps(const Tensor& gate, Tensor& steps) const override {
    cuda::advance_steps(gate, steps);
  }
  void finite_gate(const Tensor& values, const Tensor* f64_bits, Tensor& gate) const override {
    cuda::finite_gate(values, f64_bits, gate);
  }

  void update_fp8_slots(const std::vector<SlotUpdate>& slots) const override {
    cuda::update_fp8_slots(slots);
    // The launch wrote every slot's tensors (update_fp8_slot bumps the CPU's itself).
    for (const SlotUpdate& u : slots) {
      u.slot->amax_history.bump_version();
      u.slot->scale.bump_version();
      u.slot->scale_inv.bump_version();
    }
  }
  void current_scale(const Tensor& amax, float fp8_max, float amax_epsilon, Power2Scale power_2,
                     Tensor& scale, Tensor& scale_inv) const override {
    cuda::current_scale(amax, fp8_max, amax_epsilon, power_2, scale, scale_inv);
  }
  void reciprocal(const Tensor& x, Tensor& out) const override { cuda::reciprocal(x, out); }
};

}  // namespace

const Backend& cuda_backend() {
  static const CudaBackend table;
  return table;
}

}  // namespace octet::ops::detail
