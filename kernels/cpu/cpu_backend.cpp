// The CPU backend's table: thin adapters from the interface (kernels/backend.h) to the CPU
// kernels. The data is in host memory, so this is where a scalar tensor (a scale, an amax slot, a
// loss) becomes the float the kernels take or give.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/block_formats_cpu.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mxfp8_cpu.h"
#include "kernels/cpu/nn_cpu.h"
#include "runtime/fp8_scaling.h"

namespace octet::ops::detail {
namespace {

float* data_or_null(Tensor* t) { return t != nullptr ? t->data_as<float>() : nullptr; }
const float* data_or_null(const Tensor* t) { return t != nullptr ? t->data_as<float>() : nullptr; }
void set(Tensor& scalar, float value) { *scalar.data_as<float>() = value; }

// A step decided on the device, here on the CPU: its gate and count are host memory, read here.
// False: the gate is shut (no update); else *step is the count the update uses.
bool open_step(const DeviceStep& d, int64_t* step) {
  if (d.gate == nullptr) return true;
  if (*d.gate->data_as<float>() == 0.f) return false;
  *step = *d.steps->data_as<int64_t>();
  return true;
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) const override {
    cpu::binary(op, a, b, out);
  }
  void axpy(Tensor& dst, const Tensor& src, float alpha) const override {
    cpu::axpy(dst, src, alpha);
  }
  void scale(const Tensor& x, float s, Tensor& out) const override { cpu::scale(x, s, out); }
  void fill(Tensor& dst, float value) const override { cpu::fill(dst, value); }
  void fill_from(const Tensor& value, Tensor& dst) const override {
    cpu::fill(dst, *value.data_as<float>());
  }
  void convert(const Tensor& src, Tensor& dst) const override { cpu::convert(src, dst); }

  void sum(const Tensor& x, Tensor& out) const override { set(out, cpu::sum(x)); }
  void mean(const Tensor& x, Tensor& out) const override {
    const double n = static_cast<double>(x.numel());
    set(out, static_cast<float>(static_cast<double>(cpu::sum(x)) / n));
  }
  void max(const Tensor& x, Tensor& out) const override { set(out, cpu::max(x)); }
  void amax(const Tensor& x, Tensor& out) const override { set(out, cpu::amax(x)); }
  void sum_rows(const Tensor& x, Tensor& out) const override { cpu::sum_rows(x, out); }
  double sum_of_squares(const Tensor& x) const override { return cpu::sum_of_squares(x); }

  void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                    Tensor* amax, FP8CastCounts* counts) const override {
    cpu::quantize_fp8(x, scale.item(), rowwise, columnwise, data_or_null(amax), counts);
  }
  void transpose_2d(const Tensor& x, Tensor& out) const override { cpu::transpose_2d(x, out); }
  void dequantize_fp8(const Tensor& data, const Tensor& scale_inv, Tensor& out) const override {
    cpu::dequantize_fp8(data, scale_inv.item(), out);
  }

  void quantize_mxfp8_rowwise(const Tensor& x, Tensor& data, Tensor& scales,
                              FP8CastCounts* counts) const override {
    cpu::quantize_mxfp8_rowwise(x, data, scales, counts);
  }
  void quantize_mxfp8_columnwise(const Tensor& x, Tensor& data, Tensor& scales,
                                 FP8CastCounts* counts) const override {
    cpu::quantize_mxfp8_columnwise(x, data, scales, counts);
  }
  void dequantize_mxfp8(const Tensor& data, const Tensor& scales, Tensor& out) const override {
    cpu::dequantize_mxfp8(data, scales, out);
  }

