// NVFP4 on the CPU (TE's NVFP4BlockScaling): the 16-point random Hadamard transform, the
// two-level cast (f32 tensor scale from the amax, E4M3 scale per 1x16 block or 16x16 tile, E2M1
// values rounded to nearest or stochastically from octet's Philox stream), and the expansion the
// GEMM multiplies. The scale rules are runtime/fp8_scaling.h's.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "kernels/math/quartet2.h"
#include "runtime/fp8_scaling.h"
#include "runtime/parallel.h"
#include "runtime/philox.h"

namespace octet::cpu {
namespace {

constexpr int64_t kBlock = kNVFP4BlockLen;

// TE's fixed sign vector of the transform (bit i set: sign i is -1), shared by every layer.
constexpr uint32_t kHadamardSigns = 0xD7E8u;

// (-1)^popcount(i & j): the Sylvester Hadamard matrix of order 16.
int hadamard_sign(int i, int j) {
  return (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1 : 1;
}
int sign_of(int i) { return (kHadamardSigns >> i) & 1u ? -1 : 1; }

// The transform's coefficients, +-1/4: kForward[i][j] multiplies x[i] into y[j].
struct HadamardTable {
  double forward[kBlock][kBlock], inverse[kBlock][kBlock];
  HadamardTable() {
    for (int i = 0; i < kBlock; ++i) {
      for (int j = 0; j < kBlock; ++j) {
        forward[i][j] = 0.25 * sign_of(i) * hadamard_sign(i, j);
        inverse[i][j] = 0.25 * hadamard_sign(i, j) * sign_of(j);
      }
    }
  }
};
const HadamardTable& hadamard_table() {
  static const HadamardTable table;
  return table;
}

// Each byte's two E2M1 values (low nibble first).
struct E2M1PairTable {
  float pair[256][2];
  E2M1PairTable() {
    for (int b = 0; b < 256; ++b) {
      pair[b][0] = from_e2m1(static_cast<uint8_t>(b & 0xF));
      pair[b][1] = from_e2m1(static_cast<uint8_t>(b >> 4));
    }
  }
};
const E2M1PairTable& e2m1_pairs() {
  static const E2M1PairTable table;
  return table;
}

// Draws first .. first + 15 of the stream of `seed` (a Philox block serves four in a row).
void block_draws(uint64_t seed, uint64_t first, uint32_t* bits) {
  for (int64_t i = 0; i < kBlock;) {
    const uint64_t index = first + static_cast<uint64_t>(i);
    const detail::PhiloxBlock words = detail::philox_block(index / 4, seed);
    for (uint64_t w = index % 4; w < 4 && i < kBlock; ++w) bits[i++] = words.w[w];
  }
}

// One block of 16 values of a row: y = x * enc cast to E2M1 (to nearest, or stochastically with
// bits[i] for element i), packed two a byte into q; what saturated and flushed added to *counts
// (nullable). Cloned for AVX-512, where the 16 lanes run as one vector.
OCTET_VECTOR_CLONES void encode_block(const float* x, float enc, const uint32_t* bits, uint8_t* q,
                                      FP8CastCounts* counts) {
  float y[kBlock];
  uint8_t codes[kBlock];
  for (int64_t i = 0; i < kBlock; ++i) y[i] = x[i] * enc;
  if (bits == nullptr) {
    for (int64_t i = 0; i < kBlock; ++i) codes[i] = to_e2m1(y[i]);
  } else {
    for (int64_t i = 0; i < kBlock; ++i) codes[i] = e2m1_stochastic(y[i], bits[i]);
  }
  for (int64_t i = 0; i < kBlock; i += 2) q[i / 2] = pack_e2m1(codes[i], codes[i + 1]);
  if (counts == nullptr) return;
  int64_t saturated = 0, flushed = 0;
  for (int64_t i = 0; i < kBlock; ++i) {
    saturated += std::fabs(y[i]) > kE2M1Max;  // NaN compares false
    // A NaN casts to code 7, never to a zero.
    flushed += (x[i] != 0.f) & ((codes[i] & 0x7u) == 0);
  }
  counts->saturated += saturated;
  counts->flushed += flushed;
}

// 4over6's error of one row's block (runtime/fp8_scaling.h): x cast with `enc` into codes q (8
// bytes), the terms summed in element order.
float four_over_six_error(const float* x, const uint8_t* q, uint8_t sf, float amax, float e4m3_max,
                          bool squared) {
  const E2M1PairTable& table = e2m1_pairs();
  const float s = from_e4m3(sf);
  float err = 0.f;
  for (int64_t i = 0; i < kBlock / 2; ++i) {
    const float* pair = table.pair[q[i]];
    err += nvfp4_4over6_term(pair[0], s, amax, e4m3_max, x[2 * i], squared);
    err += nvfp4_4over6_term(pair[1], s, amax, e4m3_max, x[2 * i + 1], squared);
  }
  return err;
}

// A band's block (1 row, or a 16x16 tile's 16) under 4over6: both candidates cast, the nearer
// one's codes written to q (row stride `q_stride` bytes) and its scale code returned; what the kept
// cast saturated and flushed added to *counts (nullable).
uint8_t four_over_six_block(const float* v, int64_t cols, int64_t band, float amax, float bamax,
                            const NVFP4GlobalScale& global, const ops::NVFP4Cast& c, uint8_t* q,
                            int64_t q_stride, FP8CastCounts* counts) {
  const NVFP4ScalePair pair = nvfp4_4over6_scales(bamax, global.encode);
  const uint8_t codes[2] = {pair.map4, pair.map6};
  uint8_t q_cand[2][kBlock][kBlock / 2];
  float err[2][kBlock];
  FP8CastCounts cand_counts[2];  // each candidate's saturated and flushed elements
  for (int k = 0; k < 2; ++k) {
    const float enc = nvfp4_block_encode(codes[k], global.decode);
    for (int64_t r = 0; r < band; ++r) {
      encode_block(v + r * cols, enc, nullptr, q_cand[k][r],
                   counts != nullptr ? &cand_counts[k] : nullptr);
      err[k][r] = four_over_six_error(v + r * cols, q_cand[k][r], codes[k], amax, c.e4m3_max,
                                      c.squared_error);
    }
  }
  const float e4 = band == 1 ? err[0][0] : nvfp4_4over6_tile_sum(err[0]);
  const float e6 = band == 1 ? err[1][0] : nvfp4_4over6_tile_sum(err[1]);
  const int kept = e4 < e6 ? 0 : 1;  // a tie keeps map6
  for (int64_t r = 0; r < band; ++r) {
    std::copy(q_cand[kept][r], q_cand[kept][r] + kBlock / 2, q + r * q_stride);
  }
  if (counts != nullptr) *counts += cand_counts[kept];
  return codes[kept];
}

// y = x · R (or the inverse) per group of 16 values of x[0, n), n a multiple of 16.
void hadamard16_f32(const float* x, int64_t n, bool inverse, float* y) {
  // Forward y = x · diag(s) H / 4; inverse x = y · H diag(s) / 4 (the transpose: R is orthogonal).
  // Each output is a sum of 16 terms x * (+-1/4) in f64 (in the order of i), rounded once: the
  // forward transform to bf16, which is what TE's writes, the inverse (for dequantization) to f32.
  const HadamardTable& table = hadamard_table();
  const auto& m = inverse ? table.inverse : table.forward;
  for (int64_t g = 0; g + kBlock <= n; g += kBlock) {
    double sum[kBlock] = {};
    for (int i = 0; i < kBlock; ++i) {
      const double xi = x[g + i];
      for (int j = 0; j < kBlock; ++j) sum[j] += xi * m[i][j];  // vectorizes over j
    }
    for (int j = 0; j < kBlock; ++j) {
      y[g + j] =
          inverse ? static_cast<float>(sum[j]) : from_bf16(to_bf16(static_cast<float>(sum[j])));
    }
  }
}

}  // namespace

void CpuBackend::hadamard16(const Tensor& x, bool inverse, Tensor& out) const {
  std::vector<float> in(static_cast<size_t>(x.numel()));
  to_f32(x.dtype(), x.data(), in.data(), x.numel());
  hadamard16_f32(in.data(), x.numel(), inverse, out.data_as<float>());
}

void CpuBackend::quantize_nvfp4(const Tensor& x, const ops::NVFP4Cast& c, Tensor& data,
                                Tensor& scales, Tensor& amax, FP8CastCounts* counts) const {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t blocks = cols / kBlock;
  // The values the cast sees: x, or its transform along the rows (bf16-rounded).
  std::vector<float> v(static_cast<size_t>(rows * cols));
  to_f32(x.dtype(), x.data(), v.data(), rows * cols);
  if (c.hadamard) {
    parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; ++r) {
        hadamard16_f32(v.data() + r * cols, cols, false, row.data());
        std::copy(row.begin(), row.end(), v.begin() + r * cols);
      }
    });
  }
  // The tensor amax is a max: the same whatever the split, so the parallel result is exact.
  std::vector<float> partial_amax(static_cast<size_t>(num_threads()), 0.f);
  parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    float& m = partial_amax[static_cast<size_t>(parallel_chunk())];
    m = std::fmax(m, amax_f32(v.data() + r0 * cols, (r1 - r0) * cols));
  });
  float tensor_amax = 0.f;
  for (float m : partial_amax) tensor_amax = std::fmax(tensor_amax, m);
  *amax.data_as<float>() = tensor_amax;
  const NVFP4GlobalScale global = nvfp4_global_scale(tensor_amax, c.e4m3_max);

  uint8_t* q = data.data_as<uint8_t>();
  uint8_t* sf = scales.data_as<uint8_t>();
  std::fill(sf, sf + scales.numel(), uint8_t{0});  // the layout's padding stays 0
  const int64_t stride = scales.size(1);
  const int64_t band = c.tiles_2d ? kBlock : 1;
  std::vector<FP8CastCounts> partial(static_cast<size_t>(num_threads()));
  parallel_for(0, rows / band, 1, [&](int64_t b0, int64_t b1) {
    FP8CastCounts* mine = counts ? &partial[static_cast<size_t>(parallel_chunk())] : nullptr;
    uint32_t bits[kBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * band;
      for (int64_t cb = 0; cb < blocks; ++cb) {
        const int64_t c0 = cb * kBlock;
        float bamax = 0.f;
        for (int64_t r = r0; r < r0 + band; ++r) {
          const float m = amax_f32(v.data() + r * cols + c0, kBlock);
          bamax = m > bamax ? m : bamax;
        }
        if (c.four_over_six) {
          const uint8_t code =
              four_over_six_block(v.data() + r0 * cols + c0, cols, band, tensor_amax, bamax, global,
                                  c, q + r0 * (cols / 2) + c0 / 2, cols / 2, mine);
          for (int64_t r = r0; r < r0 + band; ++r) sf[r * stride + cb] = code;
          continue;
        }
        const uint8_t code = nvfp4_block_scale(bamax, global.multiplier);
        const float enc = nvfp4_block_encode(code, global.decode);
        for (int64_t r = r0; r < r0 + band; ++r) {
          sf[r * stride + cb] = code;  // a tile's 16 rows carry its one scale
          // Element (r, c)'s draw is offset + r * cols + c: the same for any thread count.
          if (c.stochastic)
            block_draws(c.seed, c.offset + static_cast<uint64_t>(r * cols + c0), bits);
          encode_block(v.data() + r * cols + c0, enc, c.stochastic ? bits : nullptr,
                       q + r * (cols / 2) + c0 / 2, mine);
        }
      }
    }
  });
  add_partial_counts(partial, rows * cols, counts);
}

