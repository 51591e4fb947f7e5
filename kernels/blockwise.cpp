// Blockwise FP8: argument checks and dispatch of its ops, the quantizer, the format entry.
#include "kernels/blockwise.h"

#include <cmath>

#include "kernels/device_policy.h"
#include "kernels/quantized_format.h"
#include "runtime/memory.h"

namespace octet {
namespace ops {

using detail::on_device;
using detail::op_device;

void quantize_blockwise(const Tensor& x, const BlockwiseCast& cast, Tensor& data, Tensor& scale_inv,
                        FP8CastCounts* counts) {
  constexpr const char* op = "quantize_blockwise";
  check_quantize_input(op, x);
  const Shape want = blockwise_scale_shape(cast.blocks, x.rows(), x.cols());
  OCTET_CHECK(
      data.defined() && is_fp8(data.dtype()) && data.rows() == x.rows() && data.cols() == x.cols(),
      op, ": data must be e4m3 or e5m2 of x's 2-D shape (", x.rows(), ", ", x.cols(), "), got ",
      data);
  OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kF32 && scale_inv.shape() == want,
              op, ": scale_inv must be f32", shape_str(want), ", got ", scale_inv);
  const Device device = op_device(op, {{x, "x"}, {data, "data"}, {scale_inv, "scale_inv"}});
  on_device(device)->quantize_blockwise(x, cast, data, scale_inv, counts);
  data.bump_version();
  scale_inv.bump_version();
}

Tensor dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                            DType dtype) {
  constexpr const char* op = "dequantize_blockwise";
  OCTET_CHECK(data.defined() && is_fp8(data.dtype()), op, ": data must be e4m3 or e5m2, got ",
              data);
  const Shape want = blockwise_scale_shape(blocks, data.rows(), data.cols());
  OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kF32 && scale_inv.shape() == want,
              op, ": scale_inv for data ", data, " must be f32", shape_str(want), ", got ",
              scale_inv);
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, op,
              ": output dtype must be f32 or bf16, got ", dtype);
  const Device device = op_device(op, {{data, "data"}, {scale_inv, "scale_inv"}});
  Tensor out = Tensor::empty(data.shape(), dtype, device);
  on_device(device)->dequantize_blockwise(data, scale_inv, blocks, out);
  return out;
}

void blockwise_gemm(const Tensor& a, const Tensor& a_scale_inv, BlockScaling a_blocks,
                    const Tensor& b, const Tensor& b_scale_inv, BlockScaling b_blocks, Tensor& out,
                    const Tensor* bias, Accumulate accumulate) {
  constexpr const char* op = "blockwise_gemm";
  OCTET_CHECK(a_blocks == BlockScaling::k1D || b_blocks == BlockScaling::k1D, op,
              ": both operands have 128x128 blocks; a block-scaled GEMM needs at least one with "
              "1x128 blocks (2D by 2D is not supported, as in TE)");
  OCTET_CHECK(a.dim() == 2 && b.dim() == 2 && a.cols() == b.cols(), op, ": A ", a, " and B ", b,
              " must be 2-D with the same K (last dim)");
  OCTET_CHECK(out.dim() == 2 && out.size(0) == a.rows() && out.size(1) == b.rows(), op,
              ": out must be (", a.rows(), ", ", b.rows(), "), got ", out);
  OCTET_CHECK(a_scale_inv.shape() == blockwise_scale_shape(a_blocks, a.rows(), a.cols()) &&
                  b_scale_inv.shape() == blockwise_scale_shape(b_blocks, b.rows(), b.cols()),
              op, ": scale_inv shapes ", shape_str(a_scale_inv.shape()), " and ",
              shape_str(b_scale_inv.shape()), " do not fit A ", a, " and B ", b);
  OCTET_CHECK(bias == nullptr || (bias->dim() == 1 && bias->numel() == b.rows()), op,
              ": bias must be (", b.rows(), ",)");
  const Device device = op_device(op, {{a, "a"}, {b, "b"}, {out, "out"}});
  on_device(device)->blockwise_gemm(a, a_scale_inv, a_blocks, b, b_scale_inv, b_blocks, out, bias,
                                    accumulate);
  out.bump_version();
}

