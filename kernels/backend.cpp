// The interface's defaults (every op says it is not supported) and the lookup of a device's
// table. A table overrides what its backend implements; what it does not is an error, never a
// silent fallback to another backend.
#include "kernels/backend.h"

namespace octet::ops::detail {

void Backend::unsupported(const char* op) const {
  OCTET_FAIL("not supported on ", name(), ": ", op);
}

void Backend::binary(BinaryOp, const Tensor&, const Tensor&, Tensor&) const {
  unsupported("binary");
}
void Backend::axpy(Tensor&, const Tensor&, float) const { unsupported("axpy"); }
void Backend::scale(const Tensor&, float, Tensor&) const { unsupported("scale"); }
void Backend::fill(Tensor&, float) const { unsupported("fill"); }
void Backend::convert(const Tensor&, Tensor&) const { unsupported("convert"); }

void Backend::sum(const Tensor&, Tensor&) const { unsupported("sum"); }
void Backend::mean(const Tensor&, Tensor&) const { unsupported("mean"); }
void Backend::max(const Tensor&, Tensor&) const { unsupported("max"); }
void Backend::amax(const Tensor&, Tensor&) const { unsupported("amax"); }
void Backend::sum_rows(const Tensor&, Tensor&) const { unsupported("sum_rows"); }
double Backend::sum_of_squares(const Tensor&) const { unsupported("sum_of_squares"); }

void Backend::quantize_fp8(const Tensor&, const Tensor&, Tensor*, Tensor*, Tensor*,
                           FP8CastCounts*) const {
  unsupported("quantize_fp8");
}
void Backend::transpose_2d(const Tensor&, Tensor&) const { unsupported("transpose_2d"); }
void Backend::dequantize_fp8(const Tensor&, const Tensor&, Tensor&) const {
  unsupported("dequantize_fp8");
}

void Backend::quantize_mxfp8_rowwise(const Tensor&, Tensor&, Tensor&, FP8CastCounts*) const {
  unsupported("quantize_mxfp8_rowwise");
}
void Backend::quantize_mxfp8_columnwise(const Tensor&, Tensor&, Tensor&, FP8CastCounts*) const {
  unsupported("quantize_mxfp8_columnwise");
}
void Backend::dequantize_mxfp8(const Tensor&, const Tensor&, Tensor&) const {
  unsupported("dequantize_mxfp8");
}

void Backend::quantize_blockwise(const Tensor&, const BlockwiseCast&, Tensor&, Tensor&,
                                 FP8CastCounts*) const {
  unsupported("quantize_blockwise");
}
void Backend::dequantize_blockwise(const Tensor&, const Tensor&, BlockScaling, Tensor&) const {
  unsupported("dequantize_blockwise");
}
void Backend::blockwise_gemm(const Tensor&, const Tensor&, BlockScaling, const Tensor&,
                             const Tensor&, BlockScaling, Tensor&, const Tensor*,
                             Accumulate) const {
  unsupported("blockwise_gemm");
}
void Backend::transpose_scales(const Tensor&, int64_t, int64_t, Tensor&) const {
  unsupported("transpose_scales");
}
void Backend::quantize_nvfp4(const Tensor&, const NVFP4Cast&, Tensor&, Tensor&, Tensor&,
                             FP8CastCounts*) const {
  unsupported("quantize_nvfp4");
}
void Backend::expand_nvfp4(const Tensor&, const Tensor&, const Tensor*, float, Tensor&) const {
  unsupported("expand_nvfp4");
}
void Backend::hadamard16(const Tensor&, bool, Tensor&) const { unsupported("hadamard16"); }
void Backend::rht128(const Tensor&, uint64_t, uint64_t, bool, Tensor&) const {
  unsupported("rht128");
}
void Backend::quantize_nvfp4_eden(const Tensor&, uint64_t, uint64_t, Tensor&, Tensor&,
                                  Tensor&) const {
  unsupported("quantize_nvfp4_eden");
}
void Backend::transpose_nvfp4_tiles(const Tensor&, const Tensor&, int64_t, int64_t, Tensor&,
                                    Tensor&) const {
  unsupported("transpose_nvfp4_tiles");
}

void Backend::gemm(const Tensor&, Transpose, const Tensor&, Transpose, Tensor&,
                   const GemmOptions&) const {
  unsupported("gemm");
}
void Backend::release_workspace() const { unsupported("release_workspace"); }

void Backend::activation(Activation, const Tensor&, Tensor&) const { unsupported("activation"); }
void Backend::activation_backward(Activation, const Tensor&, const Tensor&, Tensor&) const {
  unsupported("activation_backward");
}
void Backend::gated_activation(Activation, const Tensor&, Tensor&) const {
  unsupported("gated_activation");
}
void Backend::gated_activation_backward(Activation, const Tensor&, const Tensor&, Tensor&) const {
  unsupported("gated_activation_backward");
}
void Backend::softmax(const Tensor&, Tensor&) const { unsupported("softmax"); }
void Backend::softmax_backward(const Tensor&, const Tensor&, Tensor&) const {
  unsupported("softmax_backward");
}

void Backend::norm_forward(NormKind, const Tensor&, const Tensor&, const Tensor*, float,
                           ZeroCenteredGamma, Tensor&, Tensor*, Tensor&) const {
  unsupported("norm_forward");
}
void Backend::norm_quantize_fp8(NormKind, const Tensor&, const Tensor&, const Tensor*, float,
                                ZeroCenteredGamma, const Tensor&, Tensor*, Tensor*, Tensor*,
                                Tensor*, Tensor&, FP8CastCounts*) const {
  unsupported("norm_quantize_fp8");
}
void Backend::norm_backward(const Tensor&, const Tensor&, const Tensor*, const Tensor&,
                            const Tensor&, ZeroCenteredGamma, Tensor&, Tensor&, Tensor*) const {
  unsupported("norm_backward");
}

void Backend::embedding(const Tensor&, const Tensor&, Tensor&) const { unsupported("embedding"); }
void Backend::embedding_backward(const Tensor&, const Tensor&, Tensor&) const {
  unsupported("embedding_backward");
}

void Backend::dropout(const Tensor&, float, uint64_t, uint64_t, Tensor&, Tensor&) const {
  unsupported("dropout");
}
void Backend::dropout_backward(const Tensor&, const Tensor&, float, Tensor&) const {
  unsupported("dropout_backward");
}

void Backend::causal_attention(const Tensor&, int64_t, float, Tensor&, Tensor&) const {
  unsupported("causal_attention");
}
bool Backend::grouped_attention(const Tensor&, int64_t, int64_t, float, Tensor&, Tensor&) const {
  return false;
}
bool Backend::grouped_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         int64_t, int64_t, float, Tensor&) const {
  return false;
}
void Backend::causal_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        int64_t, float, Tensor&) const {
  unsupported("causal_attention_backward");
}

