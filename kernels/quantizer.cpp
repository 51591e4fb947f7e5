// Delayed, current and MXFP8 quantizers: buffers for the requested usages, the cast, the scale.
#include "kernels/quantizer.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/device_policy.h"
#include "kernels/ops.h"
#include "runtime/fp8_scaling.h"

namespace octet {
namespace {

void check_input(const char* who, const Tensor& x, const Shape* shape = nullptr) {
  OCTET_CHECK(x.defined(), who, ": input is an undefined tensor");
  OCTET_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, who,
              ": input must be f32 or bf16, got ", x);
  if (shape != nullptr) {
    OCTET_CHECK(x.shape() == *shape, who, ": source ", x, " must have the destination's shape ",
                shape_str(*shape));
  }
}

void check_usage(const char* who, Usage usage) {
  OCTET_CHECK(usage != Usage::kNone, who, ": asked for no usage (row-wise and/or column-wise)");
}

// Per-tensor cast of x into new buffers for `usage`; `amax` (nullable) collects max |x|.
struct Cast {
  Tensor rowwise;
  Tensor columnwise;
};
Cast cast_per_tensor(const Tensor& x, const Tensor& scale, DType dtype, Usage usage, Tensor* amax,
                     FP8CastCounts* counts = nullptr) {
  Cast c;
  if (has_usage(usage, Usage::kRowwise)) c.rowwise = Tensor::empty(x.shape(), dtype, x.device());
  if (has_usage(usage, Usage::kColumnwise)) {
    c.columnwise = Tensor::empty({x.cols(), x.rows()}, dtype, x.device());
  }
  ops::quantize_fp8(x, scale, c.rowwise.defined() ? &c.rowwise : nullptr,
                    c.columnwise.defined() ? &c.columnwise : nullptr, amax, counts);
  return c;
}

// scale_inv[0] = 1 / scale[0] rounded to nearest, in place, on scale's device (a CUDA scale is
// never read back by the host: the GPU computes the inverse in-stream).
void write_inverse(const Tensor& scale, Tensor& scale_inv) {
  ops::detail::on_device(scale.device())->reciprocal(scale, scale_inv);
  scale_inv.bump_version();
}

// 1 / scale as a new (1,) f32 tensor on scale's device (under the caller's tag).
Tensor inverse_of(const Tensor& scale) {
  Tensor t = Tensor::empty({1}, DType::kF32, scale.device());
  write_inverse(scale, t);
  return t;
}

// Requantizes src into dst's buffers with `scale`; writes dst's scale_inv in place.
void requantize_per_tensor(Float8Tensor& dst, const Tensor& src, const Tensor& scale, Tensor* amax,
                           FP8CastCounts* counts = nullptr) {
  Tensor row = dst.rowwise_data(), col = dst.columnwise_data(), scale_inv = dst.scale_inv();
  OCTET_CHECK(scale_inv.device() == src.device(), "quantize_into: destination on ",
              scale_inv.device(), " but source on ", src.device());
  ops::quantize_fp8(src, scale, row.defined() ? &row : nullptr, col.defined() ? &col : nullptr,
                    amax, counts);
  write_inverse(scale, scale_inv);
  dst.bump_version();
}

Float8Tensor& float8_destination(const char* who, QuantizedTensor& dst, DType dtype) {
  OCTET_CHECK(dst.scaling_mode() == ScalingMode::kPerTensor, who, ": destination ", dst.describe(),
              " is not a per-tensor FP8 tensor");
  OCTET_CHECK(dst.dtype() == dtype, who, ": destination ", dst.describe(), " is not ", dtype);
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  auto* f = dynamic_cast<Float8Tensor*>(&dst);
  OCTET_ASSERT(f != nullptr, dst.describe(), " is not a Float8Tensor");
  return *f;
}

std::shared_ptr<const Quantizer> handle(const Quantizer& q) {
  // Null when the quantizer is not owned by a shared_ptr: the tensor then has no quantizer and
  // quantize_into on it says so.
  return q.weak_from_this().lock();
}

}  // namespace

// ---- delayed scaling ----

DelayedScalingQuantizer::DelayedScalingQuantizer(Tensor scale, Tensor amax_history, DType dtype,
                                                 std::shared_ptr<FP8CastCounts> cast_counts)
    : scale_(std::move(scale)),
      amax_history_(std::move(amax_history)),
      dtype_(dtype),
      cast_counts_(std::move(cast_counts)) {
  OCTET_CHECK(is_fp8(dtype_), "DelayedScalingQuantizer: dtype must be e4m3 or e5m2, got ", dtype_);
  OCTET_CHECK(scale_.defined() && scale_.numel() == 1 && scale_.dtype() == DType::kF32,
              "DelayedScalingQuantizer: scale must be a one-element f32 tensor, got ", scale_);
  OCTET_CHECK(amax_history_.defined() && amax_history_.dim() == 1 && amax_history_.numel() >= 1 &&
                  amax_history_.dtype() == DType::kF32,
              "DelayedScalingQuantizer: amax_history must be a non-empty 1-D f32 tensor, got ",
              amax_history_);
}

