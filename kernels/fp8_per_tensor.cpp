// Delayed and current scaling quantizers, the delayed update, and the per-tensor format entry.
#include "kernels/fp8_per_tensor.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/device_policy.h"
#include "kernels/ops.h"
#include "kernels/quantized_format.h"
#include "runtime/fp8_scaling.h"
#include "runtime/memory.h"

namespace octet {
namespace {

// Per-tensor cast of x into new buffers for `usage`; `amax` (nullable) collects max |x|;
// `scale_inv` (nullable, (1,) f32) gets 1 / scale from the same launch.
struct Cast {
  Tensor rowwise;
  Tensor columnwise;
};
Cast cast_per_tensor(const Tensor& x, const Tensor& scale, DType dtype, Usage usage, Tensor* amax,
                     FP8CastCounts* counts, Tensor* scale_inv) {
  Cast c;
  if (has_usage(usage, Usage::kRowwise)) c.rowwise = Tensor::empty(x.shape(), dtype, x.device());
  if (has_usage(usage, Usage::kColumnwise)) {
    c.columnwise = Tensor::empty({x.cols(), x.rows()}, dtype, x.device());
  }
  ops::quantize_fp8(x, scale, c.rowwise.defined() ? &c.rowwise : nullptr,
                    c.columnwise.defined() ? &c.columnwise : nullptr, amax, counts, scale_inv);
  return c;
}

// 1 / scale rounded to nearest as a new (1,) f32 tensor on scale's device (under the caller's
// tag), for data a fused kernel cast: a CUDA scale is never read back by the host, the GPU
// computes the inverse in-stream.
Tensor inverse_of(const Tensor& scale) {
  Tensor t = Tensor::empty({1}, DType::kF32, scale.device());
  ops::detail::on_device(scale.device())->reciprocal(scale, t);
  t.bump_version();
  return t;
}

// Requantizes src into dst's buffers with `scale`; the same launch writes dst's scale_inv in
// place.
void requantize_per_tensor(Float8Tensor& dst, const Tensor& src, const Tensor& scale, Tensor* amax,
                           FP8CastCounts* counts = nullptr) {
  Tensor row = dst.rowwise_data(), col = dst.columnwise_data(), scale_inv = dst.scale_inv();
  OCTET_CHECK(scale_inv.device() == src.device(), "quantize_into: destination on ",
              scale_inv.device(), " but source on ", src.device());
  ops::quantize_fp8(src, scale, row.defined() ? &row : nullptr, col.defined() ? &col : nullptr,
                    amax, counts, &scale_inv);
  dst.bump_version();
}

Float8Tensor& float8_destination(const char* who, QuantizedTensor& dst, DType dtype) {
  OCTET_CHECK(dst.format() == kPerTensorFormat, who, ": destination ", dst.describe(),
              " is not a per-tensor FP8 tensor");
  OCTET_CHECK(dst.dtype() == dtype, who, ": destination ", dst.describe(), " is not ", dtype);
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  auto* f = dynamic_cast<Float8Tensor*>(&dst);
  OCTET_ASSERT(f != nullptr, dst.describe(), " is not a Float8Tensor");
  return *f;
}

// A Float8Tensor of a cast's data, `quantizer` as its maker.
std::shared_ptr<Float8Tensor> made_by(const Quantizer& quantizer, const Shape& shape,
                                      Tensor rowwise, Tensor columnwise, Tensor scale_inv,
                                      Ownership ownership) {
  auto t = std::make_shared<Float8Tensor>(shape, std::move(rowwise), std::move(columnwise),
                                          std::move(scale_inv), ownership);
  t->set_quantizer(ops::quantizer_handle(quantizer));
  return t;
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
  ops::check_quantize_input("DelayedScalingQuantizer::quantize", x);
  ops::check_quantize_usage("DelayedScalingQuantizer::quantize", usage);
  // history[0] as a one-element view: the cast max-accumulates into it in the same pass.
  Tensor newest = amax_history_.slice(0, 1);
  Tensor scale_inv = Tensor::empty({1}, DType::kF32, x.device());
  Cast c =
      cast_per_tensor(x, scale_, dtype_, usage, amax == AmaxRecording::kRecord ? &newest : nullptr,
                      counts_for(amax), &scale_inv);
  return made_by(*this, x.shape(), std::move(c.rowwise), std::move(c.columnwise),
                 std::move(scale_inv), ownership);
}

std::shared_ptr<Float8Tensor> DelayedScalingQuantizer::adopt(const Shape& shape, Tensor rowwise,
                                                             Tensor columnwise,
                                                             Ownership ownership) const {
  return made_by(*this, shape, std::move(rowwise), std::move(columnwise), inverse_of(scale_),
                 ownership);
}

void DelayedScalingQuantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                            AmaxRecording amax) const {
  Float8Tensor& f = float8_destination("DelayedScalingQuantizer::quantize_into", dst, dtype_);
  ops::check_quantize_input("DelayedScalingQuantizer::quantize_into", src, &dst.shape());
  Tensor newest = amax_history_.slice(0, 1);
  requantize_per_tensor(f, src, scale_, amax == AmaxRecording::kRecord ? &newest : nullptr,
                        counts_for(amax));
}

std::shared_ptr<const Quantizer> DelayedScalingQuantizer::frozen() const {
  // The scale as it is now; a scratch history, so nothing the frozen cast sees is recorded.
  Tensor scratch_history = Tensor::zeros({1}, DType::kF32, scale_.device());
  return std::make_shared<DelayedScalingQuantizer>(scale_.clone(), scratch_history, dtype_);
}

std::string DelayedScalingQuantizer::describe() const {
  return std::string("delayed scaling ") + std::string(dtype_name(dtype_));
}

// ---- current scaling ----

CurrentScalingQuantizer::CurrentScalingQuantizer(DType dtype, Power2Scale power_2_scale,
                                                 float amax_epsilon,
                                                 std::shared_ptr<SlotStats> stats)
    : dtype_(dtype),
      power_2_scale_(power_2_scale),
      amax_epsilon_(amax_epsilon),
      stats_(std::move(stats)) {
  OCTET_CHECK(is_fp8(dtype_), "CurrentScalingQuantizer: dtype must be e4m3 or e5m2, got ", dtype_);
  OCTET_CHECK(std::isfinite(amax_epsilon_) && amax_epsilon_ >= 0.f,
              "CurrentScalingQuantizer: amax_epsilon must be finite and >= 0, got ", amax_epsilon_);
}

float CurrentScalingQuantizer::scale_for(float amax) const {
  // The rule shared with the CUDA kernel (runtime/fp8_scaling.h), so both give the same scale.
  return current_scale(amax, fp8_max(dtype_), amax_epsilon_, power_2_scale_ == Power2Scale::kOn);
}

FP8CastCounts* CurrentScalingQuantizer::counts_for(AmaxRecording amax) const {
  return amax == AmaxRecording::kRecord && stats_ ? &stats_->counts : nullptr;
}

void CurrentScalingQuantizer::record_scale(const Tensor& scale_inv, AmaxRecording amax) const {
  // Read on the host only where it lives there: a CUDA cast never waits for its scale.
  if (amax == AmaxRecording::kRecord && stats_ && scale_inv.device().is_cpu()) {
    stats_->scales.add(scale_inv.item());
  }
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
                                                                   AmaxRecording amax) const {
  ops::check_quantize_input("CurrentScalingQuantizer::quantize", x);
  ops::check_quantize_usage("CurrentScalingQuantizer::quantize", usage);
  auto [scale, scale_inv] = scales_for(x);
  // scale_inv comes from current_scale with the scale, so the cast does not write it.
  Cast c = cast_per_tensor(x, scale, dtype_, usage, nullptr, counts_for(amax), nullptr);
  record_scale(scale_inv, amax);
  return made_by(*this, x.shape(), std::move(c.rowwise), std::move(c.columnwise),
                 std::move(scale_inv), ownership);
}

void CurrentScalingQuantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                            AmaxRecording amax) const {
  Float8Tensor& f = float8_destination("CurrentScalingQuantizer::quantize_into", dst, dtype_);
  ops::check_quantize_input("CurrentScalingQuantizer::quantize_into", src, &dst.shape());
  requantize_per_tensor(f, src, scales_for(src).first, nullptr, counts_for(amax));
  record_scale(f.scale_inv(), amax);
}

