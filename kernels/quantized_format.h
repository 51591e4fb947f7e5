// The format table: everything that differs between quantized formats (per-tensor FP8, MXFP8,
// and any format added later, in the library or in a test) behind one interface, found by the
// name a QuantizedTensor's format() returns. The generic operations in kernels/quantized.h
// (dequantize, update_usage, fp8_gemm, the shape rule) only look a format up and call it, so a
// new format is one entry here, never a branch to add elsewhere (docs/dev/adding-a-recipe.md).
// Below the table: what the formats' entries, ops and quantizers share.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/quantized.h"
#include "runtime/error.h"
#include "runtime/fp8_stats.h"
#include "runtime/quantized_tensor.h"
#include "runtime/scaled_tensor.h"

namespace octet::ops {

class QuantizedFormat {
 public:
  virtual ~QuantizedFormat() = default;

  // The key of the entry: what the format's tensors and quantizers return from format().
  virtual std::string_view name() const = 0;
  // One line for `octet inspect` and messages: how values and scales are laid out.
  virtual std::string layout() const = 0;

  // The GEMM shape rule for one operand of logical `shape`: empty when the shape satisfies it,
  // else the rule and how the shape breaks it ("per-tensor FP8 GEMMs need ... (20 % 16 = 4)").
  virtual std::string shape_violation(const Shape& shape) const = 0;
  // The multiple of rows (prod(leading dims)) every operand needs; a model pads token rows to it.
  virtual int64_t row_multiple() const = 0;

  // `t` in high precision (f32 or bf16), logical shape, from row-wise data when held, else from
  // column-wise data. The buffers are present (checked by the caller).
  virtual Tensor dequantize(const QuantizedTensor& t, DType dtype) const = 0;
  // Adds the usages in `missing` (not kNone, none of them held) to `t`, allocating under the
  // caller's MemTagScope. `source` is the high-precision tensor `t` was made from, or null; a
  // format that cannot make a usage from the data it holds needs it, and throws a clear error
  // without it.
  virtual void make_usage(QuantizedTensor& t, Usage missing, const Tensor* source) const = 0;
  // out_2d (M, N) = A·Bᵀ (+ bias, accumulate per options), accumulated in f32: A is a's
  // `a_usage` data viewed as (M, K), B is b's `b_usage` data viewed as (N, K), both read along K.
  // Operands have this format (checked by the caller), shapes and usages are checked; a pairing
  // the format cannot multiply (e.g. two 2-D block-scaled operands) is the format's error.
  virtual void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b,
                    Usage b_usage, GemmLayout layout, Tensor& out_2d,
                    const FP8GemmOptions& options) const = 0;
};

// The entry for `name`; an unknown name is an error that lists the registered formats.
const QuantizedFormat& quantized_format(std::string_view name);
// The entry of t's format.
const QuantizedFormat& format_of(const QuantizedTensor& t);
// Adds a format (e.g. one defined by a test or an application). Its name must be new.
void register_quantized_format(std::shared_ptr<const QuantizedFormat> format);
// Every registered name, in registration order (the built-in formats first).
std::vector<std::string> quantized_format_names();

// The built-in entries (kernels/fp8_per_tensor.cpp, mxfp8.cpp, blockwise.cpp, nvfp4.cpp).
std::shared_ptr<const QuantizedFormat> make_per_tensor_format();
std::shared_ptr<const QuantizedFormat> make_mxfp8_format();
std::shared_ptr<const QuantizedFormat> make_blockwise_format();
std::shared_ptr<const QuantizedFormat> make_nvfp4_format();

// For formats: the stored 2-D operand (rows, K) of a usage — row-wise data viewed as
// (rows, cols), or the column-wise data, which is stored (cols, rows) already (fp8_gemm has
// checked that the usage is held).
Tensor operand_data(const QuantizedTensor& t, const Tensor& rowwise, const Tensor& columnwise,
                    Usage usage, GemmLayout layout);

