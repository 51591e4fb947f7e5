// Reductions on the CPU. Partial results per chunk combine in a fixed order, so a result depends
// only on the data and the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

constexpr int64_t kBlock = 1024;

OCTET_VECTOR_CLONES
double sum_block(const float* x, int64_t n) {
  // 16 f32 lanes, each summed in f64 for accuracy over long rows.
  double acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j];
  }
  double total = 0;
  for (int j = 0; j < 16; ++j) total += acc[j];
  for (; i < n; ++i) total += x[i];
  return total;
}

OCTET_VECTOR_CLONES
float amax_block(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(x[i]);
    m = v > m ? v : m;  // NaN compares false: ignored
  }
  return m;
}

float max_block(const float* x, int64_t n, float m) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    m = x[i] > m ? x[i] : m;
  }
  return m;
}

// Applies `block(const float*, n)` over x in f32 blocks (converting other dtypes) and returns
// the partials of fixed chunks in chunk order: the same bits on any number of threads.
template <typename T, typename Block, typename Combine>
T reduce(const Tensor& x, T init, Block block, Combine combine) {
  std::vector<T> partials(static_cast<size_t>(reduction_chunks(x.numel(), kElementwiseGrain)),
                          init);
  const auto* px = static_cast<const uint8_t*>(x.data());
  const size_t es = x.element_size();
  const bool f32 = x.dtype() == DType::kF32;
  parallel_chunks(0, x.numel(), kElementwiseGrain, [&](int64_t chunk, int64_t lo, int64_t hi) {
    T acc = init;
    float buf[kBlock];
    for (int64_t i = lo; i < hi; i += kBlock) {
      const int64_t m = std::min(kBlock, hi - i);
      const float* p = reinterpret_cast<const float*>(px + i * es);
      if (!f32) {
        to_f32(x.dtype(), px + i * es, buf, m);
        p = buf;
      }
      acc = combine(acc, block(p, m));
    }
    partials[static_cast<size_t>(chunk)] = acc;
  });
  T result = init;
  for (const T& p : partials) result = combine(result, p);
  return result;
}

float sum_value(const Tensor& x) {
  return static_cast<float>(
      reduce<double>(x, 0.0, sum_block, [](double a, double b) { return a + b; }));
}

void set(Tensor& scalar, float value) { *scalar.data_as<float>() = value; }

}  // namespace

void CpuBackend::sum(const Tensor& x, Tensor& out) const { set(out, sum_value(x)); }

void CpuBackend::mean(const Tensor& x, Tensor& out) const {
  const double n = static_cast<double>(x.numel());
  set(out, static_cast<float>(static_cast<double>(sum_value(x)) / n));
}

void CpuBackend::amax(const Tensor& x, Tensor& out) const {
  set(out, reduce<float>(x, 0.f, amax_block, [](float a, float b) { return a > b ? a : b; }));
}

void CpuBackend::max(const Tensor& x, Tensor& out) const {
  const float lowest = -std::numeric_limits<float>::infinity();
  set(out, reduce<float>(
               x, lowest, [&](const float* p, int64_t n) { return max_block(p, n, lowest); },
               [](float a, float b) { return std::isnan(a) || a > b ? a : b; }));
}

void CpuBackend::sum_rows(const Tensor& x, Tensor& out) const {
  const int64_t rows = x.rows(), cols = x.cols();
  const auto* px = static_cast<const uint8_t*>(x.data());
  const size_t es = x.element_size();
  // Columns split across threads; each thread walks all rows of its columns in f64.
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  parallel_for(0, cols, 256, [&](int64_t c0, int64_t c1) {
    std::vector<float> buf(static_cast<size_t>(c1 - c0));
    for (int64_t r = 0; r < rows; ++r) {
      to_f32(x.dtype(), px + (r * cols + c0) * es, buf.data(), c1 - c0);
      for (int64_t c = c0; c < c1; ++c)
        acc[static_cast<size_t>(c)] += buf[static_cast<size_t>(c - c0)];
    }
  });
  std::vector<float> result(acc.begin(), acc.end());
  from_f32(result.data(), out.dtype(), out.data(), cols);
}

}  // namespace octet::cpu
