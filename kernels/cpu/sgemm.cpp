// octet's own f32 GEMM (kernels/cpu/sgemm.h). A row-major f32 A is read in place by the
// micro-kernels; any other A (transposed, FP8, bf16, f16) is packed once per call (in chunks of
// whole row blocks, all of M at the layer shapes) into micro-panels (kb, kMr), K block by K
// block, by the pool's threads together, and shared by every task. Then the loops, outermost
// first:
//   jc: N in panels of up to kPanelFloats / K columns; B's panel is packed once, all of K, into
//       slivers of kNr columns (K, kNr), by the pool's threads together;
//   tasks: the panel's (mc-row block, range of slivers) pairs, claimed by any thread;
//   groups of slivers, then pc: K in blocks of kc;
//   jr, ir: slivers, then micro-panels: one micro-kernel call adds a (kMr, kNr) tile's kc products.
// An output element is summed by one task, over the K blocks in order, so its bits depend on the
// shape alone. Conversion to f32 happens in the packing: FP8 through the vector decoders of
// kernels/cpu/fp8_simd.h, bf16 and f16 by the dtype's rule, transposing where the layout needs it.
#include "kernels/cpu/sgemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OCTET_GEMM_X86 1
#else
#define OCTET_GEMM_X86 0
#endif

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace octet::cpu {
namespace {

// ---- f32 transpose ----

void transpose_scalar(const float* src, int64_t src_stride, int64_t n_src_rows, int64_t n_src_cols,
                      float* dst, int64_t dst_stride) {
  for (int64_t j = 0; j < n_src_cols; ++j) {
    for (int64_t i = 0; i < n_src_rows; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
}

#if OCTET_GEMM_X86
// GCC 12's unpack intrinsics start from _mm512_undefined_ps, which -Wuninitialized flags.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// A 16x16 block in registers, transposed in place: pairs of rows interleave (unpack), then 4-row
// groups (shuffle_ps), then 128-bit lanes twice (shuffle_f32x4): the classic transpose network.
__attribute__((target("avx512f"))) inline void transpose16_regs(__m512 r[16]) {
  __m512 t[16], u[16], v[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3
    const __m512 lo = t[4 * g], hi = t[4 * g + 1], lo2 = t[4 * g + 2], hi2 = t[4 * g + 3];
    u[4 * g + 0] = _mm512_shuffle_ps(lo, lo2, 0x44);  // columns 0, 4, 8, 12 of the 4 rows
    u[4 * g + 1] = _mm512_shuffle_ps(lo, lo2, 0xEE);  // columns 1, 5, 9, 13
    u[4 * g + 2] = _mm512_shuffle_ps(hi, hi2, 0x44);  // columns 2, 6, 10, 14
    u[4 * g + 3] = _mm512_shuffle_ps(hi, hi2, 0xEE);  // columns 3, 7, 11, 15
  }
  for (int c = 0; c < 4; ++c) {                                 // column c of each 4-column group
    v[4 * c + 0] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);  // cols c, c+8; rows 0-7
    v[4 * c + 1] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);  // cols c+4, c+12; rows 0-7
    v[4 * c + 2] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);  // cols c, c+8; rows 8-15
    v[4 * c + 3] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);  // cols c+4, c+12; rows 8-15
  }
  for (int c = 0; c < 4; ++c) {
    r[c + 0] = _mm512_shuffle_f32x4(v[4 * c], v[4 * c + 2], 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(v[4 * c], v[4 * c + 2], 0xDD);
    r[c + 4] = _mm512_shuffle_f32x4(v[4 * c + 1], v[4 * c + 3], 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(v[4 * c + 1], v[4 * c + 3], 0xDD);
  }
}

__attribute__((target("avx512f"))) void transpose16_avx512(const float* src, int64_t src_stride,
                                                           float* dst, int64_t dst_stride) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_stride);
  transpose16_regs(r);
  for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + j * dst_stride, r[j]);
}

// A packed panel from up to 16 stored rows: dst[j * dst_stride + i] = src[i * src_stride + j]
// for j < cols, i < width (16 at most), zero for i >= rows.
__attribute__((target("avx512f"))) void transpose_panel_avx512(const float* src, int64_t src_stride,
                                                               int rows, int64_t cols, float* dst,
                                                               int64_t dst_stride, int width) {
  const __mmask16 out_mask = static_cast<__mmask16>((1u << width) - 1);
  __m512 r[16];
  for (int64_t j0 = 0; j0 < cols; j0 += 16) {
    const int64_t n = std::min<int64_t>(16, cols - j0);
    const __mmask16 in_mask = static_cast<__mmask16>((1u << n) - 1);
    for (int i = 0; i < 16; ++i) {
      r[i] = i < rows ? _mm512_maskz_loadu_ps(in_mask, src + i * src_stride + j0)
                      : _mm512_setzero_ps();
    }
    transpose16_regs(r);
    for (int64_t j = 0; j < n; ++j)
      _mm512_mask_storeu_ps(dst + (j0 + j) * dst_stride, out_mask, r[j]);
  }
}

// Columns j (the low 8 floats of `both`) and j + 4 (the high 8) of an 8-row panel, those < n.
__attribute__((target("avx512f"))) inline void store_column_pair(__m512 both, int64_t j, int64_t n,
                                                                 float* d, int64_t dst_stride) {
  if (j < n) _mm256_storeu_ps(d + j * dst_stride, _mm512_castps512_ps256(both));
  if (j + 4 < n) {
    _mm256_storeu_ps(d + (j + 4) * dst_stride,
                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(both), 1)));
  }
}