namespace {

const BlockwiseFP8Tensor& as_blockwise(const QuantizedTensor& t) {
  const auto* b = dynamic_cast<const BlockwiseFP8Tensor*>(&t);
  OCTET_ASSERT(b != nullptr, t.describe(), " names the blockwise format but is not one");
  return *b;
}
BlockwiseFP8Tensor& as_blockwise(QuantizedTensor& t) {
  auto* b = dynamic_cast<BlockwiseFP8Tensor*>(&t);
  OCTET_ASSERT(b != nullptr, t.describe(), " names the blockwise format but is not one");
  return *b;
}

// The other direction of 2D data: the byte transpose and the transposed scales (a tile is the
// same tile of the transpose).
void transpose_direction(BlockwiseFP8Tensor& t, Usage from) {
  const bool row = from == Usage::kRowwise;
  const Tensor& data = row ? t.rowwise_data() : t.columnwise_data();
  const Tensor& scales = row ? t.rowwise_scales() : t.columnwise_scales();
  const int64_t r = data.rows(), c = data.cols();
  Tensor out_scales =
      Tensor::empty(blockwise_scale_shape(BlockScaling::k2D, c, r), DType::kF32, t.device());
  const int64_t rb = (r + kFP8BlockLen - 1) / kFP8BlockLen,
                cb = (c + kFP8BlockLen - 1) / kFP8BlockLen;
  detail::on_device(t.device())->transpose_scales(scales, rb, cb, out_scales);
  Tensor out = transpose_2d(data.reshape({r, c}));
  if (row) {
    t.set_direction(Usage::kColumnwise, std::move(out), std::move(out_scales));
  } else {
    t.set_direction(Usage::kRowwise, out.reshape(t.shape()), std::move(out_scales));
  }
}

class BlockwiseFormat final : public QuantizedFormat {
 public:
  std::string_view name() const override { return kBlockwiseFormat; }
  std::string layout() const override {
    return "e4m3/e5m2 values, one f32 scale_inv per 1x128 block (inputs, gradients) or 128x128 "
           "tile (weights), power-of-two by default; 1x128 column-wise data quantized separately "
           "from high precision, 128x128 column-wise data the byte transpose";
  }
  // cuBLASLt's block-scaled GEMM reads every operand along K with leading dims % 16 and outer
  // dims % 8; the wgrad GEMM reduces over the token rows, so both dims of every operand are
  // multiples of 16.
  std::string shape_violation(const Shape& shape) const override {
    return multiple_rule_violation(shape, 16, 16, "blockwise FP8");
  }
  int64_t row_multiple() const override { return 16; }

  Tensor dequantize(const QuantizedTensor& q, DType dtype) const override {
    const BlockwiseFP8Tensor& t = as_blockwise(q);
    if (t.has(Usage::kRowwise)) {
      return dequantize_blockwise(t.rowwise_data().reshape({t.rows(), t.cols()}),
                                  t.rowwise_scales(), t.blocks(), dtype)
          .reshape(t.shape());
    }
    return transpose_2d(
               dequantize_blockwise(t.columnwise_data(), t.columnwise_scales(), t.blocks(), dtype))
        .reshape(t.shape());
  }

  void make_usage(QuantizedTensor& q, Usage missing, const Tensor* source) const override {
    BlockwiseFP8Tensor& t = as_blockwise(q);
    if (t.blocks() == BlockScaling::k2D) {
      transpose_direction(
          t, has_usage(missing, Usage::kColumnwise) ? Usage::kRowwise : Usage::kColumnwise);
      return;
    }
    OCTET_CHECK(source != nullptr, "update_usage of ", t.describe(), ": 1x128-blocked ",
                usage_name(missing),
                " data is quantized from high precision and cannot be made from the other "
                "direction; pass the f32/bf16 source (e.g. the master weight)");
    OCTET_CHECK(t.quantizer() != nullptr, "update_usage of ", t.describe(),
                ": making a direction from the source needs the tensor's quantizer");
    // The quantizer casts exactly as it did (no state): a fresh cast of the source.
    auto fresh = t.quantizer()->quantize(*source, missing, t.ownership(), AmaxRecording::kSkip);
    const BlockwiseFP8Tensor& f = as_blockwise(*fresh);
    for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
      if (!has_usage(missing, d)) continue;
      const bool row = d == Usage::kRowwise;
      t.set_direction(d, row ? f.rowwise_data() : f.columnwise_data(),
                      row ? f.rowwise_scales() : f.columnwise_scales());
    }
  }

  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options) const override {
    const BlockwiseFP8Tensor& ta = as_blockwise(a);
    const BlockwiseFP8Tensor& tb = as_blockwise(b);
    OCTET_CHECK(ta.blocks() == BlockScaling::k1D || tb.blocks() == BlockScaling::k1D, "fp8_gemm (",
                gemm_layout_name(layout), "): operands ", a.describe(), " and ", b.describe(),
                " both have 128x128 blocks; 2D by 2D block-scaled GEMMs are not supported");
    const bool a_row = a_usage == Usage::kRowwise, b_row = b_usage == Usage::kRowwise;
    blockwise_gemm(operand_data(a, ta.rowwise_data(), ta.columnwise_data(), a_usage, layout),
                   a_row ? ta.rowwise_scales() : ta.columnwise_scales(), ta.blocks(),
                   operand_data(b, tb.rowwise_data(), tb.columnwise_data(), b_usage, layout),
                   b_row ? tb.rowwise_scales() : tb.columnwise_scales(), tb.blocks(), out_2d,
                   options.bias, options.accumulate);
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_blockwise_format() {
  return std::make_shared<BlockwiseFormat>();
}

}  // namespace ops

