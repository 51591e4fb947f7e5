// f32 <-> FP8 block conversions: runtime/fp8.h's integer rule spelt in AVX-512 or AVX2 lanes. Every
// step is the scalar code's own integer operation (or the same f32 multiply), so each path gives
// the scalar bits on every input, NaN, inf and subnormals included (tests/kernels check it).
#include "kernels/cpu/fp8_simd.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OCTET_X86_SIMD 1
#else
#define OCTET_X86_SIMD 0
#endif

#include "runtime/error.h"
#include "runtime/fp8.h"
#include "runtime/named.h"

namespace octet::cpu {
namespace {

// The constants of a format's encode rule (runtime/fp8.h): round_magnitude_rne<kMantBits, kBias>,
// then codes past kMaxCode (the largest finite value) clamp to it.
template <bool kE4M3>
struct Format {
  static constexpr int kMantBits = kE4M3 ? 3 : 2;
  static constexpr int kBias = kE4M3 ? 7 : 15;
  static constexpr uint32_t kMaxCode = kE4M3 ? 0x7Eu : 0x7Bu;
};

template <bool kE4M3>
uint8_t encode(float y) {
  return kE4M3 ? to_e4m3(y) : to_e5m2(y);
}

template <bool kE4M3, bool kAmax>
float cast_scalar(const float* x, int64_t n, float scale, uint8_t* q) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (kAmax) {
      const float v = std::fabs(x[i]);
      m = v > m ? v : m;  // false for NaN: NaN is ignored
    }
    q[i] = encode<kE4M3>(x[i] * scale);
  }
  return m;
}

template <bool kE4M3>
void decode_scalar(const uint8_t* q, int64_t n, float* out) {
  const float* table = kE4M3 ? e4m3_to_float_table() : e5m2_to_float_table();
  for (int64_t i = 0; i < n; ++i) out[i] = table[q[i]];
}

template <bool kE4M3>
void decode_transposed_scalar(const uint8_t* src, int64_t src_stride, int64_t rows, int64_t cols,
                              float* dst, int64_t dst_stride) {
  const float* table = kE4M3 ? e4m3_to_float_table() : e5m2_to_float_table();
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) dst[j * dst_stride + i] = table[src[i * src_stride + j]];
  }
}

#if OCTET_X86_SIMD
// GCC 12's intrinsics start from _mm512_undefined_*, which its uninitialized-use warnings flag.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// A 16x16 byte block through SSE2 registers: four rounds of interleaving row k with row k + 8.
// Seen as the 8-bit number (row, column), each round rotates it left by one bit, so four rounds
// swap row and column.
inline void transpose16x16_bytes(__m128i r[16]) {
  for (int round = 0; round < 4; ++round) {
    __m128i t[16];
    for (int k = 0; k < 8; ++k) {
      t[2 * k] = _mm_unpacklo_epi8(r[k], r[k + 8]);
      t[2 * k + 1] = _mm_unpackhi_epi8(r[k], r[k + 8]);
    }
    for (int k = 0; k < 16; ++k) r[k] = t[k];
  }
}

// ---- AVX-512 ----

#define OCTET_AVX512 __attribute__((target("avx512f")))

OCTET_AVX512 inline __m512i set1_512(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }

// 16 values y (already times the scale) -> their 16 codes, as runtime/fp8.h's to_e4m3/to_e5m2.
template <bool kE4M3>
OCTET_AVX512 inline __m128i encode16_avx512(__m512 y) {
  using F = Format<kE4M3>;
  const __m512i u = _mm512_castps_si512(y);
  const __m512i a = _mm512_and_si512(u, set1_512(0x7FFFFFFFu));
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), set1_512(0x80u));
  // round_magnitude_rne: both the normal and the subnormal candidate, one selected per lane.
  const __m512i exp = _mm512_srli_epi32(a, 23);
  const __mmask16 normal = _mm512_cmpge_epi32_mask(exp, set1_512(128 - F::kBias));
  const __m512i norm = _mm512_sub_epi32(a, set1_512(static_cast<uint32_t>(127 - F::kBias) << 23));
  const __m512i sig =
      _mm512_or_si512(_mm512_and_si512(a, set1_512(0x7FFFFFu)), set1_512(0x800000u));
  const __m512i sub_shift = _mm512_min_epi32(
      _mm512_sub_epi32(set1_512(151 - F::kBias - F::kMantBits), exp), set1_512(31));
  const __m512i v = _mm512_mask_blend_epi32(normal, sig, norm);
  const __m512i shift = _mm512_mask_blend_epi32(normal, sub_shift, set1_512(23 - F::kMantBits));
  const __m512i lsb = _mm512_and_si512(_mm512_srlv_epi32(v, shift), set1_512(1));
  const __m512i half_minus_1 = _mm512_sub_epi32(
      _mm512_sllv_epi32(set1_512(1), _mm512_sub_epi32(shift, set1_512(1))), set1_512(1));
  __m512i code = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(v, half_minus_1), lsb), shift);
  code = _mm512_min_epu32(code, set1_512(F::kMaxCode));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, set1_512(0x7F800000u));
  const __m512i result = _mm512_mask_blend_epi32(nan, _mm512_or_si512(sign, code), set1_512(0x7Fu));
  return _mm512_cvtepi32_epi8(result);
}

template <bool kE4M3, bool kAmax>
OCTET_AVX512 float cast_avx512(const float* x, int64_t n, float scale, uint8_t* q) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512i abs_mask = set1_512(0x7FFFFFFFu);
  __m512 m = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    if (kAmax) {
      // max_ps returns its second operand when either is NaN: a NaN |x| leaves m as it was.
      const __m512 v = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(xv), abs_mask));
      m = _mm512_max_ps(v, m);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     encode16_avx512<kE4M3>(_mm512_mul_ps(xv, vscale)));
  }
  const float head = kAmax ? _mm512_reduce_max_ps(m) : 0.f;
  const float tail = cast_scalar<kE4M3, kAmax>(x + i, n - i, scale, q + i);
  return tail > head ? tail : head;
}

// 16 codes -> their exact values, as runtime/fp8.h's from_e4m3/from_e5m2.
template <bool kE4M3>
OCTET_AVX512 inline __m512 decode16_avx512(__m128i codes) {
  const __m512i b = _mm512_cvtepu8_epi32(codes);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, set1_512(0x80u)), 24);
  const __m512i em = _mm512_and_si512(b, set1_512(0x7Fu));
  __m512i bits;
  if (kE4M3) {
    const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(em, 20), set1_512(120u << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(0x1p-9f));
    bits = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(em, set1_512(8)), normal,
                                   _mm512_castps_si512(sub));
    bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(em, set1_512(0x7Fu)), bits,
                                   set1_512(0x7FC00000u));
  } else {
    // from_f16 of the half b << 8.
    const __m512i h = _mm512_slli_epi32(em, 8);
    const __m512i exp = _mm512_srli_epi32(h, 10);
    const __m512i mant = _mm512_and_si512(h, set1_512(0x3FFu));
    const __m512i quiet = _mm512_maskz_mov_epi32(
        _mm512_cmpneq_epi32_mask(mant, _mm512_setzero_si512()), set1_512(0x00400000u));
    const __m512i special =
        _mm512_or_si512(_mm512_or_si512(set1_512(0x7F800000u), _mm512_slli_epi32(mant, 13)), quiet);
    const __m512i normal = _mm512_mask_blend_epi32(
        _mm512_cmpeq_epi32_mask(exp, set1_512(31)),
        _mm512_add_epi32(_mm512_slli_epi32(h, 13), set1_512(112u << 23)), special);
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(h), _mm512_set1_ps(0x1p-24f));
    bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(exp, _mm512_setzero_si512()), normal,
                                   _mm512_castps_si512(sub));
  }
  return _mm512_castsi512_ps(_mm512_or_si512(sign, bits));
}

