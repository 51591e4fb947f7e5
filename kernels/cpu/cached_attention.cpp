// Attention over a key/value cache on the CPU (generation): keys and values of new positions are
// copied into f32 caches (N, max_len, G, D), and each new query row of head h attends to every
// cached position up to its own of key/value head h / (H / G). One task per (sequence, head).
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "runtime/parallel.h"

namespace octet::cpu {

void CpuBackend::kv_cache_write(const Tensor& packed, Tensor& k_cache, Tensor& v_cache,
                                int64_t pos) const {
  const int64_t N = packed.size(0), T = packed.size(1), max_len = k_cache.size(1);
  const int64_t KC = k_cache.size(2) * k_cache.size(3), W = packed.size(2), QC = W - 2 * KC;
  const float* in = packed.data_as<float>();  // (N, T, (H + 2G) * D)
  float* k = k_cache.data_as<float>();        // (N, max_len, G, D)
  float* v = v_cache.data_as<float>();
  parallel_for(0, N * T, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / T, t = r % T;
      const float* row = in + r * W + QC;  // the keys, then the values
      const int64_t at = (n * max_len + pos + t) * KC;
      std::copy(row, row + KC, k + at);
      std::copy(row + KC, row + 2 * KC, v + at);
    }
  });
}

void CpuBackend::cached_attention(const Tensor& packed, const Tensor& k_cache,
                                  const Tensor& v_cache, int64_t pos, float scale,
                                  Tensor& out) const {
  const int64_t N = packed.size(0), T = packed.size(1), max_len = k_cache.size(1);
  const int64_t G = k_cache.size(2), D = k_cache.size(3), KC = G * D, W = packed.size(2);
  const int64_t C = W - 2 * KC, H = C / D, group = H / G;
  const float* q = packed.data_as<float>();   // (N, T, (H + 2G) * D): the query part
  const float* k = k_cache.data_as<float>();  // (N, max_len, G, D)
  const float* v = v_cache.data_as<float>();
  float* y = out.data_as<float>();  // (N, T, H, D)
  parallel_for(0, N * H, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> s(static_cast<size_t>(pos + T));  // one query's scores
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t n = task / H, h = task % H;
      const int64_t g = h / group;
      const float* kb = k + n * max_len * KC + g * D;  // (max_len, D), row stride KC
      const float* vb = v + n * max_len * KC + g * D;
      for (int64_t t = 0; t < T; ++t) {
        const float* qr = q + (n * T + t) * W + h * D;
        const int64_t seen = pos + t + 1;  // keys 0 .. pos + t
        for (int64_t j = 0; j < seen; ++j)
          s[static_cast<size_t>(j)] = scale * rowops::dot(qr, kb + j * KC, D);
        const float m = rowops::max(s.data(), seen);
        const float sum = rowops::exp_store(s.data(), m, s.data(), seen);
        rowops::scale(s.data(), 1.f / sum, seen);
        float* yr = y + (n * T + t) * C + h * D;
        std::fill(yr, yr + D, 0.f);
        for (int64_t j = 0; j < seen; ++j) {
          const float p = s[static_cast<size_t>(j)];
          const float* vr = vb + j * KC;
          for (int64_t d = 0; d < D; ++d) yr[d] += p * vr[d];
        }
      }
    }
  });
}

}  // namespace octet::cpu
