// An f64 model of Quartet II's casts, written from the method's definition (arXiv 2601.22813 and
// docs/recipes.md), for the kernel and module tests. The forward: 1x16 blocks to nearest, with or
// without 4over6. The backward: the 128-point random-sign Hadamard transform as a matrix product,
// and MS-EDEN (E2M1 to nearest by CUDA's host conversion, each 1x16 block's scale corrected by
// <u, u> / <u, q>, the tensor's decode scale max / 256, each block scale rounded stochastically
// between its E4M3 neighbours, enumerated from the format). The signs and the uniforms are draws
// of octet's Philox stream (tested on its own).
#pragma once

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/philox.h"
#include "tests/support/test_util.h"

namespace octet::test::quartet2 {

inline double e4m3_value(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return (code & 0x80) ? -v : v;
}

inline double e2m1_value(uint8_t code) {
  static const double kMagnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 0x8) ? -kMagnitude[code & 0x7] : kMagnitude[code & 0x7];
}

// Sign i of the transform whose signs start at draw `offset`: -1 when the draw's low bit is set.
inline double sign(uint64_t seed, uint64_t offset, int i) {
  return (detail::philox_word(seed, offset + static_cast<uint64_t>(i)) & 1u) ? -1.0 : 1.0;
}

// Each 128 values of every row of x (rows, cols): y_j = sum_i H[j][i] d_i x_i / sqrt(128), the
// Sylvester matrix H[j][i] = (-1)^popcount(i & j), in long double.
inline std::vector<double> rht128_rows(const std::vector<double>& x, int64_t rows, int64_t cols,
                                       uint64_t seed, uint64_t offset) {
  std::vector<double> y(x.size());
  const long double norm = 1.0L / std::sqrt(128.0L);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      for (int j = 0; j < 128; ++j) {
        long double s = 0;
        for (int i = 0; i < 128; ++i) {
          const long double h = (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -1 : 1;
          s += h * sign(seed, offset, i) * x[static_cast<size_t>(r * cols + c0 + i)];
        }
        y[static_cast<size_t>(r * cols + c0 + j)] = static_cast<double>(s * norm);
      }
    }
  }
  return y;
}

// One MS-EDEN cast of v (rows, cols) with the block draws from `offset`.
struct Cast {
  std::vector<uint8_t> codes;   // one E2M1 code per element
  std::vector<uint8_t> scales;  // one E4M3 code per row and block
  double decode = 0;            // g
  std::vector<double> values;   // e2m1 * e4m3 * g
};

// F = 6 / (17/16 * 0.93); the base scale amax / F keeps 5 significant bits (toward zero).
inline double base_scale(double amax) {
  if (amax == 0) return 0;
  int e = 0;
  const double fraction = std::frexp(amax / (6.0 / (17.0 / 16.0 * 0.93)), &e);
  return std::ldexp(std::floor(fraction * 32) / 32, e);
}

// E4M3 stochastic rounding of t in [0, 256]: the neighbours lo <= t < hi from the format's
// values, hi when the 24-bit uniform of `word` is below (t - lo) / (hi - lo).
inline uint8_t stochastic_e4m3(double t, uint32_t word) {
  uint8_t lo = 0;
  while (lo < 0x7E && e4m3_value(static_cast<uint8_t>(lo + 1)) <= t) ++lo;
  const double lo_v = e4m3_value(lo), hi_v = e4m3_value(static_cast<uint8_t>(lo + 1));
  if (lo_v == t) return lo;
  const double u = std::ldexp(static_cast<double>(word >> 8), -24);
  return u < (t - lo_v) / (hi_v - lo_v) ? static_cast<uint8_t>(lo + 1) : lo;
}

inline Cast eden(const std::vector<double>& v, int64_t rows, int64_t cols, uint64_t seed,
                 uint64_t offset) {
  const int64_t blocks = cols / 16;
  Cast c{std::vector<uint8_t>(v.size()), std::vector<uint8_t>(static_cast<size_t>(rows * blocks)),
         0, std::vector<double>(v.size())};
  std::vector<double> corrected(static_cast<size_t>(rows * blocks));
  for (int64_t k = 0; k < rows * blocks; ++k) {
    const double* x = v.data() + k * 16;
    double amax = 0;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[i]));
    const double m = base_scale(amax);
    if (m == 0) continue;  // codes 0, corrected 0
    double uu = 0, uq = 0;
    for (int i = 0; i < 16; ++i) {
      const double u = x[i] / m;
      const uint8_t code = test::reference_e2m1(static_cast<float>(u));
      c.codes[static_cast<size_t>(k * 16 + i)] = code;
      uu += u * u;
      uq += u * e2m1_value(code);
    }
    corrected[static_cast<size_t>(k)] = uq != 0 ? m * uu / uq : m;
  }
  double most = 0;
  for (double f : corrected) most = std::max(most, f);
  c.decode = most / 256;
  for (int64_t k = 0; k < rows * blocks; ++k) {
    const uint32_t word = detail::philox_word(seed, offset + static_cast<uint64_t>(k));
    const uint8_t sf =
        c.decode > 0 ? stochastic_e4m3(corrected[static_cast<size_t>(k)] / c.decode, word) : 0;
    c.scales[static_cast<size_t>(k)] = sf;
    for (int i = 0; i < 16; ++i) {
      const auto e = static_cast<size_t>(k * 16 + i);
      c.values[e] = e2m1_value(c.codes[e]) * e4m3_value(sf) * c.decode;
    }
  }
  return c;
}

