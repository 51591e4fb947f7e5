// The FP8 linear core: casts, fprop, what is kept for backward, and the backward GEMMs.
#include "modules/linear_gemm.h"

#include "modules/fp8_autocast.h"

namespace octet::modules {

Usage LinearGemm::input_usage() const {
  return Usage::kRowwise | (need_wgrad_ && !recasts() ? Usage::kColumnwise : Usage::kNone);
}

Operand LinearGemm::cast_input(const Tensor& x) const {
  return make_operand(x, input_quantizer(), input_usage(), Ownership::kInternal,
                      fp8_amax_recording());
}

Tensor LinearGemm::fprop(const Operand& x, const Operand& w, const Tensor* bias, DType out_dtype) {
  return gemm_fprop(x, w, bias, out_dtype);
}

Tensor LinearGemm::run_fprop(const Operand& x, const Operand& w, const Tensor* bias,
                             DType out_dtype) const {
  if (!q_.fp8() || !q_.backward_high_precision) return fprop(x, w, bias, out_dtype);
  OCTET_CHECK(!x.quantized() && !w.quantized(),
              "a high-precision backward casts the forward GEMM's operands itself; got an "
              "already quantized operand");
  const Operand xq = make_operand(x.hp, q_.input.get(), Usage::kRowwise, Ownership::kInternal,
                                  fp8_amax_recording());
  const Operand wq = make_operand(w.hp, q_.weight.get(), Usage::kRowwise, Ownership::kInternal,
                                  fp8_amax_recording());
  return fprop(xq, wq, bias, out_dtype);
}

Tensor LinearGemm::forward(Operand x, Operand w, const Tensor* bias, DType out_dtype,
                           bool recording) {
  Tensor y = run_fprop(x, w, bias, out_dtype);
  if (recording) keep_for_backward(std::move(x), std::move(w));
  return y;
}

void LinearGemm::keep_for_backward(Operand x, Operand w) {
  // The input keeps only what wgrad reads; an internal weight only what dgrad reads (owned
  // weights are saved whole, by reference, and never trimmed).
  x_ = Operand{};
  w_ = Operand{};
  const Usage read = recasts() ? Usage::kRowwise : Usage::kColumnwise;
  if (need_wgrad_) {
    keep_only(x, read);
    x_ = std::move(x);
  }
  if (need_dgrad_) {
    if (w.quantized() && w.q->ownership() == Ownership::kInternal) keep_only(w, read);
    w_ = std::move(w);
  }
}

LinearGemm::Grads LinearGemm::backward(const Tensor& dy, DType dx_dtype, DType dw_dtype) const {
  const Usage usage = (need_dgrad_ ? Usage::kRowwise : Usage::kNone) |
                      (need_wgrad_ ? Usage::kColumnwise : Usage::kNone);
  Grads g;
  if (q_.backward_high_precision) {
    // The kept operands are the forward's high-precision input and weight.
    const Operand dyo{dy, nullptr};
    if (need_dgrad_) g.dx = gemm_dgrad(dyo, w_, dx_dtype);
    if (need_wgrad_) g.dw = gemm_wgrad(dyo, x_, dw_dtype);
    return g;
  }
  // After a high-precision forward the kept input and weight are cast now, as the forward would
  // have cast them for this backward (recording nothing).
  const Usage read = recasts() ? Usage::kRowwise : Usage::kColumnwise;
  auto for_backward = [&](const Operand& kept, const Quantizer* q, bool needed) {
    if (!q_.fp8() || !needed || kept.quantized()) return kept;
    return make_operand(kept.hp, q, read, Ownership::kInternal, AmaxRecording::kSkip);
  };
  const Operand x = for_backward(x_, q_.input.get(), need_wgrad_);
  const Operand w = for_backward(w_, q_.weight.get(), need_dgrad_);
  if (q_.fp8() && recasts()) {
    // dY cast and the forward's operands re-cast together, with one set of transform signs.
    const Quantizer::BackwardOperands b = q_.grad_output->backward_operands(
        dy, need_wgrad_ ? x.q.get() : nullptr, need_dgrad_ ? w.q.get() : nullptr);
    if (need_dgrad_) g.dx = gemm_dgrad({Tensor(), b.dy}, {Tensor(), b.w}, dx_dtype);
    if (need_wgrad_) g.dw = gemm_wgrad({Tensor(), b.dy}, {Tensor(), b.x}, dw_dtype);
    return g;
  }
  Operand dyo{dy, nullptr};
  if (q_.fp8() && usage != Usage::kNone) {
    dyo =
        make_operand(dy, q_.grad_output.get(), usage, Ownership::kInternal, AmaxRecording::kRecord);
    if (q_.meta) schedule_fp8_backward_update(q_.meta);
  }
  if (need_dgrad_) g.dx = gemm_dgrad(dyo, w, dx_dtype);
  if (need_wgrad_) g.dw = gemm_wgrad(dyo, x, dw_dtype);
  return g;
}

}  // namespace octet::modules
