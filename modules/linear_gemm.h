// The FP8 linear core: one GEMM of a linear layer, y = x·Wᵀ (+ b), as Linear, LayerNormLinear and
// LayerNormMLP all run it, with TE's usage rules (DESIGN.md "Details that matter") derived in one
// place from what needs a gradient:
// - the input is cast row-wise, plus column-wise only when the weight needs a gradient (wgrad
//   reads it); after fprop it keeps only the column-wise data, saved only for wgrad;
// - the weight is saved only for dgrad (an internal weight keeps only its column-wise data);
// - backward casts dY row-wise for dgrad and column-wise for wgrad, and runs only those GEMMs.
// A frozen weight (no gradient) therefore costs no column-wise input copy, no saved input, no
// column-wise dY and no wgrad, in every module that composes the core.
#pragma once

#include "modules/fp8_state.h"
#include "modules/operand.h"

namespace octet::modules {

class LinearGemm {
 public:
  // `q`: the forward's quantizers (all null: high precision).
  explicit LinearGemm(GemmQuantizers q = {}) : q_(std::move(q)) {}

  // What backward will compute, decided in the autograd function's forward: dgrad when the
  // GEMM's input (or anything before it) needs a gradient, wgrad when the weight does. Both
  // false when the forward records nothing.
  void set_needs(bool dgrad, bool wgrad) {
    need_dgrad_ = dgrad;
    need_wgrad_ = wgrad;
  }
  bool need_dgrad() const { return need_dgrad_; }
  bool need_wgrad() const { return need_wgrad_; }
  bool fp8() const { return q_.fp8(); }

  // The input cast: row-wise, plus column-wise for wgrad (unless the backward re-casts the
  // row-wise data: Quartet II).
  Usage input_usage() const;
  // The input's quantizer (null without FP8, in a high-precision forward and in a high-precision
  // backward, whose forward GEMM casts the high-precision input itself), for a cast fused with the
  // input's producer.
  const Quantizer* input_quantizer() const {
    return q_.forward_high_precision || q_.backward_high_precision ? nullptr : q_.input.get();
  }
  // `x` cast for this GEMM (recording amax per fp8_amax_recording()), or `x` itself.
  Operand cast_input(const Tensor& x) const;

  // Y = X·Wᵀ (+ bias), in `out_dtype`.
  static Tensor fprop(const Operand& x, const Operand& w, const Tensor* bias, DType out_dtype);
  // fprop of this GEMM's operands: under a high-precision backward the high-precision `x` and `w`
  // are cast row-wise for it here (the input recording amax per fp8_amax_recording()).
  Tensor run_fprop(const Operand& x, const Operand& w, const Tensor* bias, DType out_dtype) const;
  bool backward_high_precision() const { return q_.backward_high_precision; }
  // fprop, then, when recording, keeps what backward reads in input() and weight() (trimmed to
  // the usages it reads) and nothing else.
  Tensor forward(Operand x, Operand w, const Tensor* bias, DType out_dtype, bool recording);

  // The saved fields: the input (wgrad) and the weight (dgrad); undefined when not needed.
  Operand& input() { return x_; }
  Operand& weight() { return w_; }
  // Keeps `x` and `w` as the saved fields, trimmed (for GEMMs whose fprop ran elsewhere, e.g. a
  // recompute).
  void keep_for_backward(Operand x, Operand w);

  // dX (when need_dgrad) and dW (when need_wgrad) from dY, with the forward's grad_output
  // quantizer; under delayed scaling, schedules the forward's meta's backward update.
  struct Grads {
    Tensor dx, dw;
  };
  Grads backward(const Tensor& dy, DType dx_dtype, DType dw_dtype) const;

 private:
  // Whether the backward re-casts the forward's row-wise operands (Quartet II): they keep row-wise
  // data then, and no column-wise copies are made.
  bool recasts() const {
    return q_.grad_output != nullptr && !q_.backward_high_precision &&
           q_.grad_output->backward_recasts_rowwise();
  }

  GemmQuantizers q_;
  bool need_dgrad_ = false, need_wgrad_ = false;
  Operand x_, w_;
};

// The dtype a weight's gradient comes out of the wgrad GEMM in: bf16 for a bf16 weight (the
// GEMM's store rounds the f32 sum once, as the engine's cast to the parameter's dtype would,
// without an f32 copy); f32 for an f32 weight and for FP8 primary weights of any format, whose
// f32 master takes it.
inline DType wgrad_dtype_for(const Tensor& weight_leaf) {
  return weight_leaf.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
}

}  // namespace octet::modules
