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
  check_fp8_data_2d(op, data, x);
  OCTET_CHECK(scale_inv.defined() && scale_inv.dtype() == DType::kF32 && scale_inv.shape() == want,
              op, ": scale_inv must be f32", shape_str(want), ", got ", scale_inv);
  detail::quantize_on_device(op, x, data, scale_inv, "scale_inv",
                             [&](const detail::Backend& backend) {
                               backend.quantize_blockwise(x, cast, data, scale_inv, counts);
                             });
}

void quantize_blockwise_both(const Tensor& x, const BlockwiseCast& cast, Tensor& rowwise,
                             Tensor& rowwise_scale_inv, Tensor& columnwise,
                             Tensor& columnwise_scale_inv, FP8CastCounts* counts) {
  constexpr const char* op = "quantize_blockwise_both";
  OCTET_CHECK(cast.blocks == BlockScaling::k1D, op, ": casts 1x128 blocks only");
  check_quantize_input(op, x);
  const int64_t rows = x.rows(), cols = x.cols();
  check_fp8_data_2d(op, rowwise, x);
  OCTET_CHECK(columnwise.defined() && columnwise.dtype() == rowwise.dtype() &&
                  columnwise.rows() == cols && columnwise.cols() == rows,
              op, ": columnwise must be ", rowwise.dtype(), " (", cols, ", ", rows, "), got ",
              columnwise);
  const Shape want_row = blockwise_scale_shape(BlockScaling::k1D, rows, cols);
  const Shape want_col = blockwise_scale_shape(BlockScaling::k1D, cols, rows);
  OCTET_CHECK(rowwise_scale_inv.defined() && rowwise_scale_inv.dtype() == DType::kF32 &&
                  rowwise_scale_inv.shape() == want_row,
              op, ": rowwise_scale_inv must be f32", shape_str(want_row), ", got ",
              rowwise_scale_inv);
  OCTET_CHECK(columnwise_scale_inv.defined() && columnwise_scale_inv.dtype() == DType::kF32 &&
                  columnwise_scale_inv.shape() == want_col,
              op, ": columnwise_scale_inv must be f32", shape_str(want_col), ", got ",
              columnwise_scale_inv);
  const Device device = op_device(op, {{x, "x"},
                                       {rowwise, "rowwise"},
                                       {rowwise_scale_inv, "rowwise_scale_inv"},
                                       {columnwise, "columnwise"},
                                       {columnwise_scale_inv, "columnwise_scale_inv"}});
  on_device(device)->quantize_blockwise_both(x, cast, rowwise, rowwise_scale_inv, columnwise,
                                             columnwise_scale_inv, counts);
  for (Tensor* t : {&rowwise, &rowwise_scale_inv, &columnwise, &columnwise_scale_inv}) {
    t->bump_version();
  }
}

Tensor dequantize_blockwise(const Tensor& data, const Tensor& scale_inv, BlockScaling blocks,
                            DType dtype) {
  constexpr const char* op = "dequantize_blockwise";
  check_fp8_data(op, data);
  const Shape want = blockwise_scale_shape(blocks, data.rows(), data.cols());
  check_dequantize_scales(op, data, scale_inv, "scale_inv", DType::kF32, want);
  check_dequantize_dtype(op, dtype);
  return detail::dequantize_on_device(op, data, scale_inv, "scale_inv", data.shape(), dtype,
                                      [&](const detail::Backend& backend, Tensor& out) {
                                        backend.dequantize_blockwise(data, scale_inv, blocks, out);
                                      });
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

// The other direction of 2D data: the byte transpose and the transposed scales (a tile is the
// same tile of the transpose).
void transpose_direction(BlockwiseFP8Tensor& t, Usage from) {
  const bool row = from == Usage::kRowwise;
  const Tensor& data = t.direction_data(from);
  const Tensor& scales = t.direction_scales(from);
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

class BlockwiseFormat final : public MultipleRuleFormat {
 public:
  // cuBLASLt's block-scaled GEMM reads every operand along K with leading dims % 16 and outer
  // dims % 8; the wgrad GEMM reduces over the token rows, so both dims of every operand are
  // multiples of 16.
  BlockwiseFormat()
      : MultipleRuleFormat(
            kBlockwiseFormat,
            "e4m3/e5m2 values, one f32 scale_inv per 1x128 block (inputs, gradients) or 128x128 "
            "tile (weights), power-of-two by default; 1x128 column-wise data quantized separately "
            "from high precision, 128x128 column-wise data the byte transpose",
            16, 16, "blockwise FP8") {}
  Tensor dequantize(const QuantizedTensor& q, DType dtype) const override {
    const BlockwiseFP8Tensor& t = as_format<BlockwiseFP8Tensor>(q);
    return dequantize_directions(t, [&](const Tensor& data, const Tensor& scale_inv) {
      return dequantize_blockwise(data, scale_inv, t.blocks(), dtype);
    });
  }

  void make_usage(QuantizedTensor& q, Usage missing, const Tensor* source) const override {
    BlockwiseFP8Tensor& t = as_format<BlockwiseFP8Tensor>(q);
    if (t.blocks() == BlockScaling::k2D) {
      transpose_direction(
          t, has_usage(missing, Usage::kColumnwise) ? Usage::kRowwise : Usage::kColumnwise);
      return;
    }
    recast_from_source(t, missing, source, "1x128-blocked");
  }

  void gemm(const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b, Usage b_usage,
            GemmLayout layout, Tensor& out_2d, const FP8GemmOptions& options) const override {
    const BlockwiseFP8Tensor& ta = as_format<BlockwiseFP8Tensor>(a);
    const BlockwiseFP8Tensor& tb = as_format<BlockwiseFP8Tensor>(b);
    OCTET_CHECK(ta.blocks() == BlockScaling::k1D || tb.blocks() == BlockScaling::k1D, "fp8_gemm (",
                gemm_layout_name(layout), "): operands ", a.describe(), " and ", b.describe(),
                " both have 128x128 blocks; 2D by 2D block-scaled GEMMs are not supported");
    blockwise_gemm(operand_data(a, ta.rowwise_data(), ta.columnwise_data(), a_usage, layout),
                   ta.direction_scales(a_usage), ta.blocks(),
                   operand_data(b, tb.rowwise_data(), tb.columnwise_data(), b_usage, layout),
                   tb.direction_scales(b_usage), tb.blocks(), out_2d, options.bias,
                   options.accumulate);
  }
};

}  // namespace

std::shared_ptr<const QuantizedFormat> make_blockwise_format() {
  return std::make_shared<BlockwiseFormat>();
}

}  // namespace ops

