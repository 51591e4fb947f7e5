// matmul and linear: forward Y = X·Wᵀ, dgrad dX = dY·W, wgrad dW = dYᵀ·X, dbias = sum of dY rows.
#include "autograd/ops/linalg.h"

#include "autograd/function.h"
#include "kernels/ops.h"

namespace octet::autograd {
namespace {

using ops::Transpose;

// op(a)·op(b) through ops::gemm. Mixed-precision operands (a bf16 weight, an f32 activation) meet
// in f32: ops::gemm_operand_for.
Tensor mixed_gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, DType out_dtype,
                  const ops::GemmOptions& options = {}) {
  return ops::gemm(ops::gemm_operand_for(a, b), ta, ops::gemm_operand_for(b, a), tb, out_dtype,
                   options);
}

Shape with_last(const Shape& shape, int64_t last) {
  Shape out = shape;
  out.back() = last;
  return out;
}

struct MatmulFn {
  static constexpr const char* kName = "matmul";
  Tensor forward(Context& ctx, const Tensor& a, const Tensor& b) {
    OCTET_CHECK(b.dim() == 2, "matmul: b must be 2-D (K, N), got ", b);
    OCTET_CHECK(a.dim() >= 1 && a.cols() == b.size(0), "matmul: a ", a, " and b ", b,
                " do not chain (a's last dim must equal b's rows)");
    ctx.save(a, b);
    Tensor y = mixed_gemm(a, Transpose::kNo, b, Transpose::kNo, a.dtype());
    return y.reshape(with_last(a.shape(), b.size(1)));
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [a, b] = ctx.restore<2>();
    const Tensor& g = dy[0];
    Tensor da = mixed_gemm(g, Transpose::kNo, b, Transpose::kYes, a.dtype()).reshape(a.shape());
    Tensor db = mixed_gemm(a, Transpose::kYes, g, Transpose::kNo, b.dtype());
    return {da, db};
  }
};

struct LinearFn {
  static constexpr const char* kName = "linear";
  bool has_bias = false;
  Tensor forward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias) {
    OCTET_CHECK(w.dim() == 2 && x.dim() >= 1 && x.cols() == w.size(1), "linear: input ", x,
                " and weight ", w, " do not match (weight is (out, in), input's last dim is in)");
    has_bias = bias.defined();
    ctx.save(x, w);
    ops::GemmOptions options;
    options.bias = has_bias ? &bias : nullptr;
    Tensor y = mixed_gemm(x, Transpose::kNo, w, Transpose::kYes, x.dtype(), options);
    return y.reshape(with_last(x.shape(), w.size(0)));
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [x, w] = ctx.restore<2>();
    const Tensor& g = dy[0];
    Tensor dx = mixed_gemm(g, Transpose::kNo, w, Transpose::kNo, x.dtype()).reshape(x.shape());
    Tensor dw = mixed_gemm(g, Transpose::kYes, x, Transpose::kNo, w.dtype());
    Tensor db = has_bias ? ops::sum_rows(g) : Tensor();
    return {dx, dw, db};
  }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return apply(MatmulFn{}, a, b); }

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (bias.defined()) {
    OCTET_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "linear: bias ", bias, " must be (",
                w.size(0), ",)");
  }
  return apply(LinearFn{}, x, w, bias);
}

}  // namespace octet::autograd