// An A micro-panel of AVX-512's 8 rows: dst[j * dst_stride + i] = src[i * src_stride + j] for
// j < cols, i < 8, zero for i >= rows. 8 rows x 16 columns at a time: pairs of rows interleave
// (unpack), then 4-row groups (shuffle_ps) give, in 128-bit lane l, column 4l + c of rows 0-3
// (u[c]) and of rows 4-7 (u[4 + c]); one two-source permute puts each column's 8 rows together,
// two columns a register. Half the shuffles of the 16x16 network on a half-empty block, and no
// masked stores.
__attribute__((target("avx512f"))) void transpose_panel8_avx512(const float* src,
                                                                int64_t src_stride, int rows,
                                                                int64_t cols, float* dst,
                                                                int64_t dst_stride) {
  // Lanes 0 and 1 of the first source with lanes 0 and 1 of the second (columns c and 4 + c),
  // and lanes 2 and 3 likewise (columns 8 + c and 12 + c).
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64_t j0 = 0; j0 < cols; j0 += 16) {
    const int64_t n = std::min<int64_t>(16, cols - j0);
    const __mmask16 in_mask = n == 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << n) - 1);
    __m512 r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) {
      r[i] = i < rows ? _mm512_maskz_loadu_ps(in_mask, src + i * src_stride + j0)
                      : _mm512_setzero_ps();
    }
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; ++g) {
      u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
      u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
      u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
      u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    float* d = dst + j0 * dst_stride;
    for (int c = 0; c < 4; ++c) {
      store_column_pair(_mm512_permutex2var_ps(u[c], first, u[4 + c]), c, n, d, dst_stride);
      store_column_pair(_mm512_permutex2var_ps(u[c], second, u[4 + c]), 8 + c, n, d, dst_stride);
    }
  }
}

// AVX2: an 8x8 block in registers, transposed in place: pairs of rows interleave (unpack), then
// 4-row groups (shuffle_ps), then the 128-bit halves swap across the two 4-row groups
// (permute2f128).
__attribute__((target("avx2"))) inline void transpose8_regs(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) {  // rows 4g..4g+3: columns (c, c + 4) of the 4 rows
    u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);      // columns 0, 4
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);      // columns 1, 5
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);  // columns 2, 6
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);  // columns 3, 7
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

__attribute__((target("avx2"))) void transpose8_avx2(const float* src, int64_t src_stride,
                                                     float* dst, int64_t dst_stride) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  transpose8_regs(r);
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + j * dst_stride, r[j]);
}

// transpose_panel_avx512's contract on AVX2: 8 stored rows at a time, 8 columns at a time through
// registers; a ragged block goes through a zeroed stack copy (no masked moves, which AMD
// processors run slowly).
__attribute__((target("avx2"))) void transpose_panel_avx2(const float* src, int64_t src_stride,
                                                          int rows, int64_t cols, float* dst,
                                                          int64_t dst_stride, int width) {
  alignas(32) float block[8][8];
  for (int i0 = 0; i0 < width; i0 += 8) {
    const int h = std::min(8, rows - i0), w = std::min(8, width - i0);  // rows read, written
    for (int64_t j0 = 0; j0 < cols; j0 += 8) {
      const int64_t n = std::min<int64_t>(8, cols - j0);
      __m256 r[8];
      if (n == 8) {  // whole rows of 8: the rows past h are zero
        for (int i = 0; i < 8; ++i) {
          r[i] = i < h ? _mm256_loadu_ps(src + (i0 + i) * src_stride + j0) : _mm256_setzero_ps();
        }
      } else {
        for (int i = 0; i < 8; ++i) {
          for (int j = 0; j < 8; ++j) {
            block[i][j] = i < h && j < n ? src[(i0 + i) * src_stride + j0 + j] : 0.f;
          }
          r[i] = _mm256_load_ps(block[i]);
        }
      }
      transpose8_regs(r);
      for (int64_t j = 0; j < n; ++j) {
        float* d = dst + (j0 + j) * dst_stride + i0;
        if (w == 8) {
          _mm256_storeu_ps(d, r[j]);
        } else {
          _mm256_store_ps(block[0], r[j]);
          std::memcpy(d, block[0], static_cast<size_t>(w) * sizeof(float));
        }
      }
    }
  }
}
#pragma GCC diagnostic pop
#endif

// ---- the micro-kernel paths ----

SimdPath widest_gemm_path() {
#if OCTET_GEMM_X86
  if (__builtin_cpu_supports("avx512f")) return SimdPath::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdPath::kAvx2;
#endif
  return SimdPath::kScalar;
}

// ONEDNN_MAX_CPU_ISA caps oneDNN's JIT; octet's kernels follow it (cpu::default_simd_path).
SimdPath default_gemm_path() {
  return std::min(default_simd_path(), widest_gemm_path());  // the AVX2 path needs FMA too
}

std::atomic<SimdPath>& gemm_path_slot() {
  static std::atomic<SimdPath> slot{default_gemm_path()};
  return slot;
}