// The common shape rule "rows (prod(leading dims)) a multiple of `row_multiple`, the last dim a
// multiple of `col_multiple`" as a shape_violation: empty when `shape` keeps it, else
// "<what> GEMMs need ... (rows % r = x, cols % c = y)".
std::string multiple_rule_violation(const Shape& shape, int64_t row_multiple, int64_t col_multiple,
                                    std::string_view what);

// ---- for formats' entries ----
// The base of an entry whose GEMM shape rule is multiple_rule_violation's with these multiples
// (`what` names the format in the rule's message); `name` and `layout` are its name() and
// layout().
class MultipleRuleFormat : public QuantizedFormat {
 public:
  std::string_view name() const final { return name_; }
  std::string layout() const final { return std::string(layout_); }
  std::string shape_violation(const Shape& shape) const final {
    return multiple_rule_violation(shape, row_multiple_, col_multiple_, what_);
  }
  int64_t row_multiple() const final { return row_multiple_; }

 protected:
  MultipleRuleFormat(std::string_view name, std::string_view layout, int64_t row_multiple,
                     int64_t col_multiple, std::string_view what)
      : name_(name),
        layout_(layout),
        row_multiple_(row_multiple),
        col_multiple_(col_multiple),
        what_(what) {}

 private:
  std::string_view name_, layout_;
  int64_t row_multiple_, col_multiple_;
  std::string_view what_;
};

// `t` as its format's tensor class T: a tensor that names the format but is of another class is
// a bug.
template <class T>
const T& as_format(const QuantizedTensor& t) {
  const auto* f = dynamic_cast<const T*>(&t);
  OCTET_ASSERT(f != nullptr, t.describe(), " names the ", t.format(), " format but is not one");
  return *f;
}
template <class T>
T& as_format(QuantizedTensor& t) {
  return const_cast<T&>(as_format<T>(static_cast<const QuantizedTensor&>(t)));
}

// make_usage of a format whose directions are each cast from high precision: `source` is given,
// else an error that names the data (`what`: "MXFP8", "1x128-blocked", ...).
void check_recast_source(const QuantizedTensor& t, Usage missing, const Tensor* source,
                         std::string_view what);
// Adds the directions in `missing` to `t` from a fresh cast of `source` by t's quantizer, which
// casts exactly as it did (no state); an error without a source or a quantizer.
void recast_from_source(ScaledTensor& t, Usage missing, const Tensor* source,
                        std::string_view what);

// dequantize of a ScaledTensor format: `expand(data (rows, cols), scales)` gives stored data's
// values; from the row-wise data when held, else the column-wise data (cols, rows) transposed.
template <class Expand>
Tensor dequantize_directions(const ScaledTensor& t, Expand&& expand) {
  if (t.has(Usage::kRowwise)) {
    return expand(t.rowwise_data().reshape({t.rows(), t.cols()}), t.rowwise_scales())
        .reshape(t.shape());
  }
  return transpose_2d(expand(t.columnwise_data(), t.columnwise_scales())).reshape(t.shape());
}

// The gemm of a format whose values expand to FP8 value times scale: `expand(data, scales,
// dtype)` each operand's stored data, then one GEMM accumulating in f32.
void expanded_gemm(const ScaledTensor& a, Usage a_usage, const ScaledTensor& b, Usage b_usage,
                   GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options,
                   Tensor (*expand)(const Tensor& data, const Tensor& scales, DType dtype));

// The base of an entry for tensors of class T whose stored data expand to their values by
// kExpand(data, scales, dtype) (dequantize_mxfp8, dequantize_rowwise): dequantize is
// dequantize_directions and gemm expanded_gemm with it.
template <class T, Tensor (*kExpand)(const Tensor&, const Tensor&, DType)>
class ExpandedFormat : public MultipleRuleFormat {
 public:
  Tensor dequantize(const QuantizedTensor& t, DType dtype) const final {
    return dequantize_directions(as_format<T>(t), [&](const Tensor& data, const Tensor& scales) {
      return kExpand(data, scales, dtype);
    });
  }
  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options) const final {
    expanded_gemm(as_format<T>(a), a_usage, as_format<T>(b), b_usage, layout, out_2d, options,
                  kExpand);
  }

 protected:
  using MultipleRuleFormat::MultipleRuleFormat;
};

