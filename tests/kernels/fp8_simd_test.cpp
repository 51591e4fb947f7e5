// Every path of the CPU's FP8 block conversions (kernels/cpu/fp8_simd.h: scalar, AVX2, AVX-512,
// each that this processor has) against CUDA's host conversion, on every special class of input,
// the ties and boundaries around every FP8 value, a strided and a random sample of all f32 bit
// patterns, and block lengths that leave every tail. The dispatched path is checked on all 2^32
// inputs by fp8_exhaustive_test.cpp.
#include "kernels/cpu/fp8_simd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/float16.h"
#include "runtime/fp8.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using cpu::SimdPath;

using detail::bits_to_float;  // runtime/float16.h
using detail::float_to_bits;

std::vector<SimdPath> available_paths() {
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (cpu::simd_path_available(p)) paths.push_back(p);
  }
  return paths;
}

// Selects a path for the scope of a test and restores the one before.
class PathScope {
 public:
  explicit PathScope(SimdPath path) : before_(cpu::set_fp8_simd_path(path)) {}
  ~PathScope() { cpu::set_fp8_simd_path(before_); }
  PathScope(const PathScope&) = delete;
  PathScope& operator=(const PathScope&) = delete;

 private:
  SimdPath before_;
};

// The inputs: special classes, every FP8 value of `fp8` with its neighbours and the exact ties
// between consecutive values (all with both signs), then a strided and a random sample of bits.
std::vector<float> cast_inputs(DType fp8) {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x00000001u, 0x00000002u, 0x003FFFFFu, 0x00400000u, 0x007FFFFFu,  // 0, subnormal
      0x00800000u, 0x7F7FFFFFu,  // FLT_MIN, FLT_MAX
      0x7F800000u,               // inf
      0x7F800001u, 0x7FA00000u, 0x7FBFFFFFu, 0x7FC00000u, 0x7FC00001u, 0x7FFFFFFFu};  // NaNs
  std::vector<float> x;
  for (uint32_t b : bits) {
    x.push_back(bits_to_float(b));
    x.push_back(bits_to_float(b | 0x80000000u));
  }
  // FP8 values from the codes (0x00..0x7E or 0x7B), the next value up being the next code's
  // (or, past the max, the value the format would have next: max + one step at max's exponent).
  const int last = fp8 == DType::kE4M3 ? 0x7E : 0x7B;
  auto value = [&](int code) {
    return fp8 == DType::kE4M3 ? from_e4m3(static_cast<uint8_t>(code))
                               : from_e5m2(static_cast<uint8_t>(code));
  };
  for (int code = 0; code <= last; ++code) {
    const double v = value(code);
    const double next = code < last ? value(code + 1) : 2.0 * v - value(code - 1);
    const float tie = static_cast<float>((v + next) / 2);  // exact: a few mantissa bits
    for (float f : {static_cast<float>(v), tie, static_cast<float>(next)}) {
      for (float g : {f, std::nextafter(f, 0.f), std::nextafter(f, 1e30f)}) {
        x.push_back(g);
        x.push_back(-g);
      }
    }
  }
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
    x.push_back(bits_to_float(static_cast<uint32_t>(b)));
  }
  std::mt19937 rng(20241201);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(bits_to_float(static_cast<uint32_t>(rng())));
  return x;
}

// Max |x| over [lo, hi), NaN ignored, in f64.
double reference_amax(const std::vector<float>& x, size_t lo, size_t hi) {
  double m = 0;
  for (size_t i = lo; i < hi; ++i) {
    if (!std::isnan(x[i])) m = std::max(m, std::fabs(static_cast<double>(x[i])));
  }
  return m;
}

// Runs the cast over x in blocks of lengths 1, 2, ..., 67, 1, 2, ... (every tail of the 16- and
// 32-wide loops, and the loops themselves), and checks each byte against CUDA and each block's
// max against f64, reporting the first mismatch of each.
void check_cast(SimdPath path, DType fp8, float scale, bool with_amax) {
  const PathScope scope(path);
  const std::vector<float> x = cast_inputs(fp8);
  std::vector<uint8_t> q(x.size() + 1, 0xAB);
  int64_t bad_bytes = 0, bad_amax = 0;
  size_t i = 0;
  for (size_t len = 1; i < x.size(); len = len % 67 + 1) {
    const size_t n = std::min(len, x.size() - i);
    if (with_amax) {
      const float m =
          cpu::cast_fp8_amax(fp8, x.data() + i, static_cast<int64_t>(n), scale, q.data() + i);
      const double want = reference_amax(x, i, i + n);
      if (static_cast<double>(m) != want && bad_amax++ == 0) {
        ADD_FAILURE() << cpu::simd_path_name(path) << ": amax of block at " << i << " (" << n
                      << " values) is " << m << ", want " << want;
      }
    } else {
      cpu::cast_fp8(fp8, x.data() + i, static_cast<int64_t>(n), scale, q.data() + i);
    }
    i += n;
  }
  EXPECT_EQ(q.back(), 0xAB) << "wrote past the end";
  for (size_t k = 0; k < x.size(); ++k) {
    const float y = x[k] * scale;
    const uint8_t want = test::reference_cast(y, fp8);
    if (q[k] != want && bad_bytes++ == 0) {
      ADD_FAILURE() << cpu::simd_path_name(path) << " " << dtype_name(fp8) << ": input 0x"
                    << std::hex << float_to_bits(x[k]) << " (" << x[k] << ") times " << scale
                    << " gives 0x" << int{q[k]} << ", CUDA 0x" << int{want};
    }
  }
  EXPECT_EQ(bad_bytes, 0) << "mismatching bytes on the " << cpu::simd_path_name(path) << " path";
  EXPECT_EQ(bad_amax, 0) << "mismatching block maxima on the " << cpu::simd_path_name(path)
                         << " path";
}