std::shared_ptr<DelayedScalingQuantizer> DelayedScalingQuantizer::for_slot(FP8Meta& meta,
                                                                           SlotId slot) {
  FP8Slot& s = meta.slot(slot);
  return std::make_shared<DelayedScalingQuantizer>(s.scale, s.amax_history, meta.dtype(slot),
                                                   s.cast_counts);
}

std::shared_ptr<QuantizedTensor> DelayedScalingQuantizer::quantize(const Tensor& x, Usage usage,
                                                                   Ownership ownership,
                                                                   AmaxRecording amax) const {
  check_input("DelayedScalingQuantizer::quantize", x);
  check_usage("DelayedScalingQuantizer::quantize", usage);
  // history[0] as a one-element view: the cast max-accumulates into it in the same pass.
  Tensor newest = amax_history_.slice(0, 1);
  Cast c = cast_per_tensor(x, scale_, dtype_, usage,
                           amax == AmaxRecording::kRecord ? &newest : nullptr, counts_for(amax));
  auto t = std::make_shared<Float8Tensor>(x.shape(), std::move(c.rowwise), std::move(c.columnwise),
                                          inverse_of(scale_), ownership);
  t->set_quantizer(handle(*this));
  return t;
}

std::shared_ptr<Float8Tensor> DelayedScalingQuantizer::adopt(const Shape& shape, Tensor rowwise,
                                                             Tensor columnwise,
                                                             Ownership ownership) const {
  auto t = std::make_shared<Float8Tensor>(shape, std::move(rowwise), std::move(columnwise),
                                          inverse_of(scale_), ownership);
  t->set_quantizer(handle(*this));
  return t;
}

void DelayedScalingQuantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                            AmaxRecording amax) const {
  Float8Tensor& f = float8_destination("DelayedScalingQuantizer::quantize_into", dst, dtype_);
  check_input("DelayedScalingQuantizer::quantize_into", src, &dst.shape());
  Tensor newest = amax_history_.slice(0, 1);
  requantize_per_tensor(f, src, scale_, amax == AmaxRecording::kRecord ? &newest : nullptr,
                        counts_for(amax));
}

std::string DelayedScalingQuantizer::describe() const {
  return std::string("delayed scaling ") + std::string(dtype_name(dtype_));
}

// ---- current scaling ----

CurrentScalingQuantizer::CurrentScalingQuantizer(DType dtype, Power2Scale power_2_scale,
                                                 float amax_epsilon)
    : dtype_(dtype), power_2_scale_(power_2_scale), amax_epsilon_(amax_epsilon) {
  OCTET_CHECK(is_fp8(dtype_), "CurrentScalingQuantizer: dtype must be e4m3 or e5m2, got ", dtype_);
  OCTET_CHECK(std::isfinite(amax_epsilon_) && amax_epsilon_ >= 0.f,
              "CurrentScalingQuantizer: amax_epsilon must be finite and >= 0, got ", amax_epsilon_);
}

float CurrentScalingQuantizer::scale_for(float amax) const {
  // The rule shared with the CUDA kernel (runtime/fp8_scaling.h), so both give the same scale.
  return current_scale(amax, fp8_max(dtype_), amax_epsilon_, power_2_scale_ == Power2Scale::kOn);
}

std::pair<Tensor, Tensor> CurrentScalingQuantizer::scales_for(const Tensor& x) const {
  const Tensor amax = ops::amax(x);
  // On the GPU the amax, the scale and its inverse never leave the device: no launch waits.
  Tensor scale = Tensor::empty({1}, DType::kF32, x.device());
  Tensor scale_inv = Tensor::empty({1}, DType::kF32, x.device());
  ops::detail::on_device(x.device())
      ->current_scale(amax, fp8_max(dtype_), amax_epsilon_, power_2_scale_, scale, scale_inv);
  return {scale, scale_inv};
}

std::shared_ptr<QuantizedTensor> CurrentScalingQuantizer::quantize(const Tensor& x, Usage usage,
                                                                   Ownership ownership,
                                                                   AmaxRecording) const {
  check_input("CurrentScalingQuantizer::quantize", x);
  check_usage("CurrentScalingQuantizer::quantize", usage);
  auto [scale, scale_inv] = scales_for(x);
  Cast c = cast_per_tensor(x, scale, dtype_, usage, nullptr);
  auto t = std::make_shared<Float8Tensor>(x.shape(), std::move(c.rowwise), std::move(c.columnwise),
                                          std::move(scale_inv), ownership);
  t->set_quantizer(handle(*this));
  return t;
}

void CurrentScalingQuantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                            AmaxRecording) const {
  Float8Tensor& f = float8_destination("CurrentScalingQuantizer::quantize_into", dst, dtype_);
  check_input("CurrentScalingQuantizer::quantize_into", src, &dst.shape());
  requantize_per_tensor(f, src, scales_for(src).first, nullptr);
}

std::string CurrentScalingQuantizer::describe() const {
  return std::string("current scaling ") + std::string(dtype_name(dtype_));
}

// ---- MXFP8 ----

MXFP8Quantizer::MXFP8Quantizer(DType dtype) : dtype_(dtype) {
  OCTET_CHECK(is_fp8(dtype_), "MXFP8Quantizer: dtype must be e4m3 or e5m2, got ", dtype_);
}

std::shared_ptr<QuantizedTensor> MXFP8Quantizer::quantize(const Tensor& x, Usage usage,
                                                          Ownership ownership,
                                                          AmaxRecording) const {
  check_input("MXFP8Quantizer::quantize", x);
  check_usage("MXFP8Quantizer::quantize", usage);
  Tensor row, row_scales, col, col_scales;
  if (has_usage(usage, Usage::kRowwise)) {
    row = Tensor::empty(x.shape(), dtype_, x.device());
    row_scales = Tensor::empty(mxfp8_scale_shape(x.rows(), x.cols()), DType::kE8M0, x.device());
    ops::quantize_mxfp8(x, Usage::kRowwise, row, row_scales);
  }
  if (has_usage(usage, Usage::kColumnwise)) {
    col = Tensor::empty({x.cols(), x.rows()}, dtype_, x.device());
    col_scales = Tensor::empty(mxfp8_scale_shape(x.cols(), x.rows()), DType::kE8M0, x.device());
    ops::quantize_mxfp8(x, Usage::kColumnwise, col, col_scales);
  }
  auto t = std::make_shared<MXFP8Tensor>(x.shape(), std::move(row), std::move(row_scales),
                                         std::move(col), std::move(col_scales), ownership);
  t->set_quantizer(handle(*this));
  return t;
}

void MXFP8Quantizer::quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording) const {
  constexpr const char* who = "MXFP8Quantizer::quantize_into";
  OCTET_CHECK(dst.scaling_mode() == ScalingMode::kMXFP8 && dst.dtype() == dtype_, who,
              ": destination ", dst.describe(), " is not an MXFP8 ", dtype_, " tensor");
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  check_input(who, src, &dst.shape());
  auto* mx = dynamic_cast<MXFP8Tensor*>(&dst);
  OCTET_ASSERT(mx != nullptr, dst.describe(), " is not an MXFP8Tensor");
  MXFP8Tensor& m = *mx;
  if (m.has(Usage::kRowwise)) {
    Tensor data = m.rowwise_data(), scales = m.rowwise_scales();
    ops::quantize_mxfp8(src, Usage::kRowwise, data, scales);
  }
  if (m.has(Usage::kColumnwise)) {
    Tensor data = m.columnwise_data(), scales = m.columnwise_scales();
    ops::quantize_mxfp8(src, Usage::kColumnwise, data, scales);
  }
  dst.bump_version();
}

std::string MXFP8Quantizer::describe() const {
  return std::string("mxfp8 ") + std::string(dtype_name(dtype_));
}

// ---- from a recipe ----

std::shared_ptr<Quantizer> make_quantizer(const Recipe& recipe, FP8Meta* meta, SlotId slot) {
  const DType dtype = recipe.dtype(slot.direction);
  switch (recipe.kind) {
    case RecipeKind::kDelayed:
      OCTET_CHECK(meta != nullptr, "make_quantizer: delayed scaling needs the module's FP8Meta");
      OCTET_CHECK(meta->recipe() == recipe, "make_quantizer: the FP8Meta was made for recipe ",
                  describe(meta->recipe()), " but the active recipe is ", describe(recipe),
                  " (make a new FP8Meta when the recipe changes)");
      return DelayedScalingQuantizer::for_slot(*meta, slot);
    case RecipeKind::kCurrent:
      return std::make_shared<CurrentScalingQuantizer>(
          dtype, recipe.power_2_scale ? Power2Scale::kOn : Power2Scale::kOff, recipe.amax_epsilon);
    case RecipeKind::kMXFP8:
      return std::make_shared<MXFP8Quantizer>(DType::kE4M3);
  }
  OCTET_FAIL("make_quantizer: unknown recipe kind ", static_cast<int>(recipe.kind));
}

}  // namespace octet