  void quantize_blockwise(const Tensor& x, const BlockwiseCast& cast, Tensor& data,
                          Tensor& scale_inv, FP8CastCounts* counts) const override {
    cpu::quantize_blockwise(x, cast, data, scale_inv, counts);
  }
  void dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                            Tensor& out) const override {
    cpu::dequantize_blockwise(data, scale_inv, blocks, out);
  }
  void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                      const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks,
                      Tensor& out, const Tensor* bias, Accumulate accumulate) const override {
    cpu::blockwise_gemm(a, a_scale_inv, a_blocks, b, b_scale_inv, b_blocks, out, bias, accumulate);
  }
  void transpose_scales(const Tensor& src, int64_t rows, int64_t cols, Tensor& dst) const override {
    const auto* s = static_cast<const uint8_t*>(src.data());
    auto* d = static_cast<uint8_t*>(dst.data());
    const size_t es = src.element_size();
    std::fill(d, d + dst.nbytes(), uint8_t{0});
    const int64_t ss = src.size(1), ds = dst.size(1);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(d + (c * ds + r) * es, s + (r * ss + c) * es, es);
    }
  }
  void quantize_nvfp4(const Tensor& x, const NVFP4Cast& cast, Tensor& data, Tensor& scales,
                      Tensor& amax, FP8CastCounts* counts) const override {
    cpu::quantize_nvfp4(x, cast, data, scales, amax, counts);
  }
  void expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax, float e4m3_max,
                    Tensor& out) const override {
    cpu::expand_nvfp4(data, scales, amax, e4m3_max, out);
  }
  void transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows, int64_t cols,
                             Tensor& out_data, Tensor& out_scales) const override {
    cpu::transpose_nvfp4_tiles(data, scales, rows, cols, out_data, out_scales);
  }
  void rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse,
              Tensor& out) const override {
    cpu::rht128(x, seed, offset, inverse, out);
  }
  void quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                           Tensor& scales, Tensor& decode) const override {
    cpu::quantize_nvfp4_eden(v, seed, offset, data, scales, decode);
  }
  void hadamard16(const Tensor& x, bool inverse, Tensor& out) const override {
    std::vector<float> in(static_cast<size_t>(x.numel()));
    cpu::to_f32(x.dtype(), x.data(), in.data(), x.numel());
    cpu::hadamard16(in.data(), x.numel(), inverse, out.data_as<float>());
  }

  void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& out,
            const GemmOptions& o) const override {
    // The operands' scale_inv fold into alpha: the CPU's f32 result is the exact product of the
    // FP8 values either way, rounded once.
    float alpha = o.alpha;
    if (o.a_scale_inv != nullptr) alpha *= o.a_scale_inv->item();
    if (o.b_scale_inv != nullptr) alpha *= o.b_scale_inv->item();
    if (o.alpha_scale != nullptr) alpha *= o.alpha_scale->item();
    const float out_scale = o.out_scale != nullptr ? o.out_scale->item() : 1.f;
    cpu::gemm(a, ta, b, tb, out, alpha, o.accumulate, o.bias, o.epilogue, out_scale,
              data_or_null(o.out_amax));
  }
  void release_workspace() const override { cpu::release_workspace(); }

  void activation(Activation act, const Tensor& x, Tensor& y) const override {
    cpu::activation(act, x, y);
  }
  void activation_backward(Activation act, const Tensor& dy, const Tensor& x,
                           Tensor& dx) const override {
    cpu::activation_backward(act, dy, x, dx);
  }
  void gated_activation(Activation act, const Tensor& x, Tensor& y) const override {
    cpu::gated_activation(act, x, y);
  }
  void gated_activation_backward(Activation act, const Tensor& dy, const Tensor& x,
                                 Tensor& dx) const override {
    cpu::gated_activation_backward(act, dy, x, dx);
  }
  void softmax(const Tensor& x, Tensor& y) const override { cpu::softmax(x, y); }
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) const override {
    cpu::softmax_backward(dy, y, dx);
  }

  void norm_forward(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                    float eps, ZeroCenteredGamma zc, Tensor& y, Tensor* mean,
                    Tensor& rsigma) const override {
    if (kind == NormKind::kLayerNorm) {
      cpu::layernorm(x, gamma.data_as<float>(), data_or_null(beta), eps, zc, y, data_or_null(mean),
                     rsigma.data_as<float>());
    } else {
      cpu::rmsnorm(x, gamma.data_as<float>(), eps, zc, y, rsigma.data_as<float>());
    }
  }
  void norm_quantize_fp8(NormKind kind, const Tensor& x, const Tensor& gamma, const Tensor* beta,
                         float eps, ZeroCenteredGamma zc, const Tensor& scale, Tensor* rowwise,
                         Tensor* columnwise, Tensor* amax, Tensor* mean, Tensor& rsigma,
                         FP8CastCounts* counts) const override {
    const cpu::NormRow norm(kind, gamma.data_as<float>(), data_or_null(beta), eps, zc, x.cols());
    cpu::norm_quantize_fp8(x, norm, scale.item(), rowwise, columnwise, data_or_null(amax),
                           data_or_null(mean), rsigma.data_as<float>(), counts);
  }
  void norm_backward(const Tensor& dy, const Tensor& x, const Tensor* mean, const Tensor& rsigma,
                     const Tensor& gamma, ZeroCenteredGamma zc, Tensor& dx, Tensor& dgamma,
                     Tensor* dbeta) const override {
    cpu::norm_backward(dy, x, data_or_null(mean), rsigma.data_as<float>(), gamma.data_as<float>(),
                       zc, dx, dgamma.data_as<float>(), data_or_null(dbeta));
  }

  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) const override {
    cpu::embedding(table, cpu::index_values(ids), out);
  }
  void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable) const override {
    cpu::embedding_backward(dy, cpu::index_values(ids), dtable);
  }

  void dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y,
               Tensor& mask) const override {
    cpu::dropout(x, p, seed, offset, y, mask);
  }
  void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) const override {
    cpu::dropout_backward(dy, mask, p, dx);
  }

  void causal_attention(const Tensor& qkv, int64_t heads, float scale, Tensor& out,
                        Tensor& lse) const override {
    cpu::causal_attention(qkv, heads, scale, out, lse);
  }
  void causal_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, float scale,
                                 Tensor& dqkv) const override {
    cpu::causal_attention_backward(dout, qkv, out, lse, heads, scale, dqkv);
  }

  void pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                  Tensor& packed) const override {
    cpu::pack_heads(qkv, heads, kv_heads, rope, packed);
  }
  void pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                           const Tensor& rope, Tensor& dqkv) const override {
    cpu::pack_heads_backward(dpacked, heads, kv_heads, rope, dqkv);
  }

  void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache,
                      int64_t pos) const override {
    cpu::kv_cache_write(packed, k_cache, v_cache, pos);
  }
  void cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                        int64_t pos, float scale, Tensor& out) const override {
    cpu::cached_attention(packed, k_cache, v_cache, pos, scale, out);
  }

  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Tensor& loss, Tensor& lse, Tensor& counted) const override {
    const std::vector<int64_t> t = cpu::index_values(targets);
    int64_t count = 0;
    for (const int64_t v : t) count += v != ignore_index ? 1 : 0;
    const double total = cpu::cross_entropy(logits, t, ignore_index, lse.data_as<float>());
    set(loss, count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.f);
    *counted.data_as<int64_t>() = count;
  }
  void cross_entropy_backward(const Tensor& dloss, const Tensor& counted, const Tensor& logits,
                              const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                              Tensor& dlogits) const override {
    const int64_t count = *counted.data_as<int64_t>();
    const double d = *dloss.data_as<float>();
    const float g = count > 0 ? static_cast<float>(d / static_cast<double>(count)) : 0.f;
    cpu::cross_entropy_backward(g, logits, cpu::index_values(targets), lse.data_as<float>(),
                                ignore_index, dlogits);
  }

  void adamw_step(const std::vector<AdamWTensors>& tensors, const AdamWHyper& h) const override {
    AdamWHyper host = h;
    if (open_step(h.device_step, &host.step)) cpu::adamw_step(tensors, host);
  }
  void sum_of_squares_part(const std::vector<const Tensor*>& xs, Tensor& total) const override {
    double sum = 0;
    for (const Tensor* x : xs) sum += sum_of_squares(*x);
    std::memcpy(total.data(), &sum, sizeof(sum));
  }
  void clip_grad_norm_from_parts(const std::vector<Tensor*>& grads, const Tensor& parts,
                                 double max_norm, Tensor& norm) const override {
    double total = 0;
    for (int64_t i = 0; i < parts.numel(); ++i) {
      double part = 0;
      std::memcpy(&part, parts.data_as<int64_t>() + i, sizeof(part));
      total += part;
    }
    const double n = std::sqrt(total);
    if (max_norm > 0 && std::isfinite(n) && n > max_norm) {
      const auto factor = static_cast<float>(max_norm / (n + 1e-6));
      for (Tensor* g : grads) scale(*g, factor, *g);
    }
    std::memcpy(norm.data(), &n, sizeof(n));
  }
  void sgd_step(Tensor& master, const Tensor& grad, Tensor& buf, float lr, float momentum,
                float weight_decay, int64_t step, const DeviceStep& device_step) const override {
    if (open_step(device_step, &step)) {
      cpu::sgd_step(master, grad, buf, lr, momentum, weight_decay, step);
    }
  }
  void advance_steps(const Tensor& gate, Tensor& steps) const override {
    if (*gate.data_as<float>() != 0.f) ++*steps.data_as<int64_t>();
  }
  void finite_gate(const Tensor& values, const Tensor* f64_bits, Tensor& gate) const override {
    bool finite = true;
    const float* v = values.data_as<float>();
    for (int64_t i = 0; i < values.numel(); ++i) finite = finite && std::isfinite(v[i]);
    if (f64_bits != nullptr) {
      double d = 0;
      std::memcpy(&d, f64_bits->data(), sizeof(d));
      finite = finite && std::isfinite(d);
    }
    *gate.data_as<float>() = finite ? 1.f : 0.f;
  }

  void update_fp8_slots(const std::vector<SlotUpdate>& slots) const override {
    for (const SlotUpdate& u : slots) update_fp8_slot(*u.slot, u.fp8_max, u.margin, u.algo);
  }
  void current_scale(const Tensor& amax, float fp8_max, float amax_epsilon, Power2Scale power_2,
                     Tensor& scale, Tensor& scale_inv) const override {
    const float s =
        ::octet::current_scale(amax.item(), fp8_max, amax_epsilon, power_2 == Power2Scale::kOn);
    set(scale, s);
    set(scale_inv, 1.f / s);
  }
  void reciprocal(const Tensor& x, Tensor& out) const override { set(out, 1.f / x.item()); }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend table;
  return table;
}

}  // namespace octet::ops::detail
