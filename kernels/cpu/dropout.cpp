// Dropout on the CPU. Element i keeps when draw (offset + i) of the Philox stream of `seed`
// (runtime/rng.h) is >= p, so the mask depends on the element index only, never on the threads.
// The Philox blocks are generated many at a time in vectorisable lanes.
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// Elements per inner step: the draws they need (at most kStep / 4 + 2 Philox blocks) stay in L1.
constexpr int64_t kStep = 1024;
constexpr int64_t kMaxBlocks = kStep / 4 + 2;

// Philox4x32-10 blocks for counters first .. first + count - 1 with key `seed`, written as 4 words
// per block: the same words as detail::philox, computed lane-parallel (structure of arrays).
OCTET_VECTOR_CLONES
void philox_blocks(uint64_t first, uint64_t seed, int64_t count, uint32_t* out) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0[kMaxBlocks], c1[kMaxBlocks], c2[kMaxBlocks], c3[kMaxBlocks];
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t counter = first + static_cast<uint64_t>(i);
    c0[i] = static_cast<uint32_t>(counter);
    c1[i] = static_cast<uint32_t>(counter >> 32);
    c2[i] = 0u;
    c3[i] = 0u;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0[i];
      const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2[i];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[i] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[i] ^ k1;
      c0[i] = n0;
      c1[i] = static_cast<uint32_t>(p1);
      c2[i] = n2;
      c3[i] = static_cast<uint32_t>(p0);
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  for (int64_t i = 0; i < count; ++i) {
    out[4 * i] = c0[i];
    out[4 * i + 1] = c1[i];
    out[4 * i + 2] = c2[i];
    out[4 * i + 3] = c3[i];
  }
}

// keep = uniform(bits) >= p with uniform = (bits >> 8) * 2^-24, compared as (bits >> 8) >= p * 2^24
// (exact: a power-of-two scaling).
OCTET_VECTOR_CLONES
void apply_mask(const float* x, const uint32_t* bits, float threshold, float keep_scale, float* y,
                uint8_t* mask, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // Via int32 (the value has 24 bits): a signed conversion vectorises on every x86 target.
    const bool keep = static_cast<float>(static_cast<int32_t>(bits[i] >> 8)) >= threshold;
    mask[i] = keep ? 1 : 0;
    y[i] = x[i] * (keep ? keep_scale : 0.f);  // x * mask / (1 - p): NaN stays NaN when dropped
  }
}

OCTET_VECTOR_CLONES
void masked_scale(const float* dy, const uint8_t* mask, float keep_scale, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (mask[i] != 0 ? keep_scale : 0.f);
}

float keep_scale_of(float p) { return p < 1.f ? 1.f / (1.f - p) : 0.f; }

}  // namespace

void CpuBackend::dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y,
                         Tensor& mask) const {
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  uint8_t* pm = mask.data_as<uint8_t>();
  const float threshold = p * 0x1p24f;
  const float keep_scale = keep_scale_of(p);
  parallel_for(0, x.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    uint32_t words[4 * kMaxBlocks];
    for (int64_t i = lo; i < hi; i += kStep) {
      const int64_t m = std::min(kStep, hi - i);
      const uint64_t d0 = offset + static_cast<uint64_t>(i);  // first draw of this step
      const uint64_t first = d0 / 4, last = (d0 + static_cast<uint64_t>(m) - 1) / 4;
      philox_blocks(first, seed, static_cast<int64_t>(last - first + 1), words);
      apply_mask(px + i, words + (d0 - 4 * first), threshold, keep_scale, py + i, pm + i, m);
    }
  });
}

void CpuBackend::dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) const {
  const float* pdy = dy.data_as<float>();
  const uint8_t* pm = mask.data_as<uint8_t>();
  float* pdx = dx.data_as<float>();
  const float keep_scale = keep_scale_of(p);
  parallel_for(0, dy.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    masked_scale(pdy + lo, pm + lo, keep_scale, pdx + lo, hi - lo);
  });
}

}  // namespace octet::cpu