// Each micro-kernel: acc (kMr, kNr) = sum over p < kc of A(r, p) * b[p * kNr + j], then
// for r < rows, j < cols: c[r * ldc + j] = alpha * acc (kOverwrite) or, adding, fma(alpha, acc, c)
// on the SIMD paths and alpha * acc + c on the portable one.
// `b` is packed and padded with zeros to whole tiles; A(r, p) is read packed or in place (ARows;
// `lda`, A's row stride, is read in place only); `c` only has rows x cols.

// The register tiles: AVX2 4 x 24 (12 ymm accumulators, 3 vectors wide), AVX-512 8 x 48 (24 zmm
// accumulators, 3 vectors wide); every layer GEMM's N, and M, are whole tiles. A tile's shape
// changes no bits: each element is summed over a K block in order whatever the tile.
constexpr int kAvx2Mr = 4, kAvx2Nv = 3, kAvx2Nr = 8 * kAvx2Nv;
// How far ahead (in floats) the AVX2 kernel prefetches its B micro-panel. A K block of 768 makes
// the panel 72 KiB, more than a 32 KiB L1, so every call of a sliver reads it from L2 again,
// where the hardware prefetcher falls behind. A step of the 4 x 24 tile reads a line and a half
// of B, so it prefetches two (one of them often again). Measurements: docs/perf.
constexpr int64_t kAvx2PrefetchB = 1024;
constexpr int kAvx512Mr = 8, kAvx512Nv = 3, kAvx512Nr = 16 * kAvx512Nv;

// Where a micro-kernel reads its A panel: packed (kInPlace false), element (r, p) at
// a[p * kMr + r], padded with zeros to kMr rows; or in place in a row-major f32 A (true),
// at a[r * lda + p], rows past `rows` reading the last row again (their sums are never stored).
// The products and their order are the same either way, so are the bits.
template <int kMr, bool kInPlace>
struct ARows {
  const float* row[kInPlace ? kMr : 1];
  ARows(const float* a, int64_t lda, int rows) {
    if constexpr (kInPlace) {
      for (int r = 0; r < kMr; ++r) row[r] = a + std::min(r, rows - 1) * lda;
    } else {
      row[0] = a;
    }
  }
  const float* ptr(int r, int64_t p) const {
    if constexpr (kInPlace) return row[r] + p;
    return row[0] + p * kMr + r;
  }
  float at(int r, int64_t p) const { return *ptr(r, p); }
};

// Portable: plain loops that the compiler vectorises for the baseline instruction set.
constexpr int kScalarMr = 4, kScalarNr = 16;
template <bool kInPlace>
void kernel_scalar(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                   const float* alpha, bool add, int rows, int cols) {
  float acc[kScalarMr][kScalarNr] = {};
  const ARows<kScalarMr, kInPlace> ar(a, lda, rows);
  for (int64_t p = 0; p < kc; ++p) {
    for (int r = 0; r < kScalarMr; ++r) {
      const float av = ar.at(r, p);
      for (int j = 0; j < kScalarNr; ++j) acc[r][j] += av * b[j];
    }
    b += kScalarNr;
  }
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    for (int j = 0; j < cols; ++j) cr[j] = add ? *alpha * acc[r][j] + cr[j] : *alpha * acc[r][j];
  }
}

#if OCTET_GEMM_X86
// AVX2 + FMA: kMr rows x kNv vectors of 8 columns, kMr * kNv ymm accumulators. 4 x 24 rather than
// 6 x 16: the same 12 FMAs a step of K from 4 broadcasts and 3 loads of B, not 6 and 2. 12
// accumulators, 3 B vectors and the broadcast take all 16 ymm registers, so alpha comes by address
// and the K loop is not unrolled (unrolling gained nothing measurable; docs/perf).
template <int kMr, int kNv, bool kInPlace>
__attribute__((target("avx2,fma"))) void kernel_avx2(int64_t kc, const float* a, int64_t lda,
                                                     const float* b, float* c, int64_t ldc,
                                                     const float* alpha, bool add, int rows,
                                                     int cols) {
  constexpr int kNr = 8 * kNv;
  __m256 acc[kMr][kNv];
  const ARows<kMr, kInPlace> ar(a, lda, rows);
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) acc[r][v] = _mm256_setzero_ps();
  }
#pragma GCC unroll 1
  for (int64_t p = 0; p < kc; ++p) {
    // B's lines a step, kAvx2PrefetchB floats ahead (it may run past the sliver: a prefetch
    // does not fault).
    _mm_prefetch(reinterpret_cast<const char*>(b + kAvx2PrefetchB), _MM_HINT_T0);
    if constexpr (kNv > 2)
      _mm_prefetch(reinterpret_cast<const char*>(b + kAvx2PrefetchB + 16), _MM_HINT_T0);
    __m256 bv[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < kMr; ++r) {
      const __m256 av = _mm256_broadcast_ss(ar.ptr(r, p));
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    b += kNr;
  }
  const __m256 va = _mm256_set1_ps(*alpha);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mask[kNv];
#pragma GCC unroll 4
  for (int v = 0; v < kNv; ++v) {
    mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8 * v), lane);
  }
  // Masked moves only at the ragged right edge: AMD processors run vmaskmovps stores slowly.
  const bool full = cols == kNr;
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) break;
    float* cr = c + r * ldc;
    if (full) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        const __m256 out = add ? _mm256_fmadd_ps(va, acc[r][v], _mm256_loadu_ps(cr + 8 * v))
                               : _mm256_mul_ps(va, acc[r][v]);
        _mm256_storeu_ps(cr + 8 * v, out);
      }
      continue;
    }
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      const __m256 out =
          add ? _mm256_fmadd_ps(va, acc[r][v], _mm256_maskload_ps(cr + 8 * v, mask[v]))
              : _mm256_mul_ps(va, acc[r][v]);
      _mm256_maskstore_ps(cr + 8 * v, mask[v], out);
    }
  }
}