template <bool kE4M3>
OCTET_AVX512 void decode_avx512(const uint8_t* q, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    _mm512_storeu_ps(out + i, decode16_avx512<kE4M3>(codes));
  }
  decode_scalar<kE4M3>(q + i, n - i, out + i);
}

template <bool kE4M3>
OCTET_AVX512 void decode_transposed_avx512(const uint8_t* src, int64_t src_stride, int64_t rows,
                                           int64_t cols, float* dst, int64_t dst_stride) {
  const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
  for (int64_t i = 0; i < full_rows; i += 16) {
    for (int64_t j = 0; j < full_cols; j += 16) {
      __m128i r[16];
      for (int k = 0; k < 16; ++k) {
        r[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (i + k) * src_stride + j));
      }
      transpose16x16_bytes(r);  // r[k]: column j + k, rows i..i+15
      for (int k = 0; k < 16; ++k) {
        _mm512_storeu_ps(dst + (j + k) * dst_stride + i, decode16_avx512<kE4M3>(r[k]));
      }
    }
  }
  // The ragged right and bottom edges.
  decode_transposed_scalar<kE4M3>(src + full_cols, src_stride, rows, cols - full_cols,
                                  dst + full_cols * dst_stride, dst_stride);
  decode_transposed_scalar<kE4M3>(src + full_rows * src_stride, src_stride, rows - full_rows,
                                  full_cols, dst + full_rows, dst_stride);
}

// ---- AVX2 ----

#define OCTET_AVX2 __attribute__((target("avx2")))

OCTET_AVX2 inline __m256i set1_256(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }

// 8 values y -> their 8 codes, one per 32-bit lane. Signed compares suffice: every compared value
// is below 2^31.
template <bool kE4M3>
OCTET_AVX2 inline __m256i encode8_avx2(__m256 y) {
  using F = Format<kE4M3>;
  const __m256i u = _mm256_castps_si256(y);
  const __m256i a = _mm256_and_si256(u, set1_256(0x7FFFFFFFu));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), set1_256(0x80u));
  const __m256i exp = _mm256_srli_epi32(a, 23);
  const __m256i normal = _mm256_cmpgt_epi32(exp, set1_256(127 - F::kBias));  // exp >= 128 - bias
  const __m256i norm = _mm256_sub_epi32(a, set1_256(static_cast<uint32_t>(127 - F::kBias) << 23));
  const __m256i sig =
      _mm256_or_si256(_mm256_and_si256(a, set1_256(0x7FFFFFu)), set1_256(0x800000u));
  const __m256i sub_shift = _mm256_min_epi32(
      _mm256_sub_epi32(set1_256(151 - F::kBias - F::kMantBits), exp), set1_256(31));
  const __m256i v = _mm256_blendv_epi8(sig, norm, normal);
  const __m256i shift = _mm256_blendv_epi8(sub_shift, set1_256(23 - F::kMantBits), normal);
  const __m256i lsb = _mm256_and_si256(_mm256_srlv_epi32(v, shift), set1_256(1));
  const __m256i half_minus_1 = _mm256_sub_epi32(
      _mm256_sllv_epi32(set1_256(1), _mm256_sub_epi32(shift, set1_256(1))), set1_256(1));
  __m256i code = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(v, half_minus_1), lsb), shift);
  code = _mm256_min_epu32(code, set1_256(F::kMaxCode));
  const __m256i nan = _mm256_cmpgt_epi32(a, set1_256(0x7F800000u));
  return _mm256_blendv_epi8(_mm256_or_si256(sign, code), set1_256(0x7Fu), nan);
}

// 32 codes in the 32-bit lanes of c0..c3 (each < 256) -> 32 bytes in order.
OCTET_AVX2 inline __m256i pack_codes_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  // The packs work within 128-bit halves: dwords come out as c0[0:4] c1[0:4] c2[0:4] c3[0:4]
  // c0[4:8] c1[4:8] c2[4:8] c3[4:8].
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