void Backend::pack_heads(const Tensor&, int64_t, int64_t, const Tensor&, Tensor&) const {
  unsupported("pack_heads");
}
void Backend::pack_heads_backward(const Tensor&, int64_t, int64_t, const Tensor&, Tensor&) const {
  unsupported("pack_heads_backward");
}

void Backend::kv_cache_write(const Tensor&, Tensor&, Tensor&, int64_t) const {
  unsupported("kv_cache_write");
}
void Backend::cached_attention(const Tensor&, const Tensor&, const Tensor&, int64_t, float,
                               Tensor&) const {
  unsupported("cached_attention");
}

void Backend::cross_entropy(const Tensor&, const Tensor&, int64_t, Tensor&, Tensor&,
                            Tensor&) const {
  unsupported("cross_entropy");
}
void Backend::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, int64_t, Tensor&) const {
  unsupported("cross_entropy_backward");
}

void Backend::adamw_step(const std::vector<AdamWTensors>&, const AdamWHyper&) const {
  unsupported("adamw_step");
}
void Backend::fill_from(const Tensor&, Tensor&) const { unsupported("fill_from"); }
void Backend::sum_of_squares_part(const std::vector<const Tensor*>&, Tensor&) const {
  unsupported("sum_of_squares_part");
}
void Backend::clip_grad_norm_from_parts(const std::vector<Tensor*>&, const Tensor&, double,
                                        Tensor&) const {
  unsupported("clip_grad_norm_from_parts");
}
void Backend::sgd_step(Tensor&, const Tensor&, Tensor&, float, float, float, int64_t,
                       const DeviceStep&) const {
  unsupported("sgd_step");
}
void Backend::advance_steps(const Tensor&, Tensor&) const { unsupported("advance_steps"); }
void Backend::finite_gate(const Tensor&, const Tensor*, Tensor&) const {
  unsupported("finite_gate");
}

void Backend::update_fp8_slots(const std::vector<SlotUpdate>&) const {
  unsupported("update_fp8_slots");
}
void Backend::current_scale(const Tensor&, float, float, Power2Scale, Tensor&, Tensor&) const {
  unsupported("current_scale");
}
void Backend::reciprocal(const Tensor&, Tensor&) const { unsupported("reciprocal"); }

const Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu_backend();
#if OCTET_WITH_CUDA
  return cuda_backend();
#else
  OCTET_FAIL("not supported on cuda: octet was built without CUDA (", device, " requested)");
#endif
}

}  // namespace octet::ops::detail