BlockwiseQuantizer::BlockwiseQuantizer(DType dtype, BlockScaling blocks, bool power_2_scale,
                                       float amax_epsilon, std::shared_ptr<SlotStats> stats)
    : ScaledTensorQuantizer("BlockwiseQuantizer", "a blockwise", dtype, std::move(stats)) {
  OCTET_CHECK(std::isfinite(amax_epsilon) && amax_epsilon >= 0.f,
              "BlockwiseQuantizer: amax_epsilon must be finite and >= 0, got ", amax_epsilon);
  cast_ = {blocks, fp8_max(dtype_), power_2_scale, amax_epsilon};
}

void BlockwiseQuantizer::cast(const Tensor& x, Usage direction, Tensor& data, Tensor& scale_inv,
                              AmaxRecording amax) const {
  SlotStats* stats = recording(amax);
  FP8CastCounts* counts = stats != nullptr ? &stats->counts : nullptr;
  if (direction == Usage::kRowwise) {
    ops::quantize_blockwise(x, cast_, data, scale_inv, counts);
  } else {
    const Tensor xt = ops::transpose_2d(x.reshape({x.rows(), x.cols()}));
    ops::quantize_blockwise(xt, cast_, data, scale_inv, counts);
  }
  add_scale_spread(stats, scale_inv);
}

void BlockwiseQuantizer::cast_both(const Tensor& x, Tensor& rowwise, Tensor& rowwise_scale_inv,
                                   Tensor& columnwise, Tensor& columnwise_scale_inv,
                                   AmaxRecording amax) const {
  if (cast_.blocks == BlockScaling::k2D) {
    ScaledTensorQuantizer::cast_both(x, rowwise, rowwise_scale_inv, columnwise,
                                     columnwise_scale_inv, amax);
    return;
  }
  SlotStats* stats = recording(amax);
  ops::quantize_blockwise_both(x, cast_, rowwise, rowwise_scale_inv, columnwise,
                               columnwise_scale_inv, stats != nullptr ? &stats->counts : nullptr);
  add_scale_spread(stats, rowwise_scale_inv);
  add_scale_spread(stats, columnwise_scale_inv);
}

std::shared_ptr<ScaledTensor> BlockwiseQuantizer::make_tensor(const Shape& shape, Tensor rowwise,
                                                              Tensor rowwise_scale_inv,
                                                              Tensor columnwise,
                                                              Tensor columnwise_scale_inv,
                                                              Ownership ownership) const {
  return std::make_shared<BlockwiseFP8Tensor>(shape, cast_.blocks, std::move(rowwise),
                                              std::move(rowwise_scale_inv), std::move(columnwise),
                                              std::move(columnwise_scale_inv), ownership);
}

void BlockwiseQuantizer::check_destination(const std::string& who, const ScaledTensor& dst) const {
  OCTET_CHECK(ops::as_format<BlockwiseFP8Tensor>(dst).blocks() == cast_.blocks, who,
              ": destination ", dst.describe(), " has other blocks than this quantizer");
}

std::string BlockwiseQuantizer::describe() const {
  return std::string("blockwise ") + std::string(dtype_name(dtype_)) +
         (cast_.blocks == BlockScaling::k1D ? " 1x128" : " 128x128");
}

}  // namespace octet