OCTET_AVX2 inline float max_lanes_avx2(__m256 m) {
  __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  r = _mm_max_ps(r, _mm_movehl_ps(r, r));
  r = _mm_max_ss(r, _mm_shuffle_ps(r, r, 1));
  return _mm_cvtss_f32(r);
}

template <bool kE4M3, bool kAmax>
OCTET_AVX2 float cast_avx2(const float* x, int64_t n, float scale, uint8_t* q) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256i abs_mask = set1_256(0x7FFFFFFFu);
  __m256 m = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 xv = _mm256_loadu_ps(x + i + 8 * k);
      if (kAmax) {
        // As in cast_avx512: a NaN |x| leaves m as it was.
        const __m256 v = _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(xv), abs_mask));
        m = _mm256_max_ps(v, m);
      }
      c[k] = encode8_avx2<kE4M3>(_mm256_mul_ps(xv, vscale));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), pack_codes_avx2(c[0], c[1], c[2], c[3]));
  }
  const float head = kAmax ? max_lanes_avx2(m) : 0.f;
  const float tail = cast_scalar<kE4M3, kAmax>(x + i, n - i, scale, q + i);
  return tail > head ? tail : head;
}

// 8 codes (the low 8 bytes of `codes`) -> their exact values.
template <bool kE4M3>
OCTET_AVX2 inline __m256 decode8_avx2(__m128i codes) {
  const __m256i b = _mm256_cvtepu8_epi32(codes);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, set1_256(0x80u)), 24);
  const __m256i em = _mm256_and_si256(b, set1_256(0x7Fu));
  __m256i bits;
  if (kE4M3) {
    const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(em, 20), set1_256(120u << 23));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(0x1p-9f));
    bits =
        _mm256_blendv_epi8(normal, _mm256_castps_si256(sub), _mm256_cmpgt_epi32(set1_256(8), em));
    bits = _mm256_blendv_epi8(bits, set1_256(0x7FC00000u), _mm256_cmpeq_epi32(em, set1_256(0x7Fu)));
  } else {
    const __m256i h = _mm256_slli_epi32(em, 8);
    const __m256i exp = _mm256_srli_epi32(h, 10);
    const __m256i mant = _mm256_and_si256(h, set1_256(0x3FFu));
    const __m256i quiet = _mm256_andnot_si256(_mm256_cmpeq_epi32(mant, _mm256_setzero_si256()),
                                              set1_256(0x00400000u));
    const __m256i special =
        _mm256_or_si256(_mm256_or_si256(set1_256(0x7F800000u), _mm256_slli_epi32(mant, 13)), quiet);
    const __m256i normal =
        _mm256_blendv_epi8(_mm256_add_epi32(_mm256_slli_epi32(h, 13), set1_256(112u << 23)),
                           special, _mm256_cmpeq_epi32(exp, set1_256(31)));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(h), _mm256_set1_ps(0x1p-24f));
    bits = _mm256_blendv_epi8(normal, _mm256_castps_si256(sub),
                              _mm256_cmpeq_epi32(exp, _mm256_setzero_si256()));
  }
  return _mm256_castsi256_ps(_mm256_or_si256(sign, bits));
}

template <bool kE4M3>
OCTET_AVX2 void decode_avx2(const uint8_t* q, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    _mm256_storeu_ps(out + i, decode8_avx2<kE4M3>(codes));
  }
  decode_scalar<kE4M3>(q + i, n - i, out + i);
}