std::string CurrentScalingQuantizer::describe() const {
  return std::string("current scaling ") + std::string(dtype_name(dtype_));
}

namespace ops {
namespace {

// One f32 scale per tensor; column-wise data is the byte transpose of the row-wise data.
class PerTensorFormat final : public MultipleRuleFormat {
 public:
  PerTensorFormat()
      : MultipleRuleFormat(
            kPerTensorFormat,
            "e4m3/e5m2 values, one f32 scale_inv per tensor; column-wise data is the byte "
            "transpose of the row-wise data",
            8, 16, "per-tensor FP8") {}

  Tensor dequantize(const QuantizedTensor& t, DType dtype) const override {
    const Float8Tensor& f = as_float8(t);
    const bool row = t.has(Usage::kRowwise);
    Tensor out = dequantize_fp8(row ? f.rowwise_data() : f.columnwise_data(), f.scale_inv(), dtype);
    // Column-wise data is (cols, rows): transpose it back to the logical layout.
    if (!row) out = transpose_2d(out);
    return out.reshape(t.shape());
  }

  void make_usage(QuantizedTensor& t, Usage missing, const Tensor*) const override {
    Float8Tensor& f = as_float8(t);
    OCTET_CHECK(!has_usage(missing, Usage::kRowwise), "update_usage of ", t.describe(),
                ": row-wise data cannot be made from column-wise data (per-tensor FP8 keeps the "
                "row-wise data whenever it may be needed; quantize again from high precision)");
    f.set_columnwise_data(transpose_2d(f.rowwise_data().reshape({t.rows(), t.cols()})));
  }

  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options) const override {
    const Float8Tensor& fa = as_float8(a);
    const Float8Tensor& fb = as_float8(b);
    const Tensor da = operand_data(a, fa.rowwise_data(), fa.columnwise_data(), a_usage, layout);
    const Tensor db = operand_data(b, fb.rowwise_data(), fb.columnwise_data(), b_usage, layout);
    GemmOptions g;
    g.bias = options.bias;
    g.accumulate = options.accumulate;
    g.a_scale_inv = &fa.scale_inv();
    g.b_scale_inv = &fb.scale_inv();
    // TE's defaults: the forward GEMM accumulates fast, dgrad and wgrad split (CUDA only).
    g.fp8_accumulation =
        layout == GemmLayout::kFprop ? FP8Accumulation::kFast : FP8Accumulation::kSplit;
    ops::gemm(da, Transpose::kNo, db, Transpose::kYes, out_2d, g);
  }

