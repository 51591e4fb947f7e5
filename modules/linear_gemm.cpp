// The FP8 linear core: casts, fprop, what is kept for backward, and the backward GEMMs.
#include "modules/linear_gemm.h"

#include "modules/fp8_autocast.h"

namespace octet::modules {

Usage LinearGemm::input_usage() const {
  return Usage::kRowwise | (need_wgrad_ ? Usage::kColumnwise : Usage::kNone);
}

Operand LinearGemm::cast_input(const Tensor& x) const {
  return make_operand(x, q_.input.get(), input_usage(), Ownership::kInternal, fp8_amax_recording());
}

Tensor LinearGemm::fprop(const Operand& x, const Operand& w, const Tensor* bias, DType out_dtype) {
  return gemm_fprop(x, w, bias, out_dtype);
}

Tensor LinearGemm::forward(Operand x, Operand w, const Tensor* bias, DType out_dtype,
                           bool recording) {
  Tensor y = fprop(x, w, bias, out_dtype);
  if (recording) keep_for_backward(std::move(x), std::move(w));
  return y;
}

void LinearGemm::keep_for_backward(Operand x, Operand w) {
  // The input keeps only what wgrad reads; an internal weight only what dgrad reads (owned
  // weights are saved whole, by reference, and never trimmed).
  x_ = Operand{};
  w_ = Operand{};
  if (need_wgrad_) {
    keep_only(x, Usage::kColumnwise);
    x_ = std::move(x);
  }
  if (need_dgrad_) {
    if (w.quantized() && w.q->ownership() == Ownership::kInternal) keep_only(w, Usage::kColumnwise);
    w_ = std::move(w);
  }
}

LinearGemm::Grads LinearGemm::backward(const Tensor& dy, DType dx_dtype, DType dw_dtype) const {
  const Usage usage = (need_dgrad_ ? Usage::kRowwise : Usage::kNone) |
                      (need_wgrad_ ? Usage::kColumnwise : Usage::kNone);
  Operand dyo{dy, nullptr};
  if (q_.fp8() && usage != Usage::kNone) {
    dyo =
        make_operand(dy, q_.grad_output.get(), usage, Ownership::kInternal, AmaxRecording::kRecord);
    if (q_.meta) schedule_fp8_backward_update(q_.meta);
  }
  Grads g;
  if (need_dgrad_) g.dx = gemm_dgrad(dyo, w_, dx_dtype);
  if (need_wgrad_) g.dw = gemm_wgrad(dyo, x_, dw_dtype);
  return g;
}

}  // namespace octet::modules