// AVX-512: kMr rows x kNv vectors of 16 columns, kMr * kNv zmm accumulators (a core that runs a
// zmm FMA as two 256-bit halves still issues half the instructions of AVX2).
// kBStride: the packed B's row length (a narrower kernel serves the ragged last sliver of a
// wider one: the same products in the same order, so the same bits).
template <int kMr, int kNv, bool kInPlace, int kBStride = 16 * kNv>
__attribute__((target("avx512f"))) void kernel_avx512(int64_t kc, const float* a, int64_t lda,
                                                      const float* b, float* c, int64_t ldc,
                                                      const float* alpha, bool add, int rows,
                                                      int cols) {
  constexpr int kNr = 16 * kNv;
  __m512 acc[kMr][kNv];
  const ARows<kMr, kInPlace> ar(a, lda, rows);
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) acc[r][v] = _mm512_setzero_ps();
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    __m512 bv[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < kMr; ++r) {
      const __m512 av = _mm512_set1_ps(ar.at(r, p));
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    b += kBStride;
  }
  const __m512 va = _mm512_set1_ps(*alpha);
  __mmask16 mask[kNv];
#pragma GCC unroll 4
  for (int v = 0; v < kNv; ++v) {
    const int left = cols - 16 * v;
    mask[v] = left >= 16 ? 0xFFFF : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
  }
#pragma GCC unroll 16
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) break;
    float* cr = c + r * ldc;
    if (cols == kNr) {
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        const __m512 out = add ? _mm512_fmadd_ps(va, acc[r][v], _mm512_loadu_ps(cr + 16 * v))
                               : _mm512_mul_ps(va, acc[r][v]);
        _mm512_storeu_ps(cr + 16 * v, out);
      }
      continue;
    }
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      const __m512 out =
          add ? _mm512_fmadd_ps(va, acc[r][v], _mm512_maskz_loadu_ps(mask[v], cr + 16 * v))
              : _mm512_mul_ps(va, acc[r][v]);
      _mm512_mask_storeu_ps(cr + 16 * v, mask[v], out);
    }
  }
}
#endif

// alpha is passed by address: read after the K loop, it holds no register through it (AVX2's
// 4 x 24 tile and its operands take all 16 ymm registers).
using KernelFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t,
                          const float*, bool, int, int);

// A path's micro-kernel and block sizes: kc, the K block (a B micro-panel kc x nr, read from L2
// or L1 by every micro-kernel call of a sliver); mc, the rows of an A block (kc x mc of it in
// L2); group, the slivers whose part of C (mc x group x nr) stays in L2 over all of K. Chosen
// from sweeps over the layer GEMMs against oneDNN (docs/perf/2026-12-cpu-gemm.md); a larger kc
// reloads each C tile fewer times (K / kc). Only kc changes bits; AVX2's mc follows the L2 size
// so that its A block fits.
struct Kernels {
  KernelFn full;
  // For a last sliver of at most 16 and 32 columns, when the path has them (else `full`).
  KernelFn k16 = nullptr, k32 = nullptr;

  KernelFn for_columns(int cols) const {
    if (cols <= 16 && k16 != nullptr) return k16;
    if (cols <= 32 && k32 != nullptr) return k32;
    return full;
  }
};
struct Path {
  Kernels packed, in_place;  // A packed, or read in place (see ARows)
  int mr, nr;
  int64_t mc, kc, group;
};