// Rows [0, kRows) x columns [0, cols) of src (cols a multiple of 16), kRows 16 or 8, decoded
// into dst transposed. For 8 rows the byte transpose's other half is zeros, and only the first
// 8 values of each column are stored.
template <bool kE4M3, int kRows>
OCTET_AVX2 void decode_rows_transposed_avx2(const uint8_t* src, int64_t src_stride, int64_t cols,
                                            float* dst, int64_t dst_stride) {
  for (int64_t j = 0; j < cols; j += 16) {
    __m128i r[16];
    for (int k = 0; k < 16; ++k) {
      r[k] = k < kRows ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k * src_stride + j))
                       : _mm_setzero_si128();
    }
    transpose16x16_bytes(r);  // r[k]: column j + k
    for (int k = 0; k < 16; ++k) {
      float* out = dst + (j + k) * dst_stride;
      _mm256_storeu_ps(out, decode8_avx2<kE4M3>(r[k]));
      if (kRows == 16) _mm256_storeu_ps(out + 8, decode8_avx2<kE4M3>(_mm_srli_si128(r[k], 8)));
    }
  }
}

template <bool kE4M3>
OCTET_AVX2 void decode_transposed_avx2(const uint8_t* src, int64_t src_stride, int64_t rows,
                                       int64_t cols, float* dst, int64_t dst_stride) {
  const int64_t full_cols = cols / 16 * 16;
  int64_t full_rows = 0;
  for (; full_rows + 16 <= rows; full_rows += 16) {
    decode_rows_transposed_avx2<kE4M3, 16>(src + full_rows * src_stride, src_stride, full_cols,
                                           dst + full_rows, dst_stride);
  }
  // A block of 8 more (a 24-wide sliver of B is 16 + 8 rows).
  if (full_rows + 8 <= rows) {
    decode_rows_transposed_avx2<kE4M3, 8>(src + full_rows * src_stride, src_stride, full_cols,
                                          dst + full_rows, dst_stride);
    full_rows += 8;
  }
  decode_transposed_scalar<kE4M3>(src + full_cols, src_stride, rows, cols - full_cols,
                                  dst + full_cols * dst_stride, dst_stride);
  decode_transposed_scalar<kE4M3>(src + full_rows * src_stride, src_stride, rows - full_rows,
                                  full_cols, dst + full_rows, dst_stride);
}

#pragma GCC diagnostic pop
#endif  // OCTET_X86_SIMD

void transpose_bytes_scalar(const uint8_t* src, int64_t src_stride, int64_t rows, int64_t cols,
                            uint8_t* dst, int64_t dst_stride) {
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
}

SimdPath widest_available() {
#if OCTET_X86_SIMD
  if (__builtin_cpu_supports("avx512f")) return SimdPath::kAvx512;
  if (__builtin_cpu_supports("avx2")) return SimdPath::kAvx2;
#endif
  return SimdPath::kScalar;
}

// Read once per block by the conversions; written only by set_fp8_simd_path.
std::atomic<SimdPath>& path_slot() {
  static std::atomic<SimdPath> slot{default_simd_path()};
  return slot;
}

template <bool kE4M3, bool kAmax>
float cast_dispatch(const float* x, int64_t n, float scale, uint8_t* q) {
  switch (path_slot().load(std::memory_order_relaxed)) {
#if OCTET_X86_SIMD
    case SimdPath::kAvx512:
      return cast_avx512<kE4M3, kAmax>(x, n, scale, q);
    case SimdPath::kAvx2:
      return cast_avx2<kE4M3, kAmax>(x, n, scale, q);
#endif
    default:
      return cast_scalar<kE4M3, kAmax>(x, n, scale, q);
  }
}

}  // namespace

constexpr Named<SimdPath> kSimdPaths[] = {
    {SimdPath::kScalar, "scalar"}, {SimdPath::kAvx2, "avx2"}, {SimdPath::kAvx512, "avx512"}};
const char* simd_path_name(SimdPath path) { return name_in(kSimdPaths, path).data(); }

bool simd_path_available(SimdPath path) {
  return static_cast<int>(path) <= static_cast<int>(widest_available());
}

SimdPath default_simd_path() {
  const SimdPath widest = widest_available();
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (cap == nullptr) return widest;
  std::string isa(cap);
  for (char& ch : isa) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (isa.rfind("AVX2", 0) == 0) return std::min(widest, SimdPath::kAvx2);
  if (isa == "SSE41" || isa == "AVX") return SimdPath::kScalar;
  return widest;
}

