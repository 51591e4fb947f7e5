// Compares runtime/fp8.h and runtime/float16.h with the CUDA toolkit's own host conversions on
// every f32 bit pattern (and every code of the narrow formats); needs only the toolkit's headers.
// f32 -> E4M3 / E5M2 is swept in tests/kernels/fp8_exhaustive_test.cpp, together with the
// CPU's block cast.
#include <gtest/gtest.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/float16.h"
#include "runtime/fp4.h"
#include "runtime/fp8.h"

#if OCTET_HAVE_CUDA_HEADERS
// cuda_fp8.h pulls in cuda_fp16.h and cuda_bf16.h; all three compile with a host compiler, which
// then takes the headers' software (non-PTX) paths: exactly the reference we want.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace octet {
namespace {

#if OCTET_HAVE_CUDA_HEADERS

using detail::bits_to_float;  // runtime/float16.h
using detail::float_to_bits;

struct Sweep {
  uint64_t mismatches = 0;
  uint64_t first = UINT64_MAX;  // smallest mismatching input bit pattern
  double seconds = 0;
};

// Runs same(bits) for every one of the 2^32 f32 bit patterns, split over the OpenMP threads in
// interleaved chunks (the two halves of the range, positive and negative, cost alike).
template <typename Same>
Sweep sweep_all_floats(const char* name, Same same) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t mismatches = 0;
  uint64_t first = UINT64_MAX;
  constexpr int64_t kCount = int64_t{1} << 32;
#pragma omp parallel for schedule(static, 1 << 22) reduction(+ : mismatches) reduction(min : first)
  for (int64_t i = 0; i < kCount; ++i) {
    const uint32_t bits = static_cast<uint32_t>(i);
    if (!same(bits)) {
      ++mismatches;
      first = bits < first ? bits : first;
    }
  }
  Sweep sweep;
  sweep.mismatches = mismatches;
  sweep.first = first;
  sweep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[  TIMING  ] %s: all 2^32 f32 patterns in %.2f s\n", name, sweep.seconds);
  return sweep;
}

std::string describe(const Sweep& sweep, uint32_t ours, uint32_t cuda) {
  char buf[200];
  std::snprintf(
      buf, sizeof(buf),
      "%" PRIu64 " mismatches; first at input 0x%08" PRIx64 " (%.9g): ours 0x%X, CUDA 0x%X",
      sweep.mismatches, sweep.first, bits_to_float(static_cast<uint32_t>(sweep.first)), ours, cuda);
  return buf;
}

uint8_t cuda_e8m0(float x) { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf); }
uint8_t cuda_e2m1(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest));
}
uint16_t cuda_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
uint16_t cuda_f16(float x) { return __half_as_ushort(__float2half_rn(x)); }

float cuda_from_fp8(uint8_t code, __nv_fp8_interpretation_t kind) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, kind)));
}

// Equal bits, or both NaN (the only freedom the spec leaves the decoders).
bool same_float(float a, float b) {
  return float_to_bits(a) == float_to_bits(b) || (std::isnan(a) && std::isnan(b));
}

TEST(Fp8Exhaustive, ToE2m1MatchesCudaOnAllFloats) {
  // Exact codes, NaN included (CUDA gives +6, 0x7, for every NaN).
  const Sweep s = sweep_all_floats("to_e2m1", [](uint32_t b) {
    return to_e2m1(bits_to_float(b)) == cuda_e2m1(bits_to_float(b));
  });
  const float x = bits_to_float(static_cast<uint32_t>(s.first));
  EXPECT_EQ(s.mismatches, 0u) << describe(s, to_e2m1(x), cuda_e2m1(x));
}

TEST(Fp8Exhaustive, FromE2m1MatchesCudaOnAllCodes) {
  for (int i = 0; i < 16; ++i) {
    const auto code = static_cast<__nv_fp4_storage_t>(i);
    const float cuda = __half2float(__half(__nv_cvt_fp4_to_halfraw(code, __NV_E2M1)));
    EXPECT_TRUE(same_float(from_e2m1(static_cast<uint8_t>(i)), cuda))
        << "e2m1 code " << i << ": ours " << from_e2m1(static_cast<uint8_t>(i)) << ", CUDA "
        << cuda;
    // Every value round-trips through the cast.
    EXPECT_EQ(to_e2m1(from_e2m1(static_cast<uint8_t>(i))), i) << "code " << i;
  }
}