// The A block's rows for a K block of kc on AVX2: three quarters of L2 (at kc 768: 252 rows of a
// 1 MiB L2, 126 of a 512 KiB one), in whole micro-panels.
int64_t avx2_block_rows(int64_t kc) {
  static const int64_t l2 = [] {
#ifdef _SC_LEVEL2_CACHE_SIZE
    const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (bytes > 0) return static_cast<int64_t>(bytes);
#endif
    return int64_t{512} << 10;
  }();
  const int64_t rows = l2 * 3 / 4 / (kc * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>(8 * kAvx2Mr, rows / kAvx2Mr * kAvx2Mr);
}

#if OCTET_GEMM_X86
template <bool kInPlace>
Kernels avx512_kernels() {
  return {kernel_avx512<kAvx512Mr, kAvx512Nv, kInPlace>,
          kernel_avx512<kAvx512Mr, 1, kInPlace, kAvx512Nr>,
          kernel_avx512<kAvx512Mr, 2, kInPlace, kAvx512Nr>};
}
#endif

Path path_for(SimdPath simd) {
  switch (simd) {
#if OCTET_GEMM_X86
    case SimdPath::kAvx512:
      return {avx512_kernels<false>(), avx512_kernels<true>(), kAvx512Mr, kAvx512Nr, 384, 384, 1};
    case SimdPath::kAvx2:
      return {{kernel_avx2<kAvx2Mr, kAvx2Nv, false>},
              {kernel_avx2<kAvx2Mr, kAvx2Nv, true>},
              kAvx2Mr,
              kAvx2Nr,
              avx2_block_rows(768),
              768,
              8};
#endif
    default:
      return {{kernel_scalar<false>}, {kernel_scalar<true>}, kScalarMr, kScalarNr, 64, 256, 4};
  }
}

// ---- workspaces ----

// Packed operands, kept between calls (a training step would otherwise fault fresh pages in every
// GEMM). Counted under MemTag::kWorkspace while held.
struct PackBuffer {
  Tensor t;
  float* get(int64_t elements) {
    if (!t.defined() || t.numel() < elements) {
      t = Tensor();  // free before allocating the larger one
      MemTagScope tag(MemTag::kWorkspace);
      t = Tensor::empty({elements}, DType::kF32);
    }
    return t.data_as<float>();
  }
};
// The FP8 A panels' decoded groups (pack_a), each worker's own.
thread_local PackBuffer t_fp8_group;

// ---- packing, with the conversion to f32 ----

// dst[j * dst_stride + i] = value(src[i * src_stride + j]) for i < rows, j < cols: a stored
// block, converted and transposed.
void convert_transposed(DType dtype, const void* src, int64_t src_stride, int64_t rows,
                        int64_t cols, float* dst, int64_t dst_stride) {
  if (dtype == DType::kF32) {
    transpose_f32(static_cast<const float*>(src), src_stride, rows, cols, dst, dst_stride);
  } else if (is_fp8(dtype)) {
    fp8_to_f32_transposed(dtype, static_cast<const uint8_t*>(src), src_stride, rows, cols, dst,
                          dst_stride);
  } else {
    const size_t es = dtype_size(dtype);
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        dst[j * dst_stride + i] =
            load_as_f32(dtype, p + i * src_stride * es, static_cast<size_t>(j));
      }
    }
  }
}

// dst[i] = value(src[i]) for i < n.
inline void convert_row(DType dtype, const void* src, int64_t n, float* dst) {
  if (dtype == DType::kF32) {
    const auto* f = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = f[i];  // short rows: no call
  } else {
    to_f32(dtype, src, dst, n);
  }
}

// A packed panel from `rows` <= width stored rows of `cols` elements:
// dst[j * dst_stride + i] = value(src[i * src_stride + j]) for j < cols, i < width, zero for
// i >= rows.
void pack_transposed(DType dtype, const void* src, int64_t src_stride, int64_t rows, int64_t cols,
                     float* dst, int64_t dst_stride, int width) {
#if OCTET_GEMM_X86
  if (dtype == DType::kF32 && width <= 16) {
    const SimdPath path = gemm_simd_path();
    if (path == SimdPath::kAvx512 && width == 8) {
      transpose_panel8_avx512(static_cast<const float*>(src), src_stride, static_cast<int>(rows),
                              cols, dst, dst_stride);
      return;
    }
    if (path == SimdPath::kAvx512) {
      transpose_panel_avx512(static_cast<const float*>(src), src_stride, static_cast<int>(rows),
                             cols, dst, dst_stride, width);
      return;
    }
    if (path == SimdPath::kAvx2) {
      transpose_panel_avx2(static_cast<const float*>(src), src_stride, static_cast<int>(rows), cols,
                           dst, dst_stride, width);
      return;
    }
  }
#endif
  convert_transposed(dtype, src, src_stride, rows, cols, dst, dst_stride);
  if (rows < width) {
    for (int64_t p = 0; p < cols; ++p) {
      std::fill(dst + p * dst_stride + rows, dst + p * dst_stride + width, 0.f);
    }
  }
}

// dtype_size without the call (element() runs once per packed row).
inline size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kE4M3:
    case DType::kE5M2:
      return 1;
    default:
      return dtype_size(dtype);
  }
}

inline const void* element(const GemmOperand& x, int64_t row, int64_t col) {
  return static_cast<const uint8_t*>(x.data) +
         static_cast<size_t>(row * x.ld + col) * element_size(x.dtype);
}

// Transposed B, stored (N, K): the sliver of logical columns [j0, j0 + width) (width <= nr), all
// K rows, into dst (K, nr), the columns from width on zero.
void pack_b_sliver(const GemmOperand& b, int64_t k, int64_t j0, int64_t width, int nr, float* dst) {
  for (int64_t j = 0; j < width; j += 16) {
    const int64_t h = std::min<int64_t>(16, width - j);
    pack_transposed(b.dtype, element(b, j0 + j, 0), b.ld, h, k, dst + j, nr,
                    static_cast<int>(std::min<int64_t>(16, nr - j)));
  }
  if (width < nr) {
    for (int64_t p = 0; p < k; ++p) std::fill(dst + p * nr + width, dst + (p + 1) * nr, 0.f);
  }
}

// Untransposed B, stored (K, N): logical rows [p0, p1) of the panel's columns [j0, j0 + width)
// into every sliver (slivers, K, nr), sliver by sliver: each sliver's rows are written front to
// back. (Row by row across all the slivers wrote K * nr * 4 bytes apart, a multiple of 4 KiB at
// the layer shapes: one L1 set for every sliver's line.)
void pack_b_rows(const GemmOperand& b, int64_t k, int64_t p0, int64_t p1, int64_t j0, int64_t width,
                 int nr, float* dst) {
  for (int64_t j = 0; j < width; j += nr) {
    const int64_t w = std::min<int64_t>(nr, width - j);
    float* d = dst + (j / nr) * k * nr;
    for (int64_t p = p0; p < p1; ++p) {
      convert_row(b.dtype, element(b, p, j0 + j), w, d + p * nr);
      std::fill(d + p * nr + w, d + (p + 1) * nr, 0.f);
    }
  }
}