 private:
  static const Float8Tensor& as_float8(const QuantizedTensor& t) {
    const auto* f = dynamic_cast<const Float8Tensor*>(&t);
    OCTET_ASSERT(f != nullptr, t.describe(),
                 " names the per-tensor format but is not a Float8Tensor");
    return *f;
  }
  static Float8Tensor& as_float8(QuantizedTensor& t) {
    auto* f = dynamic_cast<Float8Tensor*>(&t);
    OCTET_ASSERT(f != nullptr, t.describe(),
                 " names the per-tensor format but is not a Float8Tensor");
    return *f;
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_per_tensor_format() {
  return std::make_shared<PerTensorFormat>();
}

void update_fp8_metas(const std::vector<FP8Meta*>& metas, FP8Direction direction) {
  // One batch for the host's slots and one for the GPU's (one launch there).
  std::vector<detail::SlotUpdate> host, device_slots;
  Device device;
  for (FP8Meta* meta : metas) {
    OCTET_CHECK(meta != nullptr, "update_fp8_metas: null FP8Meta");
    const Recipe& r = meta->recipe();
    for (FP8Slot& s : meta->slots(direction)) {
      const detail::SlotUpdate u{&s, fp8_max(r.dtype(direction)), r.margin, r.amax_compute_algo};
      if (s.scale.device().is_cpu()) {
        host.push_back(u);
        continue;
      }
      OCTET_CHECK(device_slots.empty() || s.scale.device() == device,
                  "update_fp8_metas: FP8 metas on more than one CUDA device (", device, " and ",
                  s.scale.device(), ")");
      device = s.scale.device();
      device_slots.push_back(u);
    }
    meta->count_update(direction);
  }
  if (!host.empty()) detail::on_device(Device::cpu())->update_fp8_slots(host);
  if (!device_slots.empty()) detail::on_device(device)->update_fp8_slots(device_slots);
}

}  // namespace ops
}  // namespace octet
