// Backward of the arithmetic functions. A broadcast row's gradient is the sum over the rows.
#include "autograd/ops/arithmetic.h"

#include "autograd/function.h"
#include "kernels/ops.h"

namespace octet::autograd {
namespace {

bool is_row_broadcast(const Tensor& a, const Tensor& b) { return a.shape() != b.shape(); }

// Gradient for `b` from a gradient shaped like `a`.
Tensor reduce_to(const Tensor& g, const Tensor& like_a, const Tensor& b) {
  return is_row_broadcast(like_a, b) ? ops::sum_rows(g).reshape(b.shape()) : g;
}

struct AddFn {
  static constexpr const char* kName = "add";
  float sign = 1.f;  // add: +1, sub: -1
  Shape a_shape, b_shape;
  Tensor forward(Context&, const Tensor& a, const Tensor& b) {
    a_shape = a.shape();
    b_shape = b.shape();
    return sign > 0 ? ops::add(a, b) : ops::sub(a, b);
  }
  Tensors backward(Context&, const Tensors& dy) {
    const Tensor& g = dy[0];
    Tensor db = a_shape != b_shape ? ops::sum_rows(g).reshape(b_shape) : g;
    if (sign < 0) db = ops::scale(db, -1.f);
    return {g, db};
  }
};

struct MulFn {
  static constexpr const char* kName = "mul";
  Tensor forward(Context& ctx, const Tensor& a, const Tensor& b) {
    ctx.save(a, b);
    return ops::mul(a, b);
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [a, b] = ctx.restore<2>();
    const Tensor& g = dy[0];
    return {ops::mul(g, b), reduce_to(ops::mul(g, a), a, b)};
  }
};

struct DivFn {
  static constexpr const char* kName = "div";
  Tensor forward(Context& ctx, const Tensor& a, const Tensor& b) {
    Tensor y = ops::div(a, b);
    ctx.save(a, b, y);
    return y;
  }
  Tensors backward(Context& ctx, const Tensors& dy) {
    auto [a, b, y] = ctx.restore<3>();
    const Tensor& g = dy[0];
    const Tensor da = ops::div(g, b);                     // dy / b
    const Tensor db = ops::scale(ops::mul(da, y), -1.f);  // -dy * a / b^2 = -(dy / b) * y
    return {da, reduce_to(db, a, b)};
  }
};

struct ScaleFn {
  static constexpr const char* kName = "scale";
  float s;
  Tensor forward(Context&, const Tensor& x) { return ops::scale(x, s); }
  Tensors backward(Context&, const Tensors& dy) { return {ops::scale(dy[0], s)}; }
};

struct SumFn {
  static constexpr const char* kName = "sum";
  float factor = 1.f;  // mean: 1 / numel
  Shape shape;
  DType dtype = DType::kF32;
  Tensor forward(Context&, const Tensor& x) {
    shape = x.shape();
    dtype = x.dtype();
    const Tensor s = ops::sum(x);
    return factor == 1.f ? s : ops::scale(s, factor);
  }
  Tensors backward(Context&, const Tensors& dy) {
    // dy (times the factor) broadcast where it lives: a GPU's gradient is not copied back.
    const Tensor g = factor == 1.f ? dy[0] : ops::scale(dy[0], factor);
    Tensor dx = Tensor::empty(shape, dtype, dy[0].device());
    ops::fill_from_(dx, g.reshape({1}));
    return {dx};
  }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return apply(AddFn{1.f, {}, {}}, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return apply(AddFn{-1.f, {}, {}}, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return apply(MulFn{}, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return apply(DivFn{}, a, b); }
Tensor scale(const Tensor& x, float s) { return apply(ScaleFn{s}, x); }
Tensor sum(const Tensor& x) { return apply(SumFn{}, x); }

Tensor mean(const Tensor& x) {
  OCTET_CHECK(x.numel() > 0, "mean of an empty tensor ", x);
  SumFn fn;
  fn.factor = static_cast<float>(1.0 / static_cast<double>(x.numel()));
  return apply(std::move(fn), x);
}

}  // namespace octet::autograd
