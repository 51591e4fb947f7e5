// BlockScaleSpread: the bucketed log2 scales and their median.
#include "runtime/fp8_stats.h"

#include <algorithm>
#include <cmath>

namespace octet {

void BlockScaleSpread::add(float scale_inv) {
  if (!(scale_inv > 0.f) || !std::isfinite(scale_inv)) return;
  const double l = std::log2(static_cast<double>(scale_inv));
  min_ = count_ == 0 ? l : std::min(min_, l);
  max_ = count_ == 0 ? l : std::max(max_, l);
  ++buckets_[static_cast<int>(std::floor(l * kBucketsPerOctave))];
  ++count_;
}

void BlockScaleSpread::merge(const BlockScaleSpread& other) {
  if (other.count_ == 0) return;
  min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
  max_ = count_ == 0 ? other.max_ : std::max(max_, other.max_);
  for (const auto& [bucket, n] : other.buckets_) buckets_[bucket] += n;
  count_ += other.count_;
}

double BlockScaleSpread::median_log2() const {
  int64_t seen = 0;
  for (const auto& [bucket, n] : buckets_) {
    seen += n;
    if (2 * seen > count_) return static_cast<double>(bucket) / kBucketsPerOctave;
  }
  return 0;
}

}  // namespace octet
