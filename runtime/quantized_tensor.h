// The common base of octet's quantized tensors (per-tensor FP8, MXFP8, ...) and the interface of
// the quantizers that make them (DESIGN.md "FP8 numbers"). Data only: what a format computes
// (dequantize, make a usage, its GEMM, its shape rule) is its entry in the kernels layer's format
// table (kernels/quantized_format.h), found by the name format() returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/saveable.h"
#include "runtime/tensor.h"

namespace octet {

// Which copies of the data a quantized tensor holds, as a bit set. Row-wise data has the logical
// layout; column-wise data is laid out transposed, (last dim, prod(leading dims)), so that every
// FP8 GEMM reads both operands along their last (contiguous) dimension.
enum class Usage : uint8_t { kNone = 0, kRowwise = 1, kColumnwise = 2, kBoth = 3 };

constexpr Usage operator|(Usage a, Usage b) {
  return static_cast<Usage>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}
constexpr Usage operator&(Usage a, Usage b) {
  return static_cast<Usage>(static_cast<uint8_t>(a) & static_cast<uint8_t>(b));
}
// True when every usage in `wanted` is in `set` (kNone is in every set).
constexpr bool has_usage(Usage set, Usage wanted) { return (set & wanted) == wanted; }
std::string_view usage_name(Usage usage);  // "none", "row-wise", "column-wise", "row-wise+..."

// The names of the built-in formats (the keys of their format-table entries).
inline constexpr std::string_view kPerTensorFormat = "per-tensor";  // one f32 scale per tensor
inline constexpr std::string_view kMXFP8Format = "mxfp8";  // one E8M0 exponent per 32 values
// (kBlockwiseFormat and kNVFP4Format live with their tensors.)

// Whether a cast writes |x|'s max into its delayed-scaling slot's history[0]. The module layer
// decides: casts made with gradients disabled pass kSkip so evaluation data never moves training
// scales, and the initial cast of FP8 primary weights passes kSkip (a scratch amax).
enum class AmaxRecording : uint8_t { kRecord, kSkip };

class QuantizedTensor;

// Turns a high-precision tensor into a quantized one. Implementations live in kernels/quantizer.h;
// a quantized tensor keeps a handle on the quantizer that made it so that in-place updates
// (quantize_into, e.g. from the optimizer) use the same scaling.
class Quantizer : public std::enable_shared_from_this<Quantizer> {
 public:
  virtual ~Quantizer() = default;
  // The format of the tensors it makes (a format-table name, e.g. kPerTensorFormat).
  virtual std::string_view format() const = 0;
  virtual DType dtype() const = 0;  // the element dtype of the data (e4m3 or e5m2 for FP8)
  // `x` is f32 or bf16; the result holds exactly `usage` (not kNone), its buffers allocated under
  // the caller's MemTagScope.
  virtual std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage,
                                                    Ownership ownership,
                                                    AmaxRecording amax) const = 0;
  // Requantizes `src` into dst's existing buffers (same usages), bumping dst's version.
  virtual void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const = 0;
  virtual std::string describe() const = 0;  // "delayed e4m3", ... for error messages
  // A quantizer that casts exactly as this one does now and records nothing, whatever later
  // updates do to this one's state (a recompute in backward reproduces the forward's values).
  // Stateless quantizers are their own frozen form.
  virtual std::shared_ptr<const Quantizer> frozen() const { return shared_from_this(); }

  // Whether a linear layer's backward GEMMs take operands its output-gradient quantizer re-casts
  // from the forward's row-wise input and weight (Quartet II) rather than their column-wise
  // casts: true for all three quantizers of such a GEMM, so the forward casts and keeps row-wise
  // data only.
  virtual bool backward_recasts_rowwise() const { return false; }
  struct BackwardOperands {
    std::shared_ptr<QuantizedTensor> dy, x, w;
  };
  // For an output-gradient quantizer that re-casts: dy (.., out) cast for the GEMMs asked (dgrad
  // when `w` is given, wgrad when `x` is), and the forward's x (.., in) and w (out, in) re-cast.
  // Any other quantizer throws.
  virtual BackwardOperands backward_operands(const Tensor& dy, const QuantizedTensor* x,
                                             const QuantizedTensor* w) const;
};