constexpr int64_t kPrefetchRows = 4;

// pack_a for f32 A stored (K, M), with kMr a constant. A strip of kStrip stored columns (whole
// panels and whole cache lines of a stored row) at a time, down all of the block's K: every line
// of A is read once and every panel written front to back. (Row by row across all the panels
// would write lines kb * kMr * 4 bytes apart, a multiple of 4 KiB at kb = 384 or 768: all in one
// L1 set, evicting each other between the two halves of a line.)
template <int kMr>
void pack_a_transposed_f32(const float* src, int64_t ld, int64_t rows, int64_t kb, float* dst) {
  constexpr int64_t kStrip = std::lcm<int64_t>(kMr, 16);
  constexpr int64_t kPanels = kStrip / kMr;
  const int64_t panel_floats = kb * kMr;
  for (int64_t r0 = 0; r0 < rows; r0 += kStrip) {
    const int64_t strip = std::min(kStrip, rows - r0);
    float* d = dst + r0 / kMr * panel_floats;
    const float* s = src + r0;
    if (strip < kStrip) {  // the block's last rows: whole panels, the last one padded with zeros
      const int64_t panels = (strip + kMr - 1) / kMr;
      for (int64_t p = 0; p < kb; ++p) {
        for (int64_t q = 0; q < panels; ++q) {
          for (int r = 0; r < kMr; ++r) {
            const int64_t i = q * kMr + r;
            d[q * panel_floats + p * kMr + r] = i < strip ? s[p * ld + i] : 0.f;
          }
        }
      }
      continue;
    }
    for (int64_t p = 0; p < kb; ++p, s += ld) {
      // The stored rows are far apart (a page or more at the layer shapes): fetch the strip
      // kPrefetchRows rows ahead while this one is copied.
      if (p + kPrefetchRows < kb) {
        for (int64_t r = 0; r < kStrip; r += 16) __builtin_prefetch(s + kPrefetchRows * ld + r);
      }
      for (int64_t q = 0; q < kPanels; ++q) {
        std::memcpy(d + q * panel_floats + p * kMr, s + q * kMr, kMr * sizeof(float));
      }
    }
  }
}

// The A block of logical rows [i0, i0 + rows), K columns [k0, k0 + kb): micro-panels (kb, mr), one
// per mr rows, the rows past the block's end zero.
// dst[p * kMr + r] = src[p * src_stride + r] for p < kb, r < kMr: a full panel out of a decoded
// group (a fixed-size copy a row, not element by element).
template <int kMr>
void copy_panel(const float* src, int64_t src_stride, int64_t kb, float* dst) {
  for (int64_t p = 0; p < kb; ++p)
    std::memcpy(dst + p * kMr, src + p * src_stride, kMr * sizeof(float));
}

void pack_a(const GemmOperand& a, int64_t i0, int64_t rows, int64_t k0, int64_t kb, int mr,
            float* dst) {
  if (a.transposed && a.dtype == DType::kF32) {
    const auto* src = static_cast<const float*>(element(a, k0, i0));
    if (mr == kAvx2Mr) return pack_a_transposed_f32<kAvx2Mr>(src, a.ld, rows, kb, dst);
    if (mr == kAvx512Mr) return pack_a_transposed_f32<kAvx512Mr>(src, a.ld, rows, kb, dst);
    if (mr == kScalarMr) return pack_a_transposed_f32<kScalarMr>(src, a.ld, rows, kb, dst);
  }
  if (a.transposed) {
    // Stored (K, M): a stored row holds, for one k, every panel's rows. Read each once, in order.
    for (int64_t p = 0; p < kb; ++p) {
      float* d = dst + p * mr;
      for (int64_t r0 = 0; r0 < rows; r0 += mr, d += kb * mr) {
        const int64_t h = std::min<int64_t>(mr, rows - r0);
        convert_row(a.dtype, element(a, k0 + p, i0 + r0), h, d);
        std::fill(d + h, d + mr, 0.f);
      }
    }
    return;
  }
  if (is_fp8(a.dtype) && mr < 16) {
    // The vector FP8 decoders transpose 16 rows at a time, a panel has fewer: decode groups of
    // lcm(mr, 16) rows into a scratch block (kb, group), then copy each panel's columns out.
    const int64_t group = std::lcm<int64_t>(mr, 16);
    float* scratch = t_fp8_group.get(kb * group);
    for (int64_t g0 = 0; g0 < rows; g0 += group) {
      const int64_t h = std::min(group, rows - g0);
      fp8_to_f32_transposed(a.dtype, static_cast<const uint8_t*>(element(a, i0 + g0, k0)), a.ld, h,
                            kb, scratch, group);
      for (int64_t r0 = 0; r0 < h; r0 += mr, dst += kb * mr) {
        const int64_t w = std::min<int64_t>(mr, h - r0);
        if (w == mr && mr == kAvx2Mr) {
          copy_panel<kAvx2Mr>(scratch + r0, group, kb, dst);
        } else if (w == mr && mr == kAvx512Mr) {
          copy_panel<kAvx512Mr>(scratch + r0, group, kb, dst);
        } else {
          for (int64_t p = 0; p < kb; ++p) {
            const float* from = scratch + p * group + r0;
            float* to = dst + p * mr;
            for (int64_t r = 0; r < mr; ++r) to[r] = r < w ? from[r] : 0.f;
          }
        }
      }
    }
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += mr, dst += kb * mr) {
    const int64_t h = std::min<int64_t>(mr, rows - r0);
    pack_transposed(a.dtype, element(a, i0 + r0, k0), a.ld, h, kb, dst, mr, mr);
  }
}

