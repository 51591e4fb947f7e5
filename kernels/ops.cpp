// Argument checks and device dispatch for kernels/ops.h.
#include "kernels/ops.h"

#include <cmath>

#include "kernels/device_policy.h"
#include "kernels/op_checks.h"
#include "runtime/memory.h"

namespace octet::ops {
namespace {

using detail::BinaryOp;
using detail::check_defined;
using detail::on_device;
using detail::op_device;

void check_arith_dtype(const char* op, const Tensor& t) {
  const DType d = t.dtype();
  OCTET_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, op,
              ": expected an f32, bf16 or f16 tensor, got ", t);
}

void check_scalar(const char* op, const Tensor* t, const char* name) {
  OCTET_CHECK(t != nullptr && t->defined(), op, ": ", name, " is required");
  OCTET_CHECK(t->numel() == 1 && t->dtype() == DType::kF32, op, ": ", name,
              " must be a one-element f32 tensor, got ", *t);
}

// A reduction's one-element f32 result, on x's device: a GPU's result stays there, no wait.
Tensor scalar_result(const Tensor& x) { return Tensor::empty({1}, DType::kF32, x.device()); }

// The device of an op on two defined f32/bf16/f16 tensors, named `a_name` and `b_name`.
Device check_pair(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                  const char* b_name) {
  check_defined(op, a, a_name);
  check_defined(op, b, b_name);
  const Device device = op_device(op, {{a, a_name}, {b, b_name}});
  check_arith_dtype(op, a);
  check_arith_dtype(op, b);
  return device;
}

// check_pair of an in-place op writing dst from src, which must have dst's shape.
Device check_dst_src(const char* op, const Tensor& dst, const Tensor& src) {
  const Device device = check_pair(op, dst, "dst", src, "src");
  OCTET_CHECK(dst.shape() == src.shape(), op, ": shapes ", shape_str(dst.shape()), " and ",
              shape_str(src.shape()), " differ");
  return device;
}

Tensor binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  const Device device = check_pair(name, a, "a", b, "b");
  const bool row = b.dim() == 1 && a.dim() >= 1 && b.numel() == a.cols();
  OCTET_CHECK(a.shape() == b.shape() || row, name, ": shapes ", shape_str(a.shape()), " and ",
              shape_str(b.shape()), " do not match (b must have a's shape or be a row of ",
              a.dim() >= 1 ? a.cols() : 1, " elements)");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), device);
  on_device(device)->binary(op, a, b, out);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, "mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, "div", a, b); }

Tensor scale(const Tensor& x, float s) {
  check_defined("scale", x, "x");
  check_arith_dtype("scale", x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  on_device(x.device())->scale(x, s, out);
  return out;
}

void add_(Tensor& dst, const Tensor& src, float alpha) {
  const Device device = check_dst_src("add_", dst, src);
  on_device(device)->axpy(dst, src, alpha);
  dst.bump_version();
}

void scale_(Tensor& dst, float s) {
  check_defined("scale_", dst, "dst");
  check_arith_dtype("scale_", dst);
  on_device(dst.device())->scale(dst, s, dst);
  dst.bump_version();
}

void fill_(Tensor& dst, float value) {
  check_defined("fill_", dst, "dst");
  OCTET_CHECK(!is_fp8(dst.dtype()), "fill_: ", dst, " is FP8; quantize_fp8 writes FP8 data");
  on_device(dst.device())->fill(dst, value);
  dst.bump_version();
}

void fill_from_(Tensor& dst, const Tensor& value) {
  constexpr const char* op = "fill_from_";
  check_defined(op, dst, "dst");
  check_arith_dtype(op, dst);
  check_scalar(op, &value, "value");
  on_device(op_device(op, {{dst, "dst"}, {value, "value"}}))->fill_from(value, dst);
  dst.bump_version();
}

void copy_(Tensor& dst, const Tensor& src) {
  const Device device = check_dst_src("copy_", dst, src);
  on_device(device)->convert(src, dst);
  dst.bump_version();
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined("cast", x, "x");
  check_arith_dtype("cast", x);
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
              "cast: target dtype ", dtype, " is not f32, bf16 or f16 (FP8: use quantize_fp8)");
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  on_device(x.device())->convert(x, out);
  return out;
}

