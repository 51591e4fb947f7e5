// The f32 -> FP8 casts on every f32 bit pattern against the CUDA toolkit's host conversion, in one
// sweep per format: runtime/fp8.h's scalar rule (the one the CUDA kernels run) and the CPU's block
// cast (kernels/cpu/fp8_simd.h, on the path this processor dispatches to, fused amax included)
// must both give CUDA's byte. The CUDA reference, the costly part, is computed once for both.
#include <gtest/gtest.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/fp8_simd.h"
#include "runtime/float16.h"
#include "runtime/fp8.h"

#if OCTET_HAVE_CUDA_HEADERS
#include <cuda_fp8.h>
#endif

namespace octet {
namespace {

#if OCTET_HAVE_CUDA_HEADERS

using detail::bits_to_float;  // runtime/float16.h

struct Mismatches {
  uint64_t count = 0;
  uint64_t first = UINT64_MAX;  // smallest mismatching input bit pattern
};

std::string describe(const char* what, const Mismatches& m) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s: %" PRIu64 " mismatches; first at input 0x%08" PRIx64, what,
                m.count, m.first);
  return buf;
}

// Casts all 2^32 patterns in blocks of kBlock consecutive ones (scale 1: x * 1 is x, bit for bit,
// for every non-NaN x, and every NaN casts to 0x7F), split over the OpenMP threads in interleaved
// chunks; compares the scalar rule and the block cast with CUDA and the block's max with the max
// worked out from its bit patterns.
// A template on the format, so that both conversions in the inner loop are specialised for it.
template <bool kE4M3>
void sweep() {
  const auto start = std::chrono::steady_clock::now();
  constexpr DType fp8 = kE4M3 ? DType::kE4M3 : DType::kE5M2;
  constexpr __nv_fp8_interpretation_t kind = kE4M3 ? __NV_E4M3 : __NV_E5M2;
  constexpr int64_t kBlock = 1 << 12;  // x and q stay in L1
  constexpr int64_t kBlocks = (int64_t{1} << 32) / kBlock;
  uint64_t scalar_count = 0, scalar_first = UINT64_MAX;
  uint64_t block_count = 0, block_first = UINT64_MAX;
  uint64_t amax_count = 0, amax_first = UINT64_MAX;
#pragma omp parallel reduction(+ : scalar_count, block_count, amax_count) \
    reduction(min : scalar_first, block_first, amax_first)
  {
    std::vector<float> x(kBlock);
    std::vector<uint8_t> q(kBlock);
#pragma omp for schedule(static, 1024)
    for (int64_t b = 0; b < kBlocks; ++b) {
      const uint32_t base = static_cast<uint32_t>(b * kBlock);
      for (int64_t i = 0; i < kBlock; ++i) x[i] = bits_to_float(base + static_cast<uint32_t>(i));
      // The block's magnitudes are the consecutive patterns from base & 0x7FFFFFFF up, and f32
      // magnitudes order as their bits do: the largest that is not NaN is the last one, or inf
      // (0x7F800000) when NaNs follow it, and none is when the block starts past inf.
      const uint32_t lowest = base & 0x7FFFFFFFu;
      const uint32_t highest = std::min<uint32_t>(lowest + (kBlock - 1), 0x7F800000u);
      const float want_amax = lowest <= 0x7F800000u ? bits_to_float(highest) : 0.f;
      const float amax = cpu::cast_fp8_amax(fp8, x.data(), kBlock, 1.f, q.data());
      if (amax != want_amax) {
        ++amax_count;
        amax_first = std::min<uint64_t>(amax_first, base);
      }
      // Counted without branches, so that the compiler vectorises the loop, CUDA's conversion
      // included; a block with mismatches is scanned again for its first.
      uint64_t scalar_bad = 0, block_bad = 0;
      for (int64_t i = 0; i < kBlock; ++i) {
        const uint8_t cuda = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, kind);
        const uint8_t scalar = kE4M3 ? to_e4m3(x[i]) : to_e5m2(x[i]);
        scalar_bad += scalar != cuda;
        block_bad += q[i] != cuda;
      }
      for (int64_t i = 0; (scalar_bad | block_bad) != 0 && i < kBlock; ++i) {
        const uint8_t cuda = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, kind);
        const uint8_t scalar = kE4M3 ? to_e4m3(x[i]) : to_e5m2(x[i]);
        const uint64_t bits = base + static_cast<uint64_t>(i);
        if (scalar != cuda) scalar_first = std::min(scalar_first, bits);
        if (q[i] != cuda) block_first = std::min(block_first, bits);
      }
      scalar_count += scalar_bad;
      block_count += block_bad;
    }
  }
  std::printf("[  TIMING  ] %s, scalar and %s block cast: all 2^32 f32 patterns in %.2f s\n",
              std::string(dtype_name(fp8)).c_str(), cpu::simd_path_name(cpu::fp8_simd_path()),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(scalar_count, 0u) << describe("scalar rule", {scalar_count, scalar_first});
  EXPECT_EQ(block_count, 0u) << describe(cpu::simd_path_name(cpu::fp8_simd_path()),
                                         {block_count, block_first});
  EXPECT_EQ(amax_count, 0u) << describe("block amax (block start)", {amax_count, amax_first});
}

TEST(Fp8Exhaustive, ToE4m3MatchesCudaOnAllFloats) { sweep<true>(); }

TEST(Fp8Exhaustive, ToE5m2MatchesCudaOnAllFloats) { sweep<false>(); }

#else  // !OCTET_HAVE_CUDA_HEADERS

TEST(Fp8Exhaustive, CastMatchesCuda) {
  GTEST_SKIP() << "CUDA toolkit headers not found: the exhaustive comparison with CUDA's host "
                  "conversion (cuda_fp8.h) needs them at build time";
}

#endif  // OCTET_HAVE_CUDA_HEADERS

}  // namespace
}  // namespace octet
