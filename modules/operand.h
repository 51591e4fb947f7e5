// A GEMM operand in either precision (a high-precision tensor or a quantized tensor), and the
// three GEMMs of a linear layer on such operands: Y = X·Wᵀ (fprop), dX = dY·W (dgrad),
// dW = dYᵀ·X (wgrad). The FP8 modules run the same code with and without FP8.
#pragma once

#include <memory>
#include <vector>

#include "autograd/context.h"
#include "runtime/quantized_tensor.h"
#include "runtime/tensor.h"

namespace octet::modules {

struct Operand {
  Tensor hp;                           // used when q is null
  std::shared_ptr<QuantizedTensor> q;  // FP8 data with the usages the GEMMs need

  bool quantized() const { return q != nullptr; }
  bool defined() const { return q != nullptr || hp.defined(); }
  const Shape& shape() const { return q ? q->shape() : hp.shape(); }
};

// `x` as an operand: quantized with `quantizer` (usages and ownership as given) or, with a null
// quantizer, `x` itself.
Operand make_operand(const Tensor& x, const Quantizer* quantizer, Usage usage, Ownership ownership,
                     AmaxRecording amax);

// Y (rows of x, out) = X·Wᵀ [+ bias]; X (.., in), W (out, in). Output dtype `out_dtype`.
Tensor gemm_fprop(const Operand& x, const Operand& w, const Tensor* bias, DType out_dtype);
// dX (.., in) = dY·W; dY (.., out).
Tensor gemm_dgrad(const Operand& dy, const Operand& w, DType out_dtype);
// dW (out, in) = dYᵀ·X.
Tensor gemm_wgrad(const Operand& dy, const Operand& x, DType out_dtype);

// Keeps only `usage` of a quantized operand (drops the rest); no-op for high precision.
void keep_only(Operand& op, Usage usage);

// The named operand fields an autograd function saves for backward, listed once by the function
// (its `saved_fields()`) and used for both directions: save() moves each field into the context —
// high precision by reference (version-checked), quantized ones as owned or internal objects,
// undefined fields as undefined tensors — and leaves the fields empty, so the context is the one
// holder; restore() fills the same fields again for the backward, so it reads `fc1.input()`,
// never a position, and empties them when the returned guard goes (the end of the backward),
// so nothing outlives the context's release of the node's state.
class SavedOperands {
 public:
  class Restored {
   public:
    explicit Restored(std::vector<Operand*> fields) : fields_(std::move(fields)) {}
    ~Restored() {
      for (Operand* f : fields_) *f = Operand{};
    }
    Restored(const Restored&) = delete;
    Restored& operator=(const Restored&) = delete;

   private:
    std::vector<Operand*> fields_;
  };

  void save(autograd::Context& ctx, const std::vector<Operand*>& fields);
  [[nodiscard]] Restored restore(autograd::Context& ctx, const std::vector<Operand*>& fields);

 private:
  std::vector<bool> quantized_;
};

}  // namespace octet::modules
