// Rotary positions and grouped-query heads on the GPU: qkv (B, T, H + 2G, D) to (B, T, H + 2K, D)
// with K = H (key/value heads repeated: causal_attention's (B, T, 3, H, D)) or K = G (rotation
// only), and its gradient back. One thread per output element;
// the arithmetic is math/rope.h's and the head sums go in the CPU's order, so both backends give
// the same bits. Operands f32, bf16 or f16.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/math/rope.h"

namespace octet::cuda {
namespace {

// H query heads, G key/value heads in the input, K (G or H) in the packed layout.
struct HeadShape {
  int64_t T, H, G, K, D;
};

// packed[r, slot, d] for r over B*T rows and slot over H + 2K.
__global__ void pack_heads_kernel(ActIn qkv, const float* rope, HeadShape s, ActOut packed,
                                  int64_t n) {
  const int64_t half = s.D / 2, rep = s.K / s.G, width = (s.H + 2 * s.G) * s.D,
                slots = s.H + 2 * s.K;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = e % s.D, slot = e / s.D % slots, r = e / (s.D * slots);
    const ActIn x = qkv + r * width;
    const bool value = slot >= s.H + s.K;
    const int64_t head = slot < s.H         ? slot
                         : slot < s.H + s.K ? s.H + (slot - s.H) / rep
                                            : s.H + s.G + (slot - s.H - s.K) / rep;
    if (value || rope == nullptr) {
      packed.set(e, x[head * s.D + d]);
      continue;
    }
    const float* cs = rope + (r % s.T) * s.D;
    const int64_t i = d < half ? d : d - half;
    float lo, hi;
    math::rope_rotate(x[head * s.D + i], x[head * s.D + half + i], cs[i], cs[half + i], lo, hi);
    packed.set(e, d < half ? lo : hi);
  }
}

// dqkv[r, slot, d] for slot over H + 2G.
__global__ void pack_heads_backward_kernel(ActIn dpacked, const float* rope, HeadShape s,
                                           ActOut dqkv, int64_t n) {
  const int64_t half = s.D / 2, rep = s.K / s.G, slots = s.H + 2 * s.G;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = e % s.D, slot = e / s.D % slots, r = e / (s.D * slots);
    const ActIn dy = dpacked + r * (s.H + 2 * s.K) * s.D;
    // The packed heads this slot fed: one query head, or the rep heads of a key / value group.
    int64_t first, count = rep;
    if (slot < s.H) {
      first = slot;
      count = 1;
    } else if (slot < s.H + s.G) {
      first = s.H + (slot - s.H) * rep;
    } else {
      first = s.H + s.K + (slot - s.H - s.G) * rep;
    }
    const bool rotated = rope != nullptr && slot < s.H + s.G;
    const int64_t i = rotated && d >= half ? d - half : d;
    auto head_sum = [&](int64_t k) {  // in head order, as the CPU adds them
      float sum = dy[first * s.D + k];
      for (int64_t j = 1; j < count; ++j) sum += dy[(first + j) * s.D + k];
      return sum;
    };
    if (!rotated) {
      dqkv.set(e, head_sum(d));
      continue;
    }
    const float* cs = rope + (r % s.T) * s.D;
    float lo, hi;
    math::rope_rotate_back(head_sum(i), head_sum(half + i), cs[i], cs[half + i], lo, hi);
    dqkv.set(e, d < half ? lo : hi);
  }
}

// The launch's shapes: `grouped` (B, T, H + 2G, D) and `packed` (B, T, H + 2K, D).
HeadShape head_shape(const Tensor& grouped, const Tensor& packed, int64_t heads, int64_t kv_heads) {
  const int64_t D = grouped.size(2) / (heads + 2 * kv_heads);
  return {grouped.size(1), heads, kv_heads, (packed.size(2) / D - heads) / 2, D};
}

const float* rope_table(const Tensor& rope) {
  return rope.defined() ? rope.data_as<float>() : nullptr;
}

}  // namespace

void CudaBackend::pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                             Tensor& packed) const {
  const int64_t n = packed.numel();
  if (n == 0) return;
  pack_heads_kernel<<<blocks_for(n), kThreads, 0, stream_of(qkv)>>>(
      act_in(qkv), rope_table(rope), head_shape(qkv, packed, heads, kv_heads), act_out(packed), n);
  OCTET_CUDA_LAUNCH_CHECK("pack_heads");
}

void CudaBackend::pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                                      const Tensor& rope, Tensor& dqkv) const {
  const int64_t n = dqkv.numel();
  if (n == 0) return;
  pack_heads_backward_kernel<<<blocks_for(n), kThreads, 0, stream_of(dpacked)>>>(
      act_in(dpacked), rope_table(rope), head_shape(dqkv, dpacked, heads, kv_heads), act_out(dqkv),
      n);
  OCTET_CUDA_LAUNCH_CHECK("pack_heads_backward");
}

}  // namespace octet::cuda
