// The format table: registration and look-up.
#include "kernels/quantized_format.h"

#include <mutex>

#include "kernels/rowwise.h"
#include "runtime/error.h"

namespace octet::ops {
namespace {

struct Table {
  std::mutex mutex;
  std::vector<std::shared_ptr<const QuantizedFormat>> formats;
};

// Built on first use with the built-in formats, so no static-initialisation order matters.
Table& table() {
  static Table* t = [] {
    auto* fresh = new Table;
    fresh->formats = {make_per_tensor_format(), make_mxfp8_format(), make_blockwise_format(),
                      make_nvfp4_format(), make_rowwise_format()};
    return fresh;
  }();
  return *t;
}

std::string joined_names(const Table& t) {
  std::string out;
  for (const auto& f : t.formats) out += (out.empty() ? "" : ", ") + std::string(f->name());
  return out;
}

}  // namespace

const QuantizedFormat& quantized_format(std::string_view name) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& f : t.formats) {
    if (f->name() == name) return *f;
  }
  OCTET_FAIL("unknown quantized format \"", name, "\" (registered: ", joined_names(t), ")");
}

const QuantizedFormat& format_of(const QuantizedTensor& t) { return quantized_format(t.format()); }

void register_quantized_format(std::shared_ptr<const QuantizedFormat> format) {
  OCTET_CHECK(format != nullptr, "register_quantized_format: null format");
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& f : t.formats) {
    OCTET_CHECK(f->name() != format->name(), "register_quantized_format: a format named \"",
                format->name(), "\" is already registered");
  }
  t.formats.push_back(std::move(format));
}

std::vector<std::string> quantized_format_names() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<std::string> out;
  for (const auto& f : t.formats) out.emplace_back(f->name());
  return out;
}

Tensor operand_data(const QuantizedTensor& t, const Tensor& rowwise, const Tensor& columnwise,
                    Usage usage, GemmLayout layout) {
  OCTET_ASSERT(t.has(usage), "fp8_gemm (", gemm_layout_name(layout), "): operand ", t.describe(),
               " lacks ", usage_name(usage), " data");
  return usage == Usage::kRowwise ? rowwise.reshape({t.rows(), t.cols()}) : columnwise;
}

std::string multiple_rule_violation(const Shape& shape, int64_t row_multiple, int64_t col_multiple,
                                    std::string_view what) {
  const int64_t rows = shape.empty() ? 1 : shape_numel(Shape(shape.begin(), shape.end() - 1));
  const int64_t cols = shape.empty() ? 1 : shape.back();
  if (rows % row_multiple == 0 && cols % col_multiple == 0) return "";
  const std::string r = std::to_string(row_multiple), c = std::to_string(col_multiple);
  const std::string rule =
      row_multiple == col_multiple
          ? "prod(leading dims) and the last dim to be multiples of " + r
          : "prod(leading dims) % " + r + " == 0 and last dim % " + c + " == 0";
  return std::string(what) + " GEMMs need " + rule + " (" + std::to_string(rows) + " % " + r +
         " = " + std::to_string(rows % row_multiple) + ", " + std::to_string(cols) + " % " + c +
         " = " + std::to_string(cols % col_multiple) + ")";
}

void check_quantize_input(const char* who, const Tensor& x, const Shape* shape) {
  OCTET_CHECK(x.defined(), who, ": input is an undefined tensor");
  OCTET_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, who,
              ": input must be f32 or bf16, got ", x);
  if (shape != nullptr) {
    OCTET_CHECK(x.shape() == *shape, who, ": source ", x, " must have the destination's shape ",
                shape_str(*shape));
  }
}

void check_quantize_usage(const char* who, Usage usage) {
  OCTET_CHECK(usage != Usage::kNone, who, ": asked for no usage (row-wise and/or column-wise)");
}

std::shared_ptr<const Quantizer> quantizer_handle(const Quantizer& q) {
  return q.weak_from_this().lock();
}

}  // namespace octet::ops