void CpuBackend::rht128(const Tensor& x, uint64_t seed, uint64_t offset, bool inverse,
                        Tensor& out) const {
  const int64_t n = x.numel();
  // f32 is read in place; bf16 is widened once.
  std::vector<float> widened;
  const float* v = x.dtype() == DType::kF32 ? x.data_as<float>() : nullptr;
  if (v == nullptr) {
    widened.resize(static_cast<size_t>(n));
    to_f32(x.dtype(), x.data(), widened.data(), n);
    v = widened.data();
  }
  double signs[math::kRht128];
  for (int i = 0; i < math::kRht128; ++i) signs[i] = math::rht128_sign(seed, offset, i);
  float* y = out.data_as<float>();
  parallel_for(0, n / math::kRht128, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      math::rht128(v + c * math::kRht128, signs, inverse, y + c * math::kRht128);
    }
  });
}

void CpuBackend::quantize_nvfp4_eden(const Tensor& v, uint64_t seed, uint64_t offset, Tensor& data,
                                     Tensor& scales, Tensor& decode) const {
  const int64_t rows = v.rows(), cols = v.cols(), blocks = cols / kBlock;
  const float* x = v.data_as<float>();
  uint8_t* q = data.data_as<uint8_t>();
  uint8_t* sf = scales.data_as<uint8_t>();
  std::fill(sf, sf + scales.numel(), uint8_t{0});  // the layout's padding stays 0
  const int64_t stride = scales.size(1);
  // Pass one: codes and corrected scales; pass two: the scales under the tensor's decode scale.
  std::vector<float> corrected(static_cast<size_t>(rows * blocks));
  parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        corrected[static_cast<size_t>(r * blocks + b)] =
            math::eden_block(x + r * cols + b * kBlock, q + r * (cols / 2) + b * (kBlock / 2));
      }
    }
  });
  float most = 0.f;
  for (float f : corrected) most = f > most ? f : most;  // NaN ignored
  const float g = most * 0x1p-8f;
  *decode.data_as<float>() = g;
  parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const uint64_t draw = offset + static_cast<uint64_t>(r * blocks + b);
        sf[r * stride + b] = math::eden_scale_code(corrected[static_cast<size_t>(r * blocks + b)],
                                                   g, detail::philox_word(seed, draw));
      }
    }
  });
}