TEST(Fp8Exhaustive, ToE8m0MatchesCudaOnAllFloats) {
  const Sweep s = sweep_all_floats("to_e8m0", [](uint32_t b) {
    return to_e8m0(bits_to_float(b)) == cuda_e8m0(bits_to_float(b));
  });
  const float x = bits_to_float(static_cast<uint32_t>(s.first));
  EXPECT_EQ(s.mismatches, 0u) << describe(s, to_e8m0(x), cuda_e8m0(x));
}

// Sweeps a f32 -> 16-bit float cast: exact bits on non-NaN inputs; for NaN inputs ours must only be
// NaN (magnitude bits above `inf_bits`, the format's infinity).
template <typename Ours, typename Cuda>
void expect_16_bit_cast_matches_cuda(const char* name, Ours ours, Cuda cuda, uint32_t inf_bits) {
  const Sweep s = sweep_all_floats(name, [&](uint32_t b) {
    const float x = bits_to_float(b);
    const uint16_t got = ours(x);
    return std::isnan(x) ? (got & 0x7FFFu) > inf_bits : got == cuda(x);
  });
  const float x = bits_to_float(static_cast<uint32_t>(s.first));
  EXPECT_EQ(s.mismatches, 0u) << describe(s, ours(x), cuda(x));
}

TEST(Fp8Exhaustive, ToBf16MatchesCudaOnAllFloats) {
  // CUDA returns 0x7FFF for every NaN input.
  expect_16_bit_cast_matches_cuda(
      "to_bf16", [](float x) { return to_bf16(x); }, cuda_bf16, 0x7F80u);
}

TEST(Fp8Exhaustive, ToF16MatchesCudaOnAllFloats) {
  expect_16_bit_cast_matches_cuda(
      "to_f16", [](float x) { return to_f16(x); }, cuda_f16, 0x7C00u);
}

TEST(Fp8Exhaustive, FromFp8MatchesCudaOnAllCodes) {
  // CUDA decodes through half; FP8 values are all exact in half and half -> f32 is exact.
  for (int i = 0; i < 256; ++i) {
    const uint8_t code = static_cast<uint8_t>(i);
    const float e4m3 = cuda_from_fp8(code, __NV_E4M3);
    const float e5m2 = cuda_from_fp8(code, __NV_E5M2);
    EXPECT_TRUE(same_float(from_e4m3(code), e4m3))
        << "e4m3 code 0x" << std::hex << i << ": ours " << from_e4m3(code) << ", CUDA " << e4m3;
    EXPECT_TRUE(same_float(from_e5m2(code), e5m2))
        << "e5m2 code 0x" << std::hex << i << ": ours " << from_e5m2(code) << ", CUDA " << e5m2;
    EXPECT_TRUE(same_float(e4m3_to_float_table()[i], e4m3))
        << "e4m3 table, code 0x" << std::hex << i;
    EXPECT_TRUE(same_float(e5m2_to_float_table()[i], e5m2))
        << "e5m2 table, code 0x" << std::hex << i;
  }
}

TEST(Fp8Exhaustive, FromE8m0MatchesCudaOnAllCodes) {
  for (int i = 0; i < 256; ++i) {
    const uint8_t code = static_cast<uint8_t>(i);
    const float cuda = __bfloat162float(__nv_bfloat16(__nv_cvt_e8m0_to_bf16raw(code)));
    EXPECT_TRUE(same_float(from_e8m0(code), cuda))
        << "e8m0 code " << i << ": ours " << from_e8m0(code) << ", CUDA " << cuda;
  }
}

TEST(Fp8Exhaustive, FromBf16AndF16MatchCudaOnAllCodes) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t code = static_cast<uint16_t>(i);
    const float bf16 = __bfloat162float(__ushort_as_bfloat16(code));
    const float f16 = __half2float(__ushort_as_half(code));
    ASSERT_TRUE(same_float(from_bf16(code), bf16))
        << "bf16 0x" << std::hex << i << ": ours " << from_bf16(code) << ", CUDA " << bf16;
    ASSERT_TRUE(same_float(from_f16(code), f16))
        << "f16 0x" << std::hex << i << ": ours " << from_f16(code) << ", CUDA " << f16;
  }
}

#else  // !OCTET_HAVE_CUDA_HEADERS

TEST(Fp8Exhaustive, MatchesCuda) {
  GTEST_SKIP() << "CUDA toolkit headers not found: the exhaustive comparison with CUDA's host "
                  "conversions (cuda_fp8.h, cuda_bf16.h, cuda_fp16.h) needs them at build time";
}

#endif  // OCTET_HAVE_CUDA_HEADERS

}  // namespace
}  // namespace octet