namespace {

// Whether a reduction is defined on an empty tensor (sum and amax: 0) or not (mean, max).
enum class Empty { kAllowed, kRejected };

// The one-element f32 reduction `op` of x by the backend's `run`.
Tensor reduce_to_scalar(const char* op, const Tensor& x, Empty empty,
                        void (detail::Backend::*run)(const Tensor&, Tensor&) const) {
  check_defined(op, x, "x");
  OCTET_CHECK(empty == Empty::kAllowed || x.numel() > 0, op, " of an empty tensor ", x);
  check_arith_dtype(op, x);
  Tensor out = scalar_result(x);
  ((*on_device(x.device())).*run)(x, out);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) {
  return reduce_to_scalar("sum", x, Empty::kAllowed, &detail::Backend::sum);
}
Tensor mean(const Tensor& x) {
  return reduce_to_scalar("mean", x, Empty::kRejected, &detail::Backend::mean);
}
Tensor max(const Tensor& x) {
  return reduce_to_scalar("max", x, Empty::kRejected, &detail::Backend::max);
}
Tensor amax(const Tensor& x) {
  return reduce_to_scalar("amax", x, Empty::kAllowed, &detail::Backend::amax);
}

Tensor sum_rows(const Tensor& x) {
  check_defined("sum_rows", x, "x");
  check_arith_dtype("sum_rows", x);
  OCTET_CHECK(x.dim() >= 1, "sum_rows: needs at least one dimension, got ", x);
  Tensor out = Tensor::empty({x.cols()}, x.dtype(), x.device());
  on_device(x.device())->sum_rows(x, out);
  return out;
}

void quantize_fp8(const Tensor& x, const Tensor& scale, Tensor* rowwise, Tensor* columnwise,
                  Tensor* amax, FP8CastCounts* counts, Tensor* scale_inv) {
  constexpr const char* op = "quantize_fp8";
  check_defined(op, x, "x");
  OCTET_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, op,
              ": input must be f32 or bf16, got ", x);
  OCTET_CHECK(rowwise != nullptr || columnwise != nullptr, op,
              ": asked for neither row-wise nor column-wise output");
  OCTET_CHECK(scale.defined() && scale.numel() == 1 && scale.dtype() == DType::kF32, op,
              ": scale must be a one-element f32 tensor, got ", scale);
  const Device device = op_device(op, {{x, "x"},
                                       {scale, "scale"},
                                       {rowwise, "row-wise output"},
                                       {columnwise, "column-wise output"},
                                       {amax, "amax"},
                                       {scale_inv, "scale_inv"}});
  DType fp8 = rowwise ? rowwise->dtype() : columnwise->dtype();
  OCTET_CHECK(is_fp8(fp8), op, ": output dtype must be e4m3 or e5m2, got ", fp8);
  if (rowwise != nullptr) {
    OCTET_CHECK(rowwise->shape() == x.shape(), op, ": row-wise output ", *rowwise,
                " must have the input's shape ", shape_str(x.shape()));
  }
  if (columnwise != nullptr) {
    const Shape want = {x.cols(), x.rows()};
    OCTET_CHECK(columnwise->dtype() == fp8, op,
                ": row-wise and column-wise outputs differ in dtype");
    OCTET_CHECK(columnwise->shape() == want, op, ": column-wise output ", *columnwise,
                " must have shape ", shape_str(want), " (last dim, prod(leading dims))");
  }
  if (amax != nullptr) {
    OCTET_CHECK(amax->numel() == 1 && amax->dtype() == DType::kF32, op,
                ": amax must be a one-element f32 tensor, got ", *amax);
  }
  if (scale_inv != nullptr) {
    OCTET_CHECK(scale_inv->numel() == 1 && scale_inv->dtype() == DType::kF32, op,
                ": scale_inv must be a one-element f32 tensor, got ", *scale_inv);
  }
  on_device(device)->quantize_fp8(x, scale, rowwise, columnwise, amax, counts, scale_inv);
  for (Tensor* t : {rowwise, columnwise, amax, scale_inv}) {
    if (t != nullptr) t->bump_version();
  }
}

Tensor transpose_2d(const Tensor& x) {
  check_defined("transpose_2d", x, "x");
  Tensor out = Tensor::empty({x.cols(), x.rows()}, x.dtype(), x.device());
  on_device(x.device())->transpose_2d(x, out);
  return out;
}

Tensor dequantize_fp8(const Tensor& data, const Tensor& scale_inv, DType dtype) {
  constexpr const char* op = "dequantize_fp8";
  check_defined(op, data, "data");
  OCTET_CHECK(is_fp8(data.dtype()), op, ": data must be e4m3 or e5m2, got ", data);
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, op,
              ": output dtype must be f32 or bf16, got ", dtype);
  check_scalar(op, &scale_inv, "scale_inv");
  const Device device = op_device(op, {{data, "data"}, {scale_inv, "scale_inv"}});
  Tensor out = Tensor::empty(data.shape(), dtype, device);
  on_device(device)->dequantize_fp8(data, scale_inv, out);
  return out;
}

void gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& out,
          const GemmOptions& options) {
  constexpr const char* op = "gemm";
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  check_defined(op, out, "out");
  OCTET_CHECK(a.dim() >= 2 && b.dim() >= 2, op, ": operands must be at least 2-D, got ", a, " and ",
              b);
  const bool a_fp8 = is_fp8(a.dtype()), b_fp8 = is_fp8(b.dtype());
  OCTET_CHECK((a.dtype() == DType::kF32 && b.dtype() == DType::kF32) ||
                  (a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16) || (a_fp8 && b_fp8),
              op, ": operand dtypes ", a.dtype(), " x ", b.dtype(),
              " unsupported (f32 x f32, bf16 x bf16, or FP8 x FP8)");
  const bool out_fp8 = is_fp8(out.dtype());
  OCTET_CHECK(out.dtype() == DType::kF32 || out.dtype() == DType::kBF16 || out_fp8, op,
              ": output must be f32, bf16 or FP8 (e4m3/e5m2), got ", out);
  const bool keep = options.accumulate == Accumulate::kYes;
  // An FP8 output is defined by its scale: one without the other is a caller's mix-up.
  OCTET_CHECK(out_fp8 == (options.out_scale != nullptr), op,
              ": an FP8 output and out_scale go together, got out ", out,
              options.out_scale != nullptr ? " with" : " without", " out_scale");
  OCTET_CHECK(out_fp8 || options.out_amax == nullptr, op,
              ": out_amax is for an FP8 output, got out ", out);
  if (out_fp8) {
    OCTET_CHECK(!keep, op, ": accumulate cannot add into an FP8 output ", out);
    check_scalar(op, options.out_scale, "out_scale (FP8 output)");
    if (options.out_amax != nullptr) check_scalar(op, options.out_amax, "out_amax");
  }
  // The epilogue applies to the whole result; on top of out's old contents it would apply twice.
  OCTET_CHECK(options.epilogue == Epilogue::kNone || !keep, op,
              ": the GELU epilogue cannot be combined with accumulate");
  const bool a_trans = ta == Transpose::kYes, b_trans = tb == Transpose::kYes;
  const int64_t m = a_trans ? a.cols() : a.rows();
  const int64_t k = a_trans ? a.rows() : a.cols();
  const int64_t kb = b_trans ? b.cols() : b.rows();
  const int64_t n = b_trans ? b.rows() : b.cols();
  OCTET_CHECK(k == kb, op, ": inner dimensions differ: op(a) is (", m, ", ", k, ") from ", a,
              a_trans ? " transposed" : "", ", op(b) is (", kb, ", ", n, ") from ", b,
              b_trans ? " transposed" : "");
  OCTET_CHECK(out.rows() == m && out.cols() == n, op, ": output ", out, " must be (", m, ", ", n,
              ")");
  if (options.bias != nullptr) {
    const Tensor& bias = *options.bias;
    OCTET_CHECK(bias.defined() && bias.numel() == n &&
                    (bias.dtype() == DType::kF32 || bias.dtype() == DType::kBF16),
                op, ": bias must be an f32 or bf16 tensor of ", n, " elements, got ", bias);
  }
  if (a_fp8) check_scalar(op, options.a_scale_inv, "a_scale_inv (FP8 operand a)");
  if (b_fp8) check_scalar(op, options.b_scale_inv, "b_scale_inv (FP8 operand b)");
  if (options.alpha_scale != nullptr) {
    OCTET_CHECK(!a_fp8, op, ": alpha_scale is for high-precision operands, got ", a.dtype(),
                " (FP8 operands carry a_scale_inv and b_scale_inv)");
    check_scalar(op, options.alpha_scale, "alpha_scale");
  }
  // The scale_inv of a non-FP8 operand is not read: the backend gets it as null.
  GemmOptions call = options;
  call.a_scale_inv = a_fp8 ? options.a_scale_inv : nullptr;
  call.b_scale_inv = b_fp8 ? options.b_scale_inv : nullptr;
  const Device device = op_device(op, {{a, "a"},
                                       {b, "b"},
                                       {out, "out"},
                                       {call.bias, "bias"},
                                       {call.a_scale_inv, "a_scale_inv"},
                                       {call.b_scale_inv, "b_scale_inv"},
                                       {call.alpha_scale, "alpha_scale"},
                                       {call.out_scale, "out_scale"},
                                       {call.out_amax, "out_amax"}});
  on_device(device)->gemm(a, ta, b, tb, out, call);
  out.bump_version();
  if (options.out_amax != nullptr) options.out_amax->bump_version();
}

Tensor gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, DType out_dtype,
            const GemmOptions& options) {
  OCTET_CHECK(options.accumulate == Accumulate::kNo,
              "gemm: accumulate needs an existing output tensor");
  check_defined("gemm", a, "a");
  check_defined("gemm", b, "b");
  const int64_t m = ta == Transpose::kYes ? a.cols() : a.rows();
  const int64_t n = tb == Transpose::kYes ? b.rows() : b.cols();
  Tensor out = Tensor::empty({m, n}, out_dtype, a.device());
  gemm(a, ta, b, tb, out, options);
  return out;
}

Tensor gemm_operand_for(const Tensor& t, const Tensor& other) {
  if (t.dtype() == other.dtype()) return t;
  if (t.device().is_cuda()) {
    // Tensor cores: a bf16 weight meets an f32 activation in bf16 (the autocast rule).
    return t.dtype() == DType::kBF16 ? t : cast(t, DType::kBF16);
  }
  return t.dtype() == DType::kF32 ? t : cast(t, DType::kF32);
}

void release_workspace() {
  detail::backend_for(Device::cpu()).release_workspace();
  // One call releases the workspace of every CUDA device.
  if (cuda_device_count() > 0) detail::backend_for(Device::cuda(0)).release_workspace();
}

}  // namespace octet::ops