// ---- for formats' ops ----
// data is defined and e4m3 or e5m2.
void check_fp8_data(const char* who, const Tensor& data);
// The scales of a dequantization's data (`name`: "scale_inv", "exponents"): defined, of `dtype`
// and of shape `want`.
void check_dequantize_scales(const char* who, const Tensor& data, const Tensor& scales,
                             const char* name, DType dtype, const Shape& want);
// data is e4m3 or e5m2 of x's 2-D shape (rows, cols).
void check_fp8_data_2d(const char* who, const Tensor& data, const Tensor& x);
// What a dequantization makes: f32 or bf16.
void check_dequantize_dtype(const char* who, DType dtype);

// ---- for formats' quantizers ----
// x is defined, f32 or bf16 (and of `shape` when given); `who` names the caller.
void check_quantize_input(const char* who, const Tensor& x, const Shape* shape = nullptr);
// Not kNone.
void check_quantize_usage(const char* who, Usage usage);
// The shared_ptr that owns `q`, or null when none does (the tensor then has no quantizer and
// quantize_into on it says so).
std::shared_ptr<const Quantizer> quantizer_handle(const Quantizer& q);

}  // namespace octet::ops

namespace octet {

// The base of the stateless quantizers of ScaledTensor formats whose directions are each cast
// from high precision (MXFP8, blockwise FP8, row-wise FP8): quantize allocates each asked
// direction's data and scales and casts them, quantize_into casts each held direction into its
// buffers; both directions go through cast_both. A subclass gives the cast, the scales' shape and
// dtype and the tensor's construction.
class ScaledTensorQuantizer : public Quantizer {
 public:
  DType dtype() const override { return dtype_; }
  std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage, Ownership ownership,
                                            AmaxRecording amax) const override;
  void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const override;

 protected:
  // `name` ("MXFP8Quantizer") and `kind` ("an MXFP8") for messages; `dtype` e4m3 or e5m2;
  // `stats`: where amax-recording casts add their counts and scales (null: nowhere).
  ScaledTensorQuantizer(const char* name, const char* kind, DType dtype,
                        std::shared_ptr<SlotStats> stats);

  // One direction of x into data and scales as stored: row-wise data in x's shape, column-wise
  // data (cols, rows), the cast of x's transpose.
  virtual void cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scales,
                    AmaxRecording amax) const = 0;
  // Both directions of x, as cast() makes each: here cast() twice; a format that casts both
  // from one read of x overrides it.
  virtual void cast_both(const Tensor& x, Tensor& rowwise, Tensor& rowwise_scales,
                         Tensor& columnwise, Tensor& columnwise_scales, AmaxRecording amax) const;
  // The scales of data stored (rows, cols).
  virtual Shape scale_shape(int64_t rows, int64_t cols) const = 0;
  virtual DType scale_dtype() const = 0;
  virtual std::shared_ptr<ScaledTensor> make_tensor(const Shape& shape, Tensor rowwise,
                                                    Tensor rowwise_scales, Tensor columnwise,
                                                    Tensor columnwise_scales,
                                                    Ownership ownership) const = 0;
  // quantize_into's checks of its destination beyond format, dtype and shape.
  virtual void check_destination(const std::string& /*who*/, const ScaledTensor& /*dst*/) const {}

  // The slot's statistics when `amax` records and there are any, else null.
  SlotStats* recording(AmaxRecording amax) const {
    return amax == AmaxRecording::kRecord ? stats_.get() : nullptr;
  }
  // The spread of the scales a cast chose (f32 scale_inv, or e8m0 exponents as their powers of
  // two) added to stats->scales; nothing when stats is null or the scales are not on the host
  // (a GPU cast never waits for them). Zeros are skipped: blockwise FP8's layout padding (no
  // cast chooses a zero scale).
  static void add_scale_spread(SlotStats* stats, const Tensor& scales);

  DType dtype_;

 private:
  std::shared_ptr<SlotStats> stats_;
  const char* name_;
  const char* kind_;
};

}  // namespace octet
