// Dropout on the GPU with the CPU's Philox stream (runtime/philox.h): element i keeps when draw
// (offset + i) of `seed`'s stream, as a 24-bit uniform, is >= p, so the masks equal the CPU's bit
// for bit. One thread per Philox block: its four words serve four consecutive elements, loaded
// and stored as one access each where they are aligned. x, y, dy and dx are f32 or bf16.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/philox.h"

namespace octet::cuda {
namespace {

// Philox blocks first .. first + count - 1 cover draws offset .. offset + n - 1; word j of block
// k is draw 4k + j, element 4k + j - offset. `vector` (offset a multiple of 4, x, y and mask
// aligned): a block inside the range covers 4 aligned elements, loaded and stored at once.
__global__ void dropout_kernel(ActIn x, uint64_t seed, uint64_t offset, uint64_t first,
                               uint64_t count, float threshold, float keep_scale, ActOut y,
                               uint8_t* mask, uint64_t n, bool vector) {
  // uniform = (bits >> 8) * 2^-24 >= p, compared as (bits >> 8) >= p * 2^24 (exact: a power of
  // two scaling), through int32 as on the CPU (the value has 24 bits).
  auto keeps = [&](uint32_t word) {
    return static_cast<float>(static_cast<int32_t>(word >> 8)) >= threshold;
  };
  for (uint64_t k = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; k < count;
       k += uint64_t{gridDim.x} * blockDim.x) {
    const octet::detail::PhiloxBlock words = octet::detail::philox_block(first + k, seed);
    const uint64_t draw0 = 4 * (first + k);
    if (vector && draw0 - offset + 4 <= n) {  // draw0 >= offset: both are multiples of 4
      const uint64_t i = draw0 - offset;
      const Vec<float> xv = x.vec(i);
      Vec<float> yv;
      Vec<uint8_t> mv;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool keep = keeps(words.w[j]);
        mv.v[j] = keep ? 1 : 0;
        yv.v[j] = xv.v[j] * (keep ? keep_scale : 0.f);
      }
      y.set_vec(i, yv);
      store_vec(mask, i, mv);
      continue;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // Draws before `offset` (first block) or past the last element (last block) are unused.
      const uint64_t draw = draw0 + j;
      if (draw < offset || draw - offset >= n) continue;
      const uint64_t i = draw - offset;
      const bool keep = keeps(words.w[j]);
      mask[i] = keep ? 1 : 0;
      y.set(i, x[i] * (keep ? keep_scale : 0.f));  // x * mask / (1 - p): NaN stays NaN dropped
    }
  }
}

template <typename I>
__global__ void dropout_backward_kernel(ActIn dy, const uint8_t* mask, float keep_scale, ActOut dx,
                                        I n, bool vector) {
  grid_stride_vec(
      n, vector,
      [&](I i) {
        const Vec<float> d = dy.vec(i);
        const Vec<uint8_t> m = load_vec(mask, i);
        Vec<float> out;
        for (int k = 0; k < kVec; ++k) out.v[k] = d.v[k] * (m.v[k] != 0 ? keep_scale : 0.f);
        dx.set_vec(i, out);
      },
      [&](I i) { dx.set(i, dy[i] * (mask[i] != 0 ? keep_scale : 0.f)); });
}

// As the CPU: p = 1 drops everything (scale 0 rather than inf).
float keep_scale_of(float p) { return p < 1.f ? 1.f / (1.f - p) : 0.f; }

}  // namespace

void CudaBackend::dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset, Tensor& y,
                          Tensor& mask) const {
  const int64_t n = x.numel();
  if (n == 0) return;
  // Draws wrap modulo 2^64 as on the CPU (unsigned arithmetic); the blocks are counted from the
  // first draw's block, so a wrap inside the range would be missed: rule it out.
  const uint64_t last_draw = offset + static_cast<uint64_t>(n) - 1;
  OCTET_CHECK(last_draw >= offset, "dropout: the generator offset ", offset, " plus ", n,
              " draws passes 2^64");
  const uint64_t first = offset / 4, count = last_draw / 4 - first + 1;
  const bool vector =
      offset % 4 == 0 && act_vec_ok(x) && act_vec_ok(y) && vec_aligned(mask.data(), 1);
  dropout_kernel<<<blocks_for(static_cast<int64_t>(count)), kThreads, 0, stream_of(x)>>>(
      act_in(x), seed, offset, first, count, p * 0x1p24f, keep_scale_of(p), act_out(y),
      mask.data_as<uint8_t>(), static_cast<uint64_t>(n), vector);
  OCTET_CUDA_LAUNCH_CHECK("dropout");
}

void CudaBackend::dropout_backward(const Tensor& dy, const Tensor& mask, float p,
                                   Tensor& dx) const {
  const int64_t n = dy.numel();
  if (n == 0) return;
  const bool vector = act_vec_ok(dy) && vec_aligned(mask.data(), 1) && act_vec_ok(dx);
  with_index_type(n, [&]<typename I>(I) {
    dropout_backward_kernel<I><<<vec_blocks_for(n), kThreads, 0, stream_of(dy)>>>(
        act_in(dy), mask.data_as<uint8_t>(), keep_scale_of(p), act_out(dx), static_cast<I>(n),
        vector);
    OCTET_CUDA_LAUNCH_CHECK("dropout_backward");
  });
}

}  // namespace octet::cuda