TEST(Fp8Simd, EveryPathCastsAsCudaDoes) {
  for (SimdPath path : available_paths()) {
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      check_cast(path, fp8, 1.f, true);
      check_cast(path, fp8, 1.f, false);
      // Scales that move values across the range: overflow to saturation, underflow to zero.
      check_cast(path, fp8, 3.5f, true);
      check_cast(path, fp8, 1.f / 448.f, false);
    }
  }
}

TEST(Fp8Simd, AmaxIgnoresNaNAnywhereInTheBlock) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (SimdPath path : available_paths()) {
    const PathScope scope(path);
    for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 100}) {
      for (int64_t at = 0; at < n; ++at) {
        std::vector<float> x(static_cast<size_t>(n), -0.5f);
        std::vector<uint8_t> q(static_cast<size_t>(n));
        x[static_cast<size_t>(at)] = at % 2 ? -nan : nan;
        const float want = n == 1 ? 0.f : 0.5f;
        EXPECT_EQ(cpu::cast_fp8_amax(DType::kE4M3, x.data(), n, 1.f, q.data()), want)
            << cpu::simd_path_name(path) << ": NaN at " << at << " of " << n;
        EXPECT_EQ(q[static_cast<size_t>(at)], 0x7F) << "NaN casts to 0x7F, sign dropped";
        x[static_cast<size_t>(at)] = -inf;
        EXPECT_EQ(cpu::cast_fp8_amax(DType::kE5M2, x.data(), n, 1.f, q.data()), inf)
            << cpu::simd_path_name(path) << ": -inf at " << at << " of " << n;
      }
    }
    EXPECT_EQ(cpu::cast_fp8_amax(DType::kE4M3, nullptr, 0, 1.f, nullptr), 0.f);
  }
}

// Every code, at every position of the vector loops and their tails, decodes to runtime/fp8.h's
// exact bits (from_e4m3 / from_e5m2, checked against CUDA on every code in tests/runtime).
TEST(Fp8Simd, EveryPathDecodesEveryCodeExactly) {
  std::vector<uint8_t> codes;
  for (int rep = 0; rep < 3; ++rep) {
    for (int c = 0; c < 256; ++c) codes.push_back(static_cast<uint8_t>((c * 7 + rep) & 0xFF));
  }
  codes.resize(codes.size() + 13, 0x3C);  // a tail
  for (SimdPath path : available_paths()) {
    const PathScope scope(path);
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      for (size_t offset : {size_t{0}, size_t{1}, size_t{5}}) {
        const auto n = static_cast<int64_t>(codes.size() - offset);
        std::vector<float> out(codes.size() + 1, bits_to_float(0xDEADBEEFu));
        cpu::fp8_to_f32(fp8, codes.data() + offset, n, out.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t c = codes[offset + static_cast<size_t>(i)];
          const float want = fp8 == DType::kE4M3 ? from_e4m3(c) : from_e5m2(c);
          if (float_to_bits(out[static_cast<size_t>(i)]) != float_to_bits(want) && bad++ == 0) {
            ADD_FAILURE() << cpu::simd_path_name(path) << " " << dtype_name(fp8) << ": code 0x"
                          << std::hex << int{c} << " gives bits 0x"
                          << float_to_bits(out[static_cast<size_t>(i)]) << ", want 0x"
                          << float_to_bits(want);
          }
        }
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(float_to_bits(out[static_cast<size_t>(n)]), 0xDEADBEEFu) << "wrote past the end";
      }
    }
  }
}

struct Shape2 {
  int64_t rows, cols;
};
// 24 x 48, 13 x 35 and 8 x 16: a block of 8 rows after the blocks of 16 (AVX2), and the edges.
const Shape2 kTransposeShapes[] = {{1, 1},   {16, 16},  {17, 33}, {32, 48}, {5, 40}, {40, 5},
                                   {64, 64}, {100, 70}, {24, 48}, {13, 35}, {8, 16}};

// Codes of a rows x cols block with row stride cols + 3, every code appearing.
std::vector<uint8_t> random_codes(int64_t rows, int64_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> src(static_cast<size_t>(rows * stride));
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < src.size() && i < 256; ++i) src[i] = static_cast<uint8_t>(i);
  return src;
}

