// NVFP4 on the CPU (TE's NVFP4BlockScaling): the 16-point random Hadamard transform, the
// two-level cast (f32 tensor scale from the amax, E4M3 scale per 1x16 block or 16x16 tile, E2M1
// values rounded to nearest or stochastically from octet's Philox stream), and the expansion the
// GEMM multiplies. The scale rules are runtime/fp8_scaling.h's.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/cpu/block_formats_cpu.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
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

float amax_of(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));  // fmax ignores NaN
  return m;
}

}  // namespace

void hadamard16(const float* x, int64_t n, bool inverse, float* y) {
  // Forward y = x · diag(s) H / 4; inverse x = y · H diag(s) / 4 (the transpose: R is orthogonal).
  // Each output is an exact sum of 16 terms x * (+-1/4) (f64 holds it), rounded once: the forward
  // transform to bf16, which is what TE's writes, the inverse (for dequantization) to f32.
  for (int64_t g = 0; g + kBlock <= n; g += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      double sum = 0;
      for (int i = 0; i < kBlock; ++i) {
        const int sign =
            inverse ? hadamard_sign(i, j) * sign_of(j) : sign_of(i) * hadamard_sign(i, j);
        sum += static_cast<double>(x[g + i]) * (0.25 * sign);
      }
      y[g + j] = inverse ? static_cast<float>(sum) : from_bf16(to_bf16(static_cast<float>(sum)));
    }
  }
}

void quantize_nvfp4(const Tensor& x, const ops::NVFP4Cast& c, Tensor& data, Tensor& scales,
                    Tensor& amax, FP8CastCounts* counts) {
  const int64_t rows = x.rows(), cols = x.cols();
  const int64_t blocks = cols / kBlock;
  // The values the cast sees: x, or its transform along the rows (bf16-rounded).
  std::vector<float> v(static_cast<size_t>(rows * cols));
  to_f32(x.dtype(), x.data(), v.data(), rows * cols);
  if (c.hadamard) {
    parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; ++r) {
        hadamard16(v.data() + r * cols, cols, false, row.data());
        std::copy(row.begin(), row.end(), v.begin() + r * cols);
      }
    });
  }
  // The tensor amax is a max: the same whatever the split, so the parallel result is exact.
  std::vector<float> partial_amax(static_cast<size_t>(num_threads()), 0.f);
  parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    float& m = partial_amax[static_cast<size_t>(parallel_chunk())];
    m = std::fmax(m, amax_of(v.data() + r0 * cols, (r1 - r0) * cols));
  });
  float tensor_amax = 0.f;
  for (float m : partial_amax) tensor_amax = std::fmax(tensor_amax, m);
  *amax.data_as<float>() = tensor_amax;
  const NVFP4GlobalScale global = nvfp4_global_scale(tensor_amax);

  uint8_t* q = data.data_as<uint8_t>();
  uint8_t* sf = scales.data_as<uint8_t>();
  std::fill(sf, sf + scales.numel(), uint8_t{0});  // the layout's padding stays 0
  const int64_t stride = scales.size(1);
  const int64_t band = c.tiles_2d ? kBlock : 1;
  std::vector<FP8CastCounts> partial(static_cast<size_t>(num_threads()));
  parallel_for(0, rows / band, 1, [&](int64_t b0, int64_t b1) {
    FP8CastCounts& mine = partial[static_cast<size_t>(parallel_chunk())];
    std::vector<uint8_t> codes(static_cast<size_t>(kBlock));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * band;
      for (int64_t cb = 0; cb < blocks; ++cb) {
        const int64_t c0 = cb * kBlock;
        float bamax = 0.f;
        for (int64_t r = r0; r < r0 + band; ++r) {
          bamax = std::fmax(bamax, amax_of(v.data() + r * cols + c0, kBlock));
        }
        const uint8_t code = nvfp4_block_scale(bamax, global.multiplier);
        const float enc = nvfp4_block_encode(code, global.decode);
        for (int64_t r = r0; r < r0 + band; ++r) {
          sf[r * stride + cb] = code;  // a tile's 16 rows carry its one scale
          const float* in = v.data() + r * cols + c0;
          for (int64_t i = 0; i < kBlock; ++i) {
            const float y = in[i] * enc;
            // Element (r, c0 + i)'s draw of the stream: the same for any thread count.
            const uint64_t index = c.offset + static_cast<uint64_t>(r * cols + c0 + i);
            codes[static_cast<size_t>(i)] =
                c.stochastic ? e2m1_stochastic(y, detail::philox_word(c.seed, index)) : to_e2m1(y);
            mine.saturated += std::fabs(y) > kE2M1Max ? 1 : 0;
            mine.flushed +=
                (in[i] != 0.f && !std::isnan(in[i]) && (codes[static_cast<size_t>(i)] & 0x7u) == 0)
                    ? 1
                    : 0;
          }
          for (int64_t i = 0; i < kBlock; i += 2) {
            q[r * (cols / 2) + (c0 + i) / 2] =
                pack_e2m1(codes[static_cast<size_t>(i)], codes[static_cast<size_t>(i + 1)]);
          }
          mine.total += kBlock;
        }
      }
    }
  });
  if (counts != nullptr) {
    for (const FP8CastCounts& p : partial) *counts += p;
  }
}

void transpose_nvfp4_tiles(const Tensor& data, const Tensor& scales, int64_t rows, int64_t cols,
                           Tensor& out_data, Tensor& out_scales) {
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

void expand_nvfp4(const Tensor& data, const Tensor& scales, const Tensor* amax, Tensor& out) {
  const int64_t rows = out.rows(), cols = out.cols();
  const uint8_t* q = data.data_as<uint8_t>();
  const uint8_t* sf = scales.data_as<uint8_t>();
  const int64_t stride = scales.size(1);
  // TE's dequantization folds the tensor scale into each block's: RN(RN(sf * amax) / 2688), as a
  // product with RN(1 / 2688); the GEMM's expansion leaves it out (alpha carries it).
  const float global_amax = amax != nullptr ? *amax->data_as<float>() : 0.f;
  const float inv_2688 = detail::bits_to_float(0x39C30C31u);
  auto* po = static_cast<uint8_t*>(out.data());
  const size_t es = out.element_size();
  parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 std::vector<float> row(static_cast<size_t>(cols));
                 for (int64_t r = r0; r < r1; ++r) {
                   for (int64_t cb = 0; cb < cols / kBlock; ++cb) {
                     float s = from_e4m3(sf[r * stride + cb]);
                     if (amax != nullptr) s = (s * global_amax) * inv_2688;
                     for (int64_t i = 0; i < kBlock; ++i) {
                       const int64_t c = cb * kBlock + i;
                       const uint8_t byte = q[r * (cols / 2) + c / 2];
                       const uint8_t code = (c & 1) ? byte >> 4 : byte & 0xFu;
                       row[static_cast<size_t>(c)] = from_e2m1(code) * s;
                     }
                   }
                   from_f32(row.data(), out.dtype(), po + r * cols * es, cols);
                 }
               });
}

}  // namespace octet::cpu
