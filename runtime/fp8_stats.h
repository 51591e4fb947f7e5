// The health a slot's casts leave behind, for metrics: what saturated and flushed (FP8CastCounts),
// and for block-scaled formats the spread of the block scales they chose (TE issue #2801 asks
// for more than min and max): log2 of each block's dequantization scale, bucketed in 1/8 octave
// (exact for the power-of-two scales of MXFP8 and blockwise FP8), with the exact extremes.
#pragma once

#include <cstdint>
#include <map>

#include "runtime/fp8.h"

namespace octet {

class BlockScaleSpread {
 public:
  static constexpr int kBucketsPerOctave = 8;

  // One block's dequantization scale (positive and finite; others are ignored).
  void add(float scale_inv);
  void merge(const BlockScaleSpread& other);
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

}  // namespace octet