thread_local PackBuffer t_packed_b;  // the calling thread's panel of B
thread_local PackBuffer t_packed_a;  // the calling thread's chunk of A

// A panel of packed B holds at most this many floats (K x panel width), 16 MiB: within L3 with
// room, and all of N at every layer shape.
constexpr int64_t kPanelFloats = int64_t{4} << 20;

// The work of one task at least (see sgemm): as the oneDNN tiles' 2 MFLOP (kernels/cpu/gemm.cpp).
constexpr double kTaskFlops = 2e6;

}  // namespace

void transpose_f32(const float* src, int64_t src_stride, int64_t n_src_rows, int64_t n_src_cols,
                   float* dst, int64_t dst_stride) {
#if OCTET_GEMM_X86
  const SimdPath path = gemm_simd_path();
  if (path == SimdPath::kAvx512 || path == SimdPath::kAvx2) {
    const int64_t b = path == SimdPath::kAvx512 ? 16 : 8;  // the register block
    const int64_t full_rows = n_src_rows / b * b, full_cols = n_src_cols / b * b;
    for (int64_t i = 0; i < full_rows; i += b) {
      for (int64_t j = 0; j < full_cols; j += b) {
        if (b == 16) {
          transpose16_avx512(src + i * src_stride + j, src_stride, dst + j * dst_stride + i,
                             dst_stride);
        } else {
          transpose8_avx2(src + i * src_stride + j, src_stride, dst + j * dst_stride + i,
                          dst_stride);
        }
      }
    }
    // The ragged right and bottom edges.
    transpose_scalar(src + full_cols, src_stride, n_src_rows, n_src_cols - full_cols,
                     dst + full_cols * dst_stride, dst_stride);
    transpose_scalar(src + full_rows * src_stride, src_stride, n_src_rows - full_rows, full_cols,
                     dst + full_rows, dst_stride);
    return;
  }
#endif
  transpose_scalar(src, src_stride, n_src_rows, n_src_cols, dst, dst_stride);
}

namespace {
std::atomic<CpuGemmLibrary>& library_slot() {
  static std::atomic<CpuGemmLibrary> slot{[] {
    const char* v = std::getenv("OCTET_CPU_GEMM");
    const std::string name = v == nullptr ? "" : v;
    OCTET_CHECK(name.empty() || name == "octet" || name == "onednn", "OCTET_CPU_GEMM=", name,
                ": expected octet (the default) or onednn");
    return name == "onednn" ? CpuGemmLibrary::kOnednn : CpuGemmLibrary::kOctet;
  }()};
  return slot;
}
}  // namespace

CpuGemmLibrary cpu_gemm_library() { return library_slot().load(std::memory_order_relaxed); }
CpuGemmLibrary set_cpu_gemm_library(CpuGemmLibrary library) {
  return library_slot().exchange(library);
}

SimdPath gemm_simd_path() { return gemm_path_slot().load(std::memory_order_relaxed); }

SimdPath set_gemm_simd_path(SimdPath path) {
  OCTET_CHECK(static_cast<int>(path) <= static_cast<int>(widest_gemm_path()),
              "set_gemm_simd_path: ", simd_path_name(path), " is not available on this processor");
  return gemm_path_slot().exchange(path);
}