// ---- The forward cast ----

// x rounded to f32: one f32 operation on f32 operands, computed in f64 and rounded once, is the
// f32 operation's result (f64 has more than 2 * 24 + 2 bits).
inline double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

inline uint8_t to_e4m3(double v) {
  return test::reference_cast(static_cast<float>(v), DType::kE4M3);
}
inline uint8_t to_e2m1(double v) { return test::reference_e2m1(static_cast<float>(v)); }

// One block's codes under scale code `sf`: each x / (sf * g) to nearest, as the reciprocal
// enc = min(RN(1 / RN(sf * g)), FLT_MAX) times x, rounded to f32.
inline void encode_block(const double* x, uint8_t sf, double decode, uint8_t* codes) {
  const double enc = std::min(f32(1.0 / f32(e4m3_value(sf) * decode)), double{FLT_MAX});
  for (int i = 0; i < 16; ++i) codes[i] = to_e2m1(f32(x[i] * enc));
}

// Quartet II's forward cast of v (rows, cols; f32 values), per 1x16 block of a row, to nearest, in
// TE's order of f32 operations. Without 4over6: the tensor scale g = amax / (6 * 448), each block's
// amax scaled to 6 (its scale e4m3(RN(amax_b * RN(RN(2688 / amax) * RN(1 / 6)))). With 4over6: g =
// amax / (6 * 256), two candidates per block, scaled to 6 (base = RN(RN(amax_b / 6) * RN(1536 /
// amax))) and to 4 (1.5 base), each capped at 448, and the one whose values RN(RN(RN(e2m1 * sf) *
// amax) / 1536) lie nearer x in squared error summed in element order kept (to 6 on a tie).
inline Cast forward(const std::vector<double>& v, int64_t rows, int64_t cols, bool four_over_six) {
  const int64_t blocks = cols / 16;
  Cast c{std::vector<uint8_t>(v.size()), std::vector<uint8_t>(static_cast<size_t>(rows * blocks)),
         0, std::vector<double>(v.size())};
  double amax = 0;
  for (double e : v) amax = std::max(amax, std::fabs(e));
  const double bound = four_over_six ? 256 : 448;
  const double encode = amax == 0 ? 1 : f32(6 * bound / amax);
  c.decode = f32(1 / encode);
  for (int64_t k = 0; k < rows * blocks; ++k) {
    const double* x = v.data() + k * 16;
    uint8_t* codes = c.codes.data() + k * 16;
    double bamax = 0;
    for (int i = 0; i < 16; ++i) bamax = std::max(bamax, std::fabs(x[i]));
    uint8_t sf = 0;
    if (!four_over_six) {
      sf = to_e4m3(f32(bamax * f32(encode * f32(1.0 / 6))));
      encode_block(x, sf, c.decode, codes);
    } else {
      const double base = f32(f32(bamax / 6) * encode);
      const uint8_t candidates[2] = {to_e4m3(std::min(f32(base * 1.5), 448.0)),
                                     to_e4m3(std::min(base, 448.0))};
      uint8_t cand_codes[2][16];
      double err[2] = {0, 0};
      for (int j = 0; j < 2; ++j) {
        encode_block(x, candidates[j], c.decode, cand_codes[j]);
        for (int i = 0; i < 16; ++i) {
          const double value =
              f32(f32(f32(e2m1_value(cand_codes[j][i]) * e4m3_value(candidates[j])) * amax) /
                  (6 * bound));
          const double d = f32(value - x[i]);
          err[j] = f32(err[j] + f32(d * d));
        }
      }
      const int kept = err[0] < err[1] ? 0 : 1;
      sf = candidates[kept];
      std::copy(cand_codes[kept], cand_codes[kept] + 16, codes);
    }
    c.scales[static_cast<size_t>(k)] = sf;
    for (int i = 0; i < 16; ++i) {
      c.values[static_cast<size_t>(k * 16 + i)] = e2m1_value(codes[i]) * e4m3_value(sf) * c.decode;
    }
  }
  return c;
}

}  // namespace octet::test::quartet2