void CpuBackend::transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows,
                                       int64_t cols, Tensor& out_data, Tensor& out_scales) const {
  const uint8_t* q = data.data_as<uint8_t>();
  const uint8_t* sf = scales.data_as<uint8_t>();
  uint8_t* oq = out_data.data_as<uint8_t>();
  uint8_t* os = out_scales.data_as<uint8_t>();
  std::fill(oq, oq + out_data.numel(), uint8_t{0});
  std::fill(os, os + out_scales.numel(), uint8_t{0});
  const int64_t ss = scales.size(1), os_stride = out_scales.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = q[r * (cols / 2) + c / 2];
      const uint8_t code = (c & 1) ? byte >> 4 : byte & 0xFu;
      oq[c * (rows / 2) + r / 2] |= static_cast<uint8_t>((r & 1) ? code << 4 : code);
    }
  }
  // Tile (rb, cb)'s scale sits on each of its 16 rows, column cb; transposed: rows of cb, column
  // rb.
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t rb = 0; rb < rows / kBlock; ++rb) {
      os[c * os_stride + rb] = sf[(rb * kBlock) * ss + c / kBlock];
    }
  }
}

void CpuBackend::expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax,
                              float e4m3_max, Tensor& out) const {
  const int64_t rows = out.rows(), cols = out.cols();
  const uint8_t* q = data.data_as<uint8_t>();
  const uint8_t* sf = scales.data_as<uint8_t>();
  const int64_t stride = scales.size(1);
  // TE's dequantization folds the tensor scale into each block's: RN(RN(sf * amax) / 2688), as a
  // product with RN(1 / 2688) (1536 under the 256 bound); the GEMM's expansion leaves it out
  // (alpha carries it).
  const float global_amax = amax != nullptr ? *amax->data_as<float>() : 0.f;
  const float inv_divisor = 1.f / (kE2M1Max * e4m3_max);
  auto* po = static_cast<uint8_t*>(out.data());
  const size_t es = out.element_size();
  parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 const E2M1PairTable& table = e2m1_pairs();
                 std::vector<float> row(static_cast<size_t>(cols));
                 for (int64_t r = r0; r < r1; ++r) {
                   const uint8_t* bytes = q + r * (cols / 2);
                   for (int64_t cb = 0; cb < cols / kBlock; ++cb) {
                     float s = from_e4m3(sf[r * stride + cb]);
                     if (amax != nullptr) s = (s * global_amax) * inv_divisor;
                     float* out_block = row.data() + cb * kBlock;
                     for (int64_t i = 0; i < kBlock / 2; ++i) {
                       const float* pair = table.pair[bytes[cb * kBlock / 2 + i]];
                       out_block[2 * i] = pair[0] * s;
                       out_block[2 * i + 1] = pair[1] * s;
                     }
                   }
                   from_f32(row.data(), out.dtype(), po + r * cols * es, cols);
                 }
               });
}

}  // namespace octet::cpu