void sgemm(int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a, const GemmOperand& b,
           GemmUpdate update, float* c, int64_t ldc) {
  OCTET_ASSERT(m > 0 && n > 0 && k > 0);
  const Path path = path_for(gemm_simd_path());
  const int mr = path.mr, nr = path.nr;
  // M in blocks of at most path.mc rows, all of about one size (whole micro-panels): a last block
  // of a few rows would read all of packed B for little work, and be the task that ends last
  // (M = 768 on AVX2's 126-row blocks had a last one of 12 rows). Changes no bits.
  const int64_t mc_max = std::max<int64_t>(mr, path.mc / mr * mr);
  const int64_t row_blocks = (m + mc_max - 1) / mc_max;
  const int64_t even_rows = (m + row_blocks - 1) / row_blocks;
  const int64_t mc = std::min(mc_max, (even_rows + mr - 1) / mr * mr);
  const int64_t kc = path.kc;
  const int64_t k_blocks = (k + kc - 1) / kc;
  // Grain by work: a task holds about kTaskFlops of products or more (starting one costs a few
  // microseconds, more on a busy machine), and a GEMM under two tasks' worth runs on the calling
  // thread alone, packing included.
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool inline_only = flops < 2 * kTaskFlops;
  auto tasks = [&](int64_t count, auto&& fn) {
    if (inline_only) {
      for (int64_t t = 0; t < count; ++t) fn(t);
    } else {
      parallel_tasks(count, [&](int64_t t) { fn(t); });
    }
  };
  const int64_t panel = std::max<int64_t>(nr, kPanelFloats / k / nr * nr);
  // A in chunks of whole mc-row blocks, each chunk packed once and shared by every task; all of
  // M at every layer shape.
  const int64_t chunk_rows = std::max<int64_t>(mc, kPanelFloats / k / mc * mc);
  const bool one_chunk = chunk_rows >= m;

  // Packs rows [c0, c0 + rows) of A: block by block, each (K blocks, panels, kb, mr), the block
  // starting at i * k for its first row i (relative to the chunk), tasks of one (block, K block).
  // A row-major f32 A is read in place by the micro-kernels: nothing to convert, and its rows are
  // what a packed panel would hold, read as kMr streams (packing them would write a copy of A
  // through memory).
  const bool a_in_place = a.dtype == DType::kF32 && !a.transposed;
  const Kernels& kernels = a_in_place ? path.in_place : path.packed;
  float* packed_a =
      a_in_place ? nullptr : t_packed_a.get(((std::min(chunk_rows, m) + mr - 1) / mr * mr) * k);
  auto pack_a_chunk = [&](int64_t c0, int64_t rows) {
    const int64_t blocks = (rows + mc - 1) / mc;
    tasks(blocks * k_blocks, [&](int64_t t) {
      const int64_t i = t / k_blocks * mc, k0 = t % k_blocks * kc;
      const int64_t block_rows = std::min(mc, rows - i);
      const int64_t rows_padded = (block_rows + mr - 1) / mr * mr;
      pack_a(a, c0 + i, block_rows, k0, std::min(kc, k - k0), mr,
             packed_a + i * k + k0 * rows_padded);
    });
  };
  if (one_chunk && !a_in_place) pack_a_chunk(0, m);

  for (int64_t jc = 0; jc < n; jc += panel) {
    const int64_t width = std::min(panel, n - jc);
    const int64_t slivers = (width + nr - 1) / nr;
    float* packed_b = t_packed_b.get(slivers * k * nr);  // (slivers, K, nr)
    if (b.transposed) {
      tasks(slivers, [&](int64_t s) {
        pack_b_sliver(b, k, jc + s * nr, std::min<int64_t>(nr, width - s * nr), nr,
                      packed_b + s * k * nr);
      });
    } else {
      // About 64 KiB of B a task.
      const int64_t rows_per_task = std::max<int64_t>(1, (int64_t{16} << 10) / width);
      tasks((k + rows_per_task - 1) / rows_per_task, [&](int64_t t) {
        pack_b_rows(b, k, t * rows_per_task, std::min(k, (t + 1) * rows_per_task), jc, width, nr,
                    packed_b);
      });
    }

    for (int64_t c0 = 0; c0 < m; c0 += chunk_rows) {
      const int64_t chunk = std::min(chunk_rows, m - c0);
      if (!one_chunk && !a_in_place) pack_a_chunk(c0, chunk);
      const int64_t m_blocks = (chunk + mc - 1) / mc;
      // Enough tasks for every thread to have a few, of kTaskFlops or more (the split changes no
      // bits: each tile is summed by one task whatever the split, and A is packed once whatever
      // the split).
      const double block_flops = 2.0 * static_cast<double>(std::min(mc, chunk)) *
                                 static_cast<double>(width) * static_cast<double>(k);
      const int64_t n_parts =
          std::clamp<int64_t>(std::min<int64_t>((8 * num_threads() + m_blocks - 1) / m_blocks,
                                                static_cast<int64_t>(block_flops / kTaskFlops)),
                              1, slivers);
      tasks(m_blocks * n_parts, [&](int64_t t) {
        const int64_t i = t / n_parts * mc, rows = std::min(mc, chunk - i);
        const int64_t part = t % n_parts;
        const int64_t s0 = slivers * part / n_parts, s1 = slivers * (part + 1) / n_parts;
        const int64_t rows_padded = (rows + mr - 1) / mr * mr;
        // In place: row r, column p at a_rows[r * lda + p]; packed: see pack_a_chunk.
        const float* a_rows =
            a_in_place ? static_cast<const float*>(a.data) + (c0 + i) * a.ld : packed_a + i * k;
        const int64_t lda = a_in_place ? a.ld : 0;
        float* c_block = c + (c0 + i) * ldc + jc;
        // A group of slivers at a time, over all of K, so that its part of C (rows x group
        // width) stays in L2 between the K blocks.
        for (int64_t g0 = s0; g0 < s1; g0 += path.group) {
          const int64_t g1 = std::min(s1, g0 + path.group);
          for (int64_t k0 = 0; k0 < k; k0 += kc) {
            const int64_t kb = std::min(kc, k - k0);
            const float* ak = a_in_place ? a_rows + k0 : a_rows + k0 * rows_padded;
            const bool add = update == GemmUpdate::kAdd || k0 > 0;
            for (int64_t s = g0; s < g1; ++s) {
              const float* bs = packed_b + s * k * nr + k0 * nr;
              const int cols = static_cast<int>(std::min<int64_t>(nr, width - s * nr));
              const KernelFn kernel = kernels.for_columns(cols);
              float* cs = c_block + s * nr;
              for (int64_t r0 = 0; r0 < rows; r0 += mr) {
                kernel(kb, a_in_place ? ak + r0 * lda : ak + r0 * kb, lda, bs, cs + r0 * ldc, ldc,
                       &alpha, add, static_cast<int>(std::min<int64_t>(mr, rows - r0)), cols);
              }
            }
          }
        }
      });
    }
  }
}

}  // namespace octet::cpu