BlockwiseQuantizer::BlockwiseQuantizer(DType dtype, BlockScaling blocks, bool power_2_scale,
                                       float amax_epsilon, std::shared_ptr<SlotStats> stats)
    : dtype_(dtype), stats_(std::move(stats)) {
  OCTET_CHECK(is_fp8(dtype_), "BlockwiseQuantizer: dtype must be e4m3 or e5m2, got ", dtype_);
  OCTET_CHECK(std::isfinite(amax_epsilon) && amax_epsilon >= 0.f,
              "BlockwiseQuantizer: amax_epsilon must be finite and >= 0, got ", amax_epsilon);
  cast_ = {blocks, fp8_max(dtype_), power_2_scale, amax_epsilon};
}

void BlockwiseQuantizer::cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scale_inv,
                              AmaxRecording amax) const {
  const bool record = amax == AmaxRecording::kRecord && stats_ != nullptr;
  if (direction == Usage::kRowwise) {
    ops::quantize_blockwise(x, cast_, data, scale_inv, record ? &stats_->counts : nullptr);
  } else {
    const Tensor xt = ops::transpose_2d(x.reshape({x.rows(), x.cols()}));
    ops::quantize_blockwise(xt, cast_, data, scale_inv, record ? &stats_->counts : nullptr);
  }
  // The spread of the scales this cast chose (the tiny scale tensor, read on the host).
  if (record && scale_inv.device().is_cpu()) {
    const float* s = scale_inv.data_as<float>();
    for (int64_t i = 0; i < scale_inv.numel(); ++i) {
      if (s[i] != 0.f) stats_->scales.add(s[i]);  // 0: the layout's padding
    }
  }
}

std::shared_ptr<QuantizedTensor> BlockwiseQuantizer::quantize(const Tensor& x, Usage usage,
                                                              Ownership ownership,
                                                              AmaxRecording amax) const {
  ops::check_quantize_input("BlockwiseQuantizer::quantize", x);
  ops::check_quantize_usage("BlockwiseQuantizer::quantize", usage);
  const int64_t rows = x.rows(), cols = x.cols();
  Tensor row, row_s, col, col_s;
  if (has_usage(usage, Usage::kRowwise)) {
    row = Tensor::empty(x.shape(), dtype_, x.device());
    row_s = Tensor::empty(blockwise_scale_shape(cast_.blocks, rows, cols), DType::kF32, x.device());
    cast(x, Usage::kRowwise, row, row_s, amax);
  }
  if (has_usage(usage, Usage::kColumnwise)) {
    col = Tensor::empty({cols, rows}, dtype_, x.device());
    col_s = Tensor::empty(blockwise_scale_shape(cast_.blocks, cols, rows), DType::kF32, x.device());
    cast(x, Usage::kColumnwise, col, col_s, amax);
  }
  auto t = std::make_shared<BlockwiseFP8Tensor>(x.shape(), cast_.blocks, std::move(row),
                                                std::move(row_s), std::move(col), std::move(col_s),
                                                ownership);
  t->set_quantizer(ops::quantizer_handle(*this));
  return t;
}

void BlockwiseQuantizer::quantize_into(QuantizedTensor& dst, const Tensor& src,
                                       AmaxRecording amax) const {
  constexpr const char* who = "BlockwiseQuantizer::quantize_into";
  OCTET_CHECK(dst.format() == kBlockwiseFormat && dst.dtype() == dtype_, who, ": destination ",
              dst.describe(), " is not a blockwise ", dtype_, " tensor");
  OCTET_CHECK(!dst.buffers_taken(), who, ": destination ", dst.describe(),
              " has its buffers with a save-for-backward context");
  ops::check_quantize_input(who, src, &dst.shape());
  auto& t = dynamic_cast<BlockwiseFP8Tensor&>(dst);
  OCTET_CHECK(t.blocks() == cast_.blocks, who, ": destination ", dst.describe(),
              " has other blocks than this quantizer");
  for (Usage d : {Usage::kRowwise, Usage::kColumnwise}) {
    if (!t.has(d)) continue;
    const bool row = d == Usage::kRowwise;
    Tensor data = row ? t.rowwise_data() : t.columnwise_data();
    Tensor scales = row ? t.rowwise_scales() : t.columnwise_scales();
    if (row) data = data.reshape({t.rows(), t.cols()});
    cast(src, d, data, scales, amax);
  }
  dst.bump_version();
}

std::string BlockwiseQuantizer::describe() const {
  return std::string("blockwise ") + std::string(dtype_name(dtype_)) +
         (cast_.blocks == BlockScaling::k1D ? " 1x128" : " 128x128");
}

}  // namespace octet
