// Backward of the shape operations.
#include "autograd/ops/shape.h"

#include <cstring>

#include "autograd/function.h"
#include "kernels/ops.h"

namespace octet::autograd {
namespace {

struct ReshapeFn {
  static constexpr const char* kName = "reshape";
  Shape to;
  Shape from;
  Tensor forward(Context&, const Tensor& x) {
    from = x.shape();
    return x.reshape(to);
  }
  Tensors backward(Context&, const Tensors& dy) { return {dy[0].reshape(from)}; }
};

// (..., R, C) -> (..., C, R), one 2-D transpose per leading index.
Tensor transpose_last_two(const Tensor& x) {
  OCTET_CHECK(x.dim() >= 2, "transpose needs at least 2 dimensions, got ", x);
  const int64_t r = x.size(-2), c = x.size(-1);
  const int64_t batch = x.numel() / std::max<int64_t>(r * c, 1);
  Shape out_shape = x.shape();
  std::swap(out_shape[out_shape.size() - 2], out_shape[out_shape.size() - 1]);
  if (batch == 1) return ops::transpose_2d(x.reshape({r, c})).reshape(out_shape);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  const Tensor flat = x.reshape({batch, r, c});
  const Tensor out_flat = out.reshape({batch, c, r});
  for (int64_t b = 0; b < batch; ++b) {
    out_flat.slice(b, b + 1).copy_bytes_from(
        ops::transpose_2d(flat.slice(b, b + 1).reshape({r, c})));
  }
  return out;
}

struct TransposeFn {
  static constexpr const char* kName = "transpose";
  Tensor forward(Context&, const Tensor& x) { return transpose_last_two(x); }
  Tensors backward(Context&, const Tensors& dy) { return {transpose_last_two(dy[0])}; }
};

struct SliceFn {
  static constexpr const char* kName = "slice";
  int64_t begin, end;
  Shape from;
  Tensor forward(Context&, const Tensor& x) {
    from = x.shape();
    return x.slice(begin, end);
  }
  Tensors backward(Context&, const Tensors& dy) {
    Tensor dx = Tensor::zeros(from, dy[0].dtype(), dy[0].device());
    Tensor part = dx.slice(begin, end);
    ops::copy_(part, dy[0]);
    return {dx};
  }
};

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) { return apply(ReshapeFn{shape, {}}, x); }
Tensor transpose(const Tensor& x) { return apply(TransposeFn{}, x); }
Tensor slice(const Tensor& x, int64_t begin, int64_t end) {
  return apply(SliceFn{begin, end, {}}, x);
}

}  // namespace octet::autograd
