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

// One head vector of D values rotated by position row `cs` (D/2 cosines then D/2 sines), or by
// the inverse rotation (the gradient) when kBack, or copied when there is no table.
template <bool kBack>
void rotate(const float* x, const float* cs, int64_t D, float* y) {
  if (cs == nullptr) {
    std::memcpy(y, x, static_cast<size_t>(D) * sizeof(float));
    return;
  }
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    if constexpr (kBack) {
      math::rope_rotate_back(x[i], x[half + i], cs[i], cs[half + i], y[i], y[half + i]);
    } else {
      math::rope_rotate(x[i], x[half + i], cs[i], cs[half + i], y[i], y[half + i]);
    }
  }
}

// The shapes of a pack: `grouped` (B, T, H + 2G, D) and `packed` (B, T, H + 2K, D), in token
// rows of (H + 2G) * D and (H + 2K) * D values, and the rotation table (max_len, D) or null.
struct HeadShape {
  HeadShape(const Tensor& grouped, const Tensor& packed, int64_t heads, int64_t kv_heads,
            const Tensor& rope)
      : rows(grouped.size(0) * grouped.size(1)),
        T(grouped.size(1)),
        D(grouped.size(2) / (heads + 2 * kv_heads)),
        H(heads),
        G(kv_heads),
        K((packed.size(2) / D - H) / 2),
        rep(K / G),
        table(rope.defined() ? rope.data_as<float>() : nullptr) {}

  // Over the token rows in parallel: row r of `from` (rows of from_width values) to row r of
  // `to` (to_width), its H query heads rotated (kBack: back), then
  // rest(from row, to row, the row's rotation or null, a scratch row of D floats).
  template <bool kBack, typename Rest>
  void for_rows(const float* from, int64_t from_width, float* to, int64_t to_width,
                Rest rest) const {
    parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
      std::vector<float> scratch(static_cast<size_t>(D));
      for (int64_t r = r0; r < r1; ++r) {
        const float* x = from + r * from_width;
        float* y = to + r * to_width;
        const float* cs = table != nullptr ? table + (r % T) * D : nullptr;
        for (int64_t h = 0; h < H; ++h) rotate<kBack>(x + h * D, cs, D, y + h * D);
        rest(x, y, cs, scratch.data());
      }
    });
  }

  int64_t rows, T, D, H, G, K, rep;
  const float* table;
};

}  // namespace

void CpuBackend::pack_heads(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& rope,
                            Tensor& packed) const {
  const HeadShape s(qkv, packed, heads, kv_heads, rope);
  const int64_t D = s.D, H = s.H, G = s.G, K = s.K, rep = s.rep;
  const float* in = qkv.data_as<float>();  // (B, T, H + 2G, D)
  float* out = packed.data_as<float>();    // (B, T, H + 2K, D)
  // Key head j: group g's key rotated; value head j: its value.
  const auto kv_heads_of = [&](const float* x, float* y, const float* cs, float*) {
    for (int64_t j = 0; j < K; ++j) {
      const int64_t g = j / rep;
      rotate<false>(x + (H + g) * D, cs, D, y + (H + j) * D);
      std::memcpy(y + (H + K + j) * D, x + (H + G + g) * D, static_cast<size_t>(D) * sizeof(float));
    }
  };
  s.for_rows<false>(in, (H + 2 * G) * D, out, (H + 2 * K) * D, kv_heads_of);
}

void CpuBackend::pack_heads_backward(const Tensor& dpacked, int64_t heads, int64_t kv_heads,
                                     const Tensor& rope, Tensor& dqkv) const {
  const HeadShape s(dqkv, dpacked, heads, kv_heads, rope);
  const int64_t D = s.D, H = s.H, G = s.G, K = s.K, rep = s.rep;
  const float* in = dpacked.data_as<float>();  // (B, T, H + 2K, D)
  float* out = dqkv.data_as<float>();          // (B, T, H + 2G, D)
  // Key and value head g: the sum over its query heads (scratch: the sum), in head order, then
  // (keys) rotated.
  const auto kv_grads_of = [&](const float* dy, float* dx, const float* cs, float* sum) {
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t part = 1; part <= 2; ++part) {
        const float* first = dy + (H + (part - 1) * K + g * rep) * D;
        std::memcpy(sum, first, static_cast<size_t>(D) * sizeof(float));
        for (int64_t j = 1; j < rep; ++j) {
          const float* next = first + j * D;
          for (int64_t i = 0; i < D; ++i) sum[i] += next[i];
        }
        float* target = dx + (part == 1 ? H + g : H + G + g) * D;
        if (part == 1) {
          rotate<true>(sum, cs, D, target);
        } else {
          std::memcpy(target, sum, static_cast<size_t>(D) * sizeof(float));
        }
      }
    }
  };
  s.for_rows<true>(in, (H + 2 * K) * D, out, (H + 2 * G) * D, kv_grads_of);
}

}  // namespace octet::cpu