TEST(Fp8Simd, EveryPathDecodesTransposedOnOddShapes) {
  for (SimdPath path : available_paths()) {
    const PathScope scope(path);
    for (DType fp8 : {DType::kE4M3, DType::kE5M2}) {
      for (const Shape2 s : kTransposeShapes) {
        const int64_t src_stride = s.cols + 3, dst_stride = s.rows + 5;
        const std::vector<uint8_t> src = random_codes(s.rows, src_stride, 11);
        std::vector<float> dst(static_cast<size_t>(s.cols * dst_stride),
                               bits_to_float(0xDEADBEEFu));
        cpu::fp8_to_f32_transposed(fp8, src.data(), src_stride, s.rows, s.cols, dst.data(),
                                   dst_stride);
        int64_t bad = 0, touched = 0;
        for (int64_t j = 0; j < s.cols; ++j) {
          for (int64_t i = 0; i < dst_stride; ++i) {
            const uint32_t got = float_to_bits(dst[static_cast<size_t>(j * dst_stride + i)]);
            if (i >= s.rows) {
              touched += got != 0xDEADBEEFu;
              continue;
            }
            const uint8_t c = src[static_cast<size_t>(i * src_stride + j)];
            bad += got != float_to_bits(fp8 == DType::kE4M3 ? from_e4m3(c) : from_e5m2(c));
          }
        }
        EXPECT_EQ(bad, 0) << cpu::simd_path_name(path) << " " << dtype_name(fp8) << " " << s.rows
                          << "x" << s.cols;
        EXPECT_EQ(touched, 0) << "wrote outside the block";
      }
    }
  }
}

TEST(Fp8Simd, ByteTransposeOnOddShapes) {
  for (const Shape2 s : kTransposeShapes) {
    const int64_t src_stride = s.cols + 3, dst_stride = s.rows + 5;
    const std::vector<uint8_t> src = random_codes(s.rows, src_stride, 12);
    std::vector<uint8_t> dst(static_cast<size_t>(s.cols * dst_stride), 0xAB);
    cpu::transpose_bytes(src.data(), src_stride, s.rows, s.cols, dst.data(), dst_stride);
    int64_t bad = 0;
    for (int64_t j = 0; j < s.cols; ++j) {
      for (int64_t i = 0; i < dst_stride; ++i) {
        const uint8_t want = i < s.rows ? src[static_cast<size_t>(i * src_stride + j)] : 0xAB;
        bad += dst[static_cast<size_t>(j * dst_stride + i)] != want;
      }
    }
    EXPECT_EQ(bad, 0) << s.rows << "x" << s.cols;
  }
}

TEST(Fp8Simd, APathThisProcessorLacksIsRefused) {
  EXPECT_TRUE(cpu::simd_path_available(SimdPath::kScalar));
  const SimdPath widest = cpu::fp8_simd_path();
  EXPECT_TRUE(cpu::simd_path_available(widest));
  if (!cpu::simd_path_available(SimdPath::kAvx512)) {
    EXPECT_THROW(cpu::set_fp8_simd_path(SimdPath::kAvx512), Error);
    EXPECT_EQ(cpu::fp8_simd_path(), widest);
  }
  {
    const PathScope scope(SimdPath::kScalar);
    EXPECT_EQ(cpu::fp8_simd_path(), SimdPath::kScalar);
  }
  EXPECT_EQ(cpu::fp8_simd_path(), widest);
}

// ONEDNN_MAX_CPU_ISA holds every octet CPU path as it holds oneDNN: an AVX2 cap emulates an AVX2
// machine, SSE41 / AVX leave the scalar code, AVX-512 names and nothing leave the widest.
TEST(Fp8Simd, TheDefaultPathFollowsOnednnsIsaCap) {
  const char* before = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string saved = before != nullptr ? before : "";
  SimdPath widest = SimdPath::kScalar;
  for (SimdPath p : {SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (cpu::simd_path_available(p)) widest = p;
  }
  const SimdPath avx2 = std::min(widest, SimdPath::kAvx2);
  for (const auto& [cap, want] : {std::pair<const char*, SimdPath>{"AVX2", avx2},
                                  {"avx2_vnni", avx2},
                                  {"SSE41", SimdPath::kScalar},
                                  {"AVX", SimdPath::kScalar},
                                  {"AVX512_CORE", widest},
                                  {"ALL", widest}}) {
    setenv("ONEDNN_MAX_CPU_ISA", cap, 1);
    EXPECT_EQ(cpu::default_simd_path(), want) << cap;
  }
  unsetenv("ONEDNN_MAX_CPU_ISA");
  EXPECT_EQ(cpu::default_simd_path(), widest);
  if (before != nullptr) setenv("ONEDNN_MAX_CPU_ISA", saved.c_str(), 1);
}

}  // namespace
}  // namespace octet
