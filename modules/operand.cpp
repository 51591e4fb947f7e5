// GEMMs on operands of either precision, and saving them for backward.
#include "modules/operand.h"

#include "kernels/ops.h"
#include "kernels/quantized.h"

namespace octet::modules {
namespace {

using ops::GemmLayout;
using ops::Transpose;

Shape with_last(const Shape& shape, int64_t last) {
  Shape out = shape;
  out.back() = last;
  return out;
}

}  // namespace

Operand make_operand(const Tensor& x, const Quantizer* quantizer, Usage usage, Ownership ownership,
                     AmaxRecording amax) {
  if (quantizer == nullptr) return {x, nullptr};
  return {Tensor(), quantizer->quantize(x, usage, ownership, amax)};
}

Tensor gemm_fprop(const Operand& x, const Operand& w, const Tensor* bias, DType out_dtype) {
  const int64_t out_features = w.shape().front();
  if (x.quantized()) {
    OCTET_ASSERT(w.quantized(), "fprop with an FP8 input needs an FP8 weight");
    ops::FP8GemmOptions options;
    options.bias = bias;
    return ops::fp8_gemm(*x.q, *w.q, GemmLayout::kFprop, out_dtype, options)
        .reshape(with_last(x.shape(), out_features));
  }
  ops::GemmOptions options;
  options.bias = bias;
  return ops::gemm(ops::gemm_operand_for(x.hp, w.hp), Transpose::kNo,
                   ops::gemm_operand_for(w.hp, x.hp), Transpose::kYes, out_dtype, options)
      .reshape(with_last(x.shape(), out_features));
}

Tensor gemm_dgrad(const Operand& dy, const Operand& w, DType out_dtype) {
  const int64_t in_features = w.shape().back();
  if (dy.quantized()) {
    return ops::fp8_gemm(*dy.q, *w.q, GemmLayout::kDgrad, out_dtype)
        .reshape(with_last(dy.shape(), in_features));
  }
  return ops::gemm(ops::gemm_operand_for(dy.hp, w.hp), Transpose::kNo,
                   ops::gemm_operand_for(w.hp, dy.hp), Transpose::kNo, out_dtype)
      .reshape(with_last(dy.shape(), in_features));
}

Tensor gemm_wgrad(const Operand& dy, const Operand& x, DType out_dtype) {
  if (dy.quantized()) return ops::fp8_gemm(*dy.q, *x.q, GemmLayout::kWgrad, out_dtype);
  return ops::gemm(ops::gemm_operand_for(dy.hp, x.hp), Transpose::kYes,
                   ops::gemm_operand_for(x.hp, dy.hp), Transpose::kNo, out_dtype);
}

void keep_only(Operand& op, Usage usage) {
  if (op.quantized() && op.q->usage() != usage) ops::update_usage(*op.q, usage);
}

void SavedOperands::save(autograd::Context& ctx, const std::vector<Operand*>& fields) {
  if (!ctx.recording()) return;
  OCTET_ASSERT(quantized_.empty(), "SavedOperands::save called twice");
  for (Operand* op : fields) {
    quantized_.push_back(op->quantized());
    if (op->quantized()) {
      ctx.save_object(op->q);
    } else {
      ctx.save(op->hp);
    }
    *op = Operand{};
  }
}

SavedOperands::Restored SavedOperands::restore(autograd::Context& ctx,
                                               const std::vector<Operand*>& fields) {
  OCTET_ASSERT(fields.size() == quantized_.size(), "restoring ", fields.size(),
               " saved operands, but ", quantized_.size(), " were saved");
  const std::vector<Tensor> tensors = ctx.restore_tensors();
  const std::vector<std::shared_ptr<Saveable>> objects = ctx.restore_objects();
  size_t t = 0, o = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (quantized_[i]) {
      auto typed = std::dynamic_pointer_cast<QuantizedTensor>(objects.at(o++));
      OCTET_ASSERT(typed != nullptr, "saved operand is not a quantized tensor");
      *fields[i] = {Tensor(), std::move(typed)};
    } else {
      *fields[i] = {tensors.at(t++), nullptr};
    }
  }
  return Restored(fields);
}

}  // namespace octet::modules
