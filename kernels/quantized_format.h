// The format table: everything that differs between quantized formats (per-tensor FP8, MXFP8,
// and any format added later, in the library or in a test) behind one interface, found by the
// name a QuantizedTensor's format() returns. The generic operations in kernels/quantized.h
// (dequantize, update_usage, fp8_gemm, the shape rule) only look a format up and call it, so a
// new format is one entry here, never a branch to add elsewhere (docs/dev/adding-a-recipe.md).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/quantized.h"
#include "runtime/quantized_tensor.h"

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

// ---- for formats' quantizers ----
// x is defined, f32 or bf16 (and of `shape` when given); `who` names the caller.
void check_quantize_input(const char* who, const Tensor& x, const Shape* shape = nullptr);
// Not kNone.
void check_quantize_usage(const char* who, Usage usage);
// The shared_ptr that owns `q`, or null when none does (the tensor then has no quantizer and
// quantize_into on it says so).
std::shared_ptr<const Quantizer> quantizer_handle(const Quantizer& q);

}  // namespace octet::ops