class QuantizedTensor : public Saveable {
 public:
  const Shape& shape() const { return shape_; }  // the logical (high-precision) shape
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t rows() const;                   // prod(leading dims): the 2-D view every kernel uses
  int64_t cols() const;                   // last dim (1 for a 0-d tensor)
  DType dtype() const { return dtype_; }  // the element dtype of the data (e4m3, e5m2, ...)
  Device device() const { return device_; }
  Usage usage() const { return usage_; }  // what is held (kept while a context holds the buffers)
  bool has(Usage wanted) const { return has_usage(usage_, wanted); }
  Ownership ownership() const override { return ownership_; }
  // The format's name: the key of its entry in the format table (kernels/quantized_format.h).
  virtual std::string_view format() const = 0;
  // Bytes of every buffer held (data and scales).
  size_t nbytes() const;
  // Bytes of the buffers held only for `usage` (kRowwise or kColumnwise): its data and the
  // scales that only it reads. A scale both usages share (per-tensor scale_inv) counts in
  // nbytes() only. 0 when the usage is not held.
  virtual size_t nbytes(Usage usage) const = 0;

  // The row-wise data (logical shape; undefined when not held): what forward and inference read,
  // and the autograd leaf of an FP8 primary weight (a handle on the same storage).
  virtual const Tensor& rowwise_data() const = 0;
  // The checkpoint form of the row-wise data: (suffix, tensor) pairs, the data under "" and its
  // scaling under the format's suffixes (".scale_inv", ".scales"). The tensors are handles on the
  // live buffers, so copying bytes into them loads a checkpoint.
  virtual std::vector<std::pair<std::string, Tensor>> rowwise_state() const = 0;
  // The suffixes of rowwise_state() whose every value must be a finite number > 0 (a per-tensor
  // scale_inv), checked before a state dict is loaded; empty for formats whose scales may hold
  // zeros (block padding).
  virtual std::vector<std::string> positive_state() const { return {}; }
  // Drops the usages in `usage`; at least one usage must remain. Bumps the version.
  virtual void drop_usage(Usage usage) = 0;
  // What a reader of a checkpoint needs besides the format's name to read the bytes (e.g. the
  // block shape), as (key, value) pairs; empty for most formats.
  virtual std::vector<std::pair<std::string, std::string>> attributes() const { return {}; }
  // Every buffer held now (data and scales), e.g. for version checks of saved tensors.
  std::vector<Tensor> held_tensors() const override;
  // Moves every buffer held to `device` in place (Storage::move_to): handles sharing them follow.
  void move_to(Device device);

  // The quantizer that made this tensor (null when built from raw buffers).
  const std::shared_ptr<const Quantizer>& quantizer() const { return quantizer_; }
  void set_quantizer(std::shared_ptr<const Quantizer> quantizer) {
    quantizer_ = std::move(quantizer);
  }

  // Bumped by every in-place change of the data (quantize_into), like Tensor::version().
  uint64_t version() const override { return version_; }
  void bump_version() { ++version_; }

  // True while a save-for-backward context holds the buffers (between take and give).
  bool buffers_taken() const { return taken_; }

  // "e4m3 per-tensor (16, 64) row-wise+column-wise internal" for messages.
  std::string describe() const;

 protected:
  // Every buffer held (data, scales, scale_inv; undefined entries allowed), for move_to.
  virtual std::vector<Tensor> held_buffers() const = 0;
  QuantizedTensor(Shape shape, DType dtype, Usage usage, Ownership ownership, Device device);
  // Throws a clear error when the buffers are with a context (accessing data would crash).
  void check_buffers_present(const char* what) const;
  // take_buffers / give_buffers are for internal tensors only, in that order.
  void begin_take();
  void begin_give(size_t got, size_t want);
  void set_usage(Usage usage) { usage_ = usage; }

 private:
  Shape shape_;
  DType dtype_;
  Usage usage_;
  Ownership ownership_;
  Device device_;
  std::shared_ptr<const Quantizer> quantizer_;
  uint64_t version_ = 0;
  bool taken_ = false;
};

}  // namespace octet
