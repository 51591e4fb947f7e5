// The f64 reference of an NT GEMM (out = a · bᵀ) with the magnitudes an f32 accumulation's error
// is bounded by, for the FP8 and NVFP4 GEMM tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace octet::test {

// out (m, n) = a (m, k) · b (n, k)ᵀ in f64 (both row-major), with each output's sum of |terms|:
// the bound of an f32 accumulation's error in any order.
struct ProductNT {
  std::vector<double> value, magnitude;
};
inline ProductNT product_nt(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                            int64_t n, int64_t k) {
  ProductNT p{std::vector<double>(static_cast<size_t>(m * n)),
              std::vector<double>(static_cast<size_t>(m * n))};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double t = a[static_cast<size_t>(i * k + l)] * b[static_cast<size_t>(j * k + l)];
        s += t;
        mag += std::fabs(t);
      }
      p.value[static_cast<size_t>(i * n + j)] = s;
      p.magnitude[static_cast<size_t>(i * n + j)] = mag;
    }
  }
  return p;
}

}  // namespace octet::test
