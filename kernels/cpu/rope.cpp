// Rotary positions and grouped-query heads on the CPU: qkv (B, T, H + 2G, D) to (B, T, H + 2K, D)
// with K = H (key/value heads repeated: causal_attention's (B, T, 3, H, D)) or K = G (rotation
// only), and its gradient back. One task per token row.
#include "kernels/math/rope.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

// One head vector of D values rotated by position row `cs` (D/2 cosines then D/2 sines), or
// copied when there is no table.
void rotate(const float* x, const float* cs, int64_t D, float* y) {
  if (cs == nullptr) {
    std::memcpy(y, x, static_cast<size_t>(D) * sizeof(float));
    return;
  }
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i)
    math::rope_rotate(x[i], x[half + i], cs[i], cs[half + i], y[i], y[half + i]);
}

// The inverse rotation (the gradient), or a copy.
void rotate_back(const float* dy, const float* cs, int64_t D, float* dx) {
  if (cs == nullptr) {
    std::memcpy(dx, dy, static_cast<size_t>(D) * sizeof(float));
    return;
  }
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i)
    math::rope_rotate_back(dy[i], dy[half + i], cs[i], cs[half + i], dx[i], dx[half + i]);
}

}  // namespace

void CpuBackend::pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                            Tensor& packed) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (heads + 2 * kv_heads);
  const int64_t H = heads, G = kv_heads, K = (packed.size(2) / D - H) / 2, rep = K / G;
  const float* in = qkv.data_as<float>();                                 // (B, T, H + 2G, D)
  float* out = packed.data_as<float>();                                   // (B, T, H + 2K, D)
  const float* table = rope.defined() ? rope.data_as<float>() : nullptr;  // (max_len, D)
  parallel_for(0, B * T, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = in + r * (H + 2 * G) * D;
      float* y = out + r * (H + 2 * K) * D;
      const float* cs = table != nullptr ? table + (r % T) * D : nullptr;
      for (int64_t h = 0; h < H; ++h) rotate(x + h * D, cs, D, y + h * D);
      for (int64_t j = 0; j < K; ++j) {
        const int64_t g = j / rep;
        rotate(x + (H + g) * D, cs, D, y + (H + j) * D);
        std::memcpy(y + (H + K + j) * D, x + (H + G + g) * D,
                    static_cast<size_t>(D) * sizeof(float));
      }
    }
  });
}

void CpuBackend::pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                                     const Tensor& rope, Tensor& dqkv) const {
  const int64_t B = dpacked.size(0), T = dpacked.size(1), D = dqkv.size(2) / (heads + 2 * kv_heads);
  const int64_t H = heads, G = kv_heads, K = (dpacked.size(2) / D - H) / 2, rep = K / G;
  const float* in = dpacked.data_as<float>();  // (B, T, H + 2K, D)
  float* out = dqkv.data_as<float>();          // (B, T, H + 2G, D)
  const float* table = rope.defined() ? rope.data_as<float>() : nullptr;
  parallel_for(0, B * T, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> sum(static_cast<size_t>(D));
    for (int64_t r = r0; r < r1; ++r) {
      const float* dy = in + r * (H + 2 * K) * D;
      float* dx = out + r * (H + 2 * G) * D;
      const float* cs = table != nullptr ? table + (r % T) * D : nullptr;
      for (int64_t h = 0; h < H; ++h) rotate_back(dy + h * D, cs, D, dx + h * D);
      for (int64_t g = 0; g < G; ++g) {
        // Key and value head g: the sum over its query heads, in head order, then (keys) rotated.
        for (int64_t part = 1; part <= 2; ++part) {
          const float* first = dy + (H + (part - 1) * K + g * rep) * D;
          std::memcpy(sum.data(), first, static_cast<size_t>(D) * sizeof(float));
          for (int64_t j = 1; j < rep; ++j) {
            const float* next = first + j * D;
            for (int64_t i = 0; i < D; ++i) sum[static_cast<size_t>(i)] += next[i];
          }
          float* target = dx + (part == 1 ? H + g : H + G + g) * D;
          if (part == 1) {
            rotate_back(sum.data(), cs, D, target);
          } else {
            std::memcpy(target, sum.data(), static_cast<size_t>(D) * sizeof(float));
          }
        }
      }
    }
  });
}

}  // namespace octet::cpu