SimdPath fp8_simd_path() { return path_slot().load(std::memory_order_relaxed); }

SimdPath set_fp8_simd_path(SimdPath path) {
  OCTET_CHECK(simd_path_available(path), "set_fp8_simd_path: this processor has no ",
              simd_path_name(path), " (widest: ", simd_path_name(widest_available()), ")");
  return path_slot().exchange(path);
}

float cast_fp8_amax(DType fp8, const float* x, int64_t n, float scale, uint8_t* q) {
  return fp8 == DType::kE4M3 ? cast_dispatch<true, true>(x, n, scale, q)
                             : cast_dispatch<false, true>(x, n, scale, q);
}

void cast_fp8(DType fp8, const float* x, int64_t n, float scale, uint8_t* q) {
  if (fp8 == DType::kE4M3) {
    cast_dispatch<true, false>(x, n, scale, q);
  } else {
    cast_dispatch<false, false>(x, n, scale, q);
  }
}

void fp8_to_f32(DType fp8, const uint8_t* q, int64_t n, float* out) {
  const bool e4m3 = fp8 == DType::kE4M3;
  switch (fp8_simd_path()) {
#if OCTET_X86_SIMD
    case SimdPath::kAvx512:
      return e4m3 ? decode_avx512<true>(q, n, out) : decode_avx512<false>(q, n, out);
    case SimdPath::kAvx2:
      return e4m3 ? decode_avx2<true>(q, n, out) : decode_avx2<false>(q, n, out);
#endif
    default:
      return e4m3 ? decode_scalar<true>(q, n, out) : decode_scalar<false>(q, n, out);
  }
}

void fp8_to_f32_transposed(DType fp8, const uint8_t* src, int64_t src_stride, int64_t rows,
                           int64_t cols, float* dst, int64_t dst_stride) {
  const bool e4m3 = fp8 == DType::kE4M3;
  switch (fp8_simd_path()) {
#if OCTET_X86_SIMD
    case SimdPath::kAvx512:
      return e4m3 ? decode_transposed_avx512<true>(src, src_stride, rows, cols, dst, dst_stride)
                  : decode_transposed_avx512<false>(src, src_stride, rows, cols, dst, dst_stride);
    case SimdPath::kAvx2:
      return e4m3 ? decode_transposed_avx2<true>(src, src_stride, rows, cols, dst, dst_stride)
                  : decode_transposed_avx2<false>(src, src_stride, rows, cols, dst, dst_stride);
#endif
    default:
      return e4m3 ? decode_transposed_scalar<true>(src, src_stride, rows, cols, dst, dst_stride)
                  : decode_transposed_scalar<false>(src, src_stride, rows, cols, dst, dst_stride);
  }
}

void transpose_bytes(const uint8_t* src, int64_t src_stride, int64_t rows, int64_t cols,
                     uint8_t* dst, int64_t dst_stride) {
#if OCTET_X86_SIMD
  const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
  for (int64_t i = 0; i < full_rows; i += 16) {
    for (int64_t j = 0; j < full_cols; j += 16) {
      __m128i r[16];
      for (int k = 0; k < 16; ++k) {
        r[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (i + k) * src_stride + j));
      }
      transpose16x16_bytes(r);
      for (int k = 0; k < 16; ++k) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (j + k) * dst_stride + i), r[k]);
      }
    }
  }
  transpose_bytes_scalar(src + full_cols, src_stride, rows, cols - full_cols,
                         dst + full_cols * dst_stride, dst_stride);
  transpose_bytes_scalar(src + full_rows * src_stride, src_stride, rows - full_rows, full_cols,
                         dst + full_rows, dst_stride);
#else
  transpose_bytes_scalar(src, src_stride, rows, cols, dst, dst_stride);
#endif
}

}  // namespace octet::cpu
