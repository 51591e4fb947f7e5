// An f64 model of Quartet II's backward cast, written from the method's definition (arXiv
// 2601.22813 and docs/recipes.md), for the kernel and module tests: the 128-point random-sign
// Hadamard transform as a matrix product, and MS-EDEN (E2M1 to nearest by CUDA's host conversion,
// each 1x16 block's scale corrected by <u, u> / <u, q>, the tensor's decode scale max / 256, each
// block scale rounded stochastically between its E4M3 neighbours, enumerated from the format).
// The signs and the uniforms are draws of octet's Philox stream (tested on its own).
#pragma once

#include <bit>
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

}  // namespace octet::test::quartet2
