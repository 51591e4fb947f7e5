// Attention over a key/value cache on the CPU (generation): keys and values of new positions are
// copied into f32 caches (N, max_len, H, D), and each new query row attends to every cached
// position up to its own. One task per (sequence, head).
#include <algorithm>
#include <vector>

#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "runtime/parallel.h"

namespace octet::cpu {

void kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache, int64_t pos) {
  const int64_t N = packed.size(0), T = packed.size(1), max_len = k_cache.size(1);
  const int64_t C = k_cache.size(2) * k_cache.size(3);
  const float* in = packed.data_as<float>();  // (N, T, 3, H, D)
  float* k = k_cache.data_as<float>();        // (N, max_len, H, D)
  float* v = v_cache.data_as<float>();
  parallel_for(0, N * T, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / T, t = r % T;
      const float* row = in + r * 3 * C;
      const int64_t at = (n * max_len + pos + t) * C;
      std::copy(row + C, row + 2 * C, k + at);
      std::copy(row + 2 * C, row + 3 * C, v + at);
    }
  });
}

void cached_attention(const Tensor& packed, const Tensor& k_cache, const Tensor& v_cache,
                      int64_t pos, float scale, Tensor& out) {
  const int64_t N = packed.size(0), T = packed.size(1), max_len = k_cache.size(1);
  const int64_t H = k_cache.size(2), D = k_cache.size(3), C = H * D;
  const float* q = packed.data_as<float>();   // (N, T, 3, H, D): the query part
  const float* k = k_cache.data_as<float>();  // (N, max_len, H, D)
  const float* v = v_cache.data_as<float>();
  float* y = out.data_as<float>();  // (N, T, H, D)
  parallel_for(0, N * H, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> s(static_cast<size_t>(pos + T));  // one query's scores
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t n = task / H, h = task % H;
      const float* kb = k + n * max_len * C + h * D;  // (max_len, D), row stride C
      const float* vb = v + n * max_len * C + h * D;
      for (int64_t t = 0; t < T; ++t) {
        const float* qr = q + (n * T + t) * 3 * C + h * D;
        const int64_t seen = pos + t + 1;  // keys 0 .. pos + t
        for (int64_t j = 0; j < seen; ++j)
          s[static_cast<size_t>(j)] = scale * rowops::dot(qr, kb + j * C, D);
        const float m = rowops::max(s.data(), seen);
        const float sum = rowops::exp_store(s.data(), m, s.data(), seen);
        rowops::scale(s.data(), 1.f / sum, seen);
        float* yr = y + (n * T + t) * C + h * D;
        std::fill(yr, yr + D, 0.f);
        for (int64_t j = 0; j < seen; ++j) {
          const float p = s[static_cast<size_t>(j)];
          const float* vr = vb + j * C;
          for (int64_t d = 0; d < D; ++d) yr[d] += p * vr[d];
        }
      }
    }
  });
}

}  // namespace octet::cpu
