// Attention over a key/value cache on the GPU (generation): new keys and values copied into f32
// caches (N, max_len, G, D); one block per query row and head, each head h reading key/value head
// h / (H / G), scores in shared memory. packed and out are f32, bf16 or f16.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace octet::cuda {
namespace {

constexpr int kAttnThreads = 128;
// The longest cache: its f32 scores and block_reduce's own shared floats within the 48 KiB a
// block gets without opting in to more.
constexpr int64_t kMaxSharedScores = 12288 - 64;

// KC = G * D key (or value) values a row; W = (H + 2G) * D values a packed row.
__global__ void kv_cache_write_kernel(ActIn packed, float* k, float* v, int64_t T, int64_t KC,
                                      int64_t W, int64_t max_len, int64_t pos, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = e % KC, which = e / KC % 2, r = e / (2 * KC);  // r over N * T rows
    const int64_t seq = r / T, t = r % T;
    const float value = packed[r * W + (W - 2 * KC) + which * KC + c];
    (which == 0 ? k : v)[(seq * max_len + pos + t) * KC + c] = value;
  }
}

// Block (query row r = seq * T + t, head h).
__global__ void cached_attention_kernel(ActIn packed, const float* k, const float* v, int64_t T,
                                        int64_t H, int64_t G, int64_t D, int64_t max_len,
                                        int64_t pos, float scale, ActOut out) {
  extern __shared__ float s[];  // the query's scores (pos + T)
  const int64_t r = blockIdx.x / H, h = blockIdx.x % H, seq = r / T, t = r % T, C = H * D;
  const int64_t KC = G * D, g = h / (H / G);
  const int64_t seen = pos + t + 1;
  const ActIn q = packed + r * (C + 2 * KC) + h * D;
  const float* kb = k + seq * max_len * KC + g * D;
  const float* vb = v + seq * max_len * KC + g * D;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < seen; j += blockDim.x) {
    float dot = 0.f;
    for (int64_t d = 0; d < D; ++d) dot += q[d] * kb[j * KC + d];
    s[j] = scale * dot;
    m = fmaxf(m, s[j]);
  }
  m = block_reduce(m, MaxOp{}, -INFINITY);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < seen; j += blockDim.x) {
    s[j] = expf(s[j] - m);
    sum += s[j];
  }
  sum = block_reduce(sum, SumOp{}, 0.f);
  const float inv = 1.f / sum;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < seen; ++j) acc += s[j] * inv * vb[j * KC + d];
    out.set(r * C + h * D + d, acc);
  }
}

}  // namespace

void CudaBackend::kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache,
                                 int64_t pos) const {
  const int64_t N = packed.size(0), T = packed.size(1), KC = k_cache.size(2) * k_cache.size(3);
  const int64_t n = N * T * 2 * KC;
  if (n == 0) return;
  kv_cache_write_kernel<<<blocks_for(n), kThreads, 0, stream_of(packed)>>>(
      act_in(packed), k_cache.data_as<float>(), v_cache.data_as<float>(), T, KC, packed.size(2),
      k_cache.size(1), pos, n);
  OCTET_CUDA_LAUNCH_CHECK("kv_cache_write");
}

void CudaBackend::cached_attention(const Tensor& packed, const Tensor& k_cache,
                                   const Tensor& v_cache, int64_t pos, float scale,
                                   Tensor& out) const {
  const int64_t N = packed.size(0), T = packed.size(1), G = k_cache.size(2), D = k_cache.size(3);
  const int64_t H = packed.size(2) / D - 2 * G;
  if (N * T * H == 0) return;
  OCTET_CHECK(pos + T <= kMaxSharedScores, "cached_attention on CUDA: ", pos + T,
              " cached positions; at most ", kMaxSharedScores, " are supported");
  const size_t shared = static_cast<size_t>(pos + T) * sizeof(float);
  cached_attention_kernel<<<static_cast<unsigned>(N * T * H), kAttnThreads, shared,
                            stream_of(packed)>>>(act_in(packed), k_cache.data_as<float>(),
                                                 v_cache.data_as<float>(), T, H, G, D,
                                                 k_cache.size(1), pos, scale, act_out(out));
  OCTET_CUDA_LAUNCH_CHECK("cached_attention");
}

}  // namespace octet::cuda
