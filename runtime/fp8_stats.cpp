// BlockScaleSpread: the bucketed log2 scales and their median.
#include "runtime/fp8_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/memory.h"

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

BlockScaleSpread BlockScaleSpread::from_buckets(std::map<int, int64_t> buckets, float min_scale_inv,
                                                float max_scale_inv) {
  BlockScaleSpread s;
  for (const auto& [bucket, n] : buckets) s.count_ += n;
  if (s.count_ == 0) return s;
  s.buckets_ = std::move(buckets);
  s.min_ = std::log2(static_cast<double>(min_scale_inv));
  s.max_ = std::log2(static_cast<double>(max_scale_inv));
  return s;
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

namespace octet {

DeviceCastStats& device_cast_stats(FP8CastCounts& counts, Device device) {
  if (counts.device == nullptr || counts.device->words.device() != device) {
    // A slot that moved device settles what the old device counted first.
    if (counts.device != nullptr) settle_device_stats(counts, nullptr);
    auto stats = std::make_shared<DeviceCastStats>();
    MemTagScope tag(MemTag::kOther);
    stats->words = Tensor::zeros({DeviceCastStats::kWords}, DType::kI64, device);
    counts.device = std::move(stats);
  }
  return *counts.device;
}

void settle_device_stats(FP8CastCounts& counts, BlockScaleSpread* spread) {
  if (counts.device == nullptr) return;
  Tensor& words = counts.device->words;
  const Tensor host = words.to(Device::cpu());
  // The words stay (a captured CUDA graph's casts keep counting into them), zeroed in stream order.
  cuda::zero_async(words.device(), words.data(), words.nbytes());
  std::vector<uint64_t> w(DeviceCastStats::kWords);
  std::memcpy(w.data(), host.data(), w.size() * sizeof(uint64_t));
  counts.saturated += static_cast<int64_t>(w[DeviceCastStats::kSaturated]);
  counts.flushed += static_cast<int64_t>(w[DeviceCastStats::kFlushed]);
  if (spread == nullptr || w[DeviceCastStats::kBlocks] == 0) return;
  std::map<int, int64_t> buckets;
  for (int b = 0; b < DeviceCastStats::kNumBuckets; ++b) {
    const uint64_t n = w[static_cast<size_t>(DeviceCastStats::kBuckets + b)];
    if (n != 0) buckets[b - DeviceCastStats::kBucketOffset] = static_cast<int64_t>(n);
  }
  const auto as_float = [](uint64_t bits) {
    const auto b32 = static_cast<uint32_t>(bits);
    float f = 0;
    std::memcpy(&f, &b32, sizeof(f));
    return f;
  };
  spread->merge(BlockScaleSpread::from_buckets(
      std::move(buckets), as_float(~w[DeviceCastStats::kMinBitsInverted] & 0xFFFFFFFFu),
      as_float(w[DeviceCastStats::kMaxBits])));
}

}  // namespace octet
