// The common base of octet's quantized tensors (per-tensor FP8, MXFP8) and the interface of the
// quantizers that make them (DESIGN.md "FP8 numbers"). Data only: the kernels layer computes.
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

enum class ScalingMode : uint8_t {
  kPerTensor,  // one f32 scale per tensor (delayed or current scaling)
  kMXFP8,      // one E8M0 exponent per block of 32 values
};
std::string_view scaling_mode_name(ScalingMode mode);  // "per-tensor", "mxfp8"

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
  virtual ScalingMode scaling_mode() const = 0;
  virtual DType dtype() const = 0;  // e4m3 or e5m2
  // `x` is f32 or bf16; the result holds exactly `usage` (not kNone), its buffers allocated under
  // the caller's MemTagScope.
  virtual std::shared_ptr<QuantizedTensor> quantize(const Tensor& x, Usage usage,
                                                    Ownership ownership,
                                                    AmaxRecording amax) const = 0;
  // Requantizes `src` into dst's existing buffers (same usages), bumping dst's version.
  virtual void quantize_into(QuantizedTensor& dst, const Tensor& src, AmaxRecording amax) const = 0;
  virtual std::string describe() const = 0;  // "delayed e4m3", ... for error messages
};

class QuantizedTensor : public Saveable {
 public:
  const Shape& shape() const { return shape_; }  // the logical (high-precision) shape
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t rows() const;                   // prod(leading dims): the 2-D view every kernel uses
  int64_t cols() const;                   // last dim (1 for a 0-d tensor)
  DType dtype() const { return dtype_; }  // the FP8 format of the data
  Device device() const { return device_; }
  Usage usage() const { return usage_; }  // what is held (kept while a context holds the buffers)
  bool has(Usage wanted) const { return has_usage(usage_, wanted); }
  Ownership ownership() const override { return ownership_; }
  virtual ScalingMode scaling_mode() const = 0;
  // Bytes of every buffer held (data and scales).
  virtual size_t nbytes() const = 0;
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
  // Every buffer held (data, scales, scale_inv), for move_to.
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
