// The health a slot's casts leave behind, for metrics: what saturated and flushed (FP8CastCounts),
// and for block-scaled formats the spread of the block scales they chose (more than min and max,
// as TransformerEngine's users asked in github.com/NVIDIA/TransformerEngine/issues/2801): log2
// of each block's dequantization scale, bucketed in 1/8 octave (exact for the power-of-two scales
// of MXFP8 and blockwise FP8), with the exact extremes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "runtime/fp8.h"
#include "runtime/tensor.h"

namespace octet {

class BlockScaleSpread {
 public:
  static constexpr int kBucketsPerOctave = 8;

  // One block's dequantization scale (positive and finite; others are ignored).
  void add(float scale_inv);
  void merge(const BlockScaleSpread& other);
  // Blocks bucketed elsewhere (a device's count): per bucket (floor(8 log2 scale)) its blocks,
  // and the extreme scales among them (positive and finite). Empty buckets give an empty spread.
  static BlockScaleSpread from_buckets(std::map<int, int64_t> buckets, float min_scale_inv,
                                       float max_scale_inv);
  int64_t blocks() const { return count_; }
  // Meaningful when blocks() > 0; the median is the middle block's bucket (its lower edge).
  double min_log2() const { return min_; }
  double max_log2() const { return max_; }
  double median_log2() const;

 private:
  std::map<int, int64_t> buckets_;
  double min_ = 0, max_ = 0;
  int64_t count_ = 0;
};

struct SlotStats {
  FP8CastCounts counts;
  BlockScaleSpread scales;
};

// The device words CUDA casts count into, as u64: saturated, flushed, the spread's block count,
// the smallest scale's float bits (stored inverted, so that zero-filled words start empty and
// atomicMax finds the minimum), the largest scale's bits, then one count per spread bucket
// (bucket b at kBuckets + b + kBucketOffset: every positive finite f32 scale fits).
struct DeviceCastStats {
  static constexpr int kSaturated = 0, kFlushed = 1, kBlocks = 2, kMinBitsInverted = 3,
                       kMaxBits = 4, kBuckets = 5;
  static constexpr int kBucketOffset = 1200, kNumBuckets = 2240;
  static constexpr int kWords = kBuckets + kNumBuckets;
  Tensor words;  // (kWords,) i64 on the device of the casts, zeros at first
};
// The device words of `counts` on `device` (made, zeroed on the stream, on first use).
DeviceCastStats& device_cast_stats(FP8CastCounts& counts, Device device);
// Adds what the device counted to `counts` (and to `spread`, when given) and lets the device
// start again from zero: one copy back per slot that a CUDA cast counted for, made when a
// metrics log takes the counts.
void settle_device_stats(FP8CastCounts& counts, BlockScaleSpread* spread);

}  // namespace octet
