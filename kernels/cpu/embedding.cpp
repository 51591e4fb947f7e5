// Embedding lookup and its gradient on the CPU. The gradient groups positions by id (a counting
// sort) and sums each id's rows in position order: deterministic, no atomics, and every table
// row is written exactly once.
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/nn_cpu.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/parallel.h"

namespace octet::cpu {
namespace {

OCTET_VECTOR_CLONES
void add_row(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace

std::vector<int64_t> index_values(const Tensor& ids) {
  std::vector<int64_t> out(static_cast<size_t>(ids.numel()));
  if (ids.dtype() == DType::kI32) {
    const int32_t* p = ids.data_as<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    const int64_t* p = ids.data_as<int64_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
  return out;
}

void CpuBackend::embedding(const Tensor& table, const Tensor& ids_tensor, Tensor& out) const {
  const std::vector<int64_t> ids = index_values(ids_tensor);
  const int64_t cols = table.cols();
  const auto* pt = static_cast<const uint8_t*>(table.data());  // (V, C), any floating dtype
  const size_t row_bytes = static_cast<size_t>(cols) * table.element_size();
  float* po = out.data_as<float>();  // (N, C)
  parallel_for(0, static_cast<int64_t>(ids.size()), rowops::row_grain(cols, 16384),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   // Row-wise conversion: a bf16 table is never converted whole.
                   to_f32(table.dtype(),
                          pt + static_cast<size_t>(ids[static_cast<size_t>(r)]) * row_bytes,
                          po + r * cols, cols);
                 }
               });
}

void CpuBackend::embedding_backward(const Tensor& dy, const Tensor& ids_tensor,
                                    Tensor& dtable) const {
  const std::vector<int64_t> ids = index_values(ids_tensor);
  const int64_t vocab = dtable.rows(), cols = dtable.cols();
  const float* pdy = dy.data_as<float>();  // (N, C)
  float* pd = dtable.data_as<float>();     // (V, C)
  // CSR of positions per id: positions[start[v], start[v + 1]) use id v, in increasing order.
  std::vector<int64_t> start(static_cast<size_t>(vocab) + 1, 0);
  for (const int64_t id : ids) ++start[static_cast<size_t>(id) + 1];
  for (size_t v = 0; v < static_cast<size_t>(vocab); ++v) start[v + 1] += start[v];
  std::vector<int64_t> positions(ids.size());
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (size_t p = 0; p < ids.size(); ++p) {
      positions[static_cast<size_t>(next[static_cast<size_t>(ids[p])]++)] = static_cast<int64_t>(p);
    }
  }
  parallel_for(0, vocab, rowops::row_grain(cols, 16384), [&](int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) {
      float* row = pd + v * cols;
      const int64_t b = start[static_cast<size_t>(v)], e = start[static_cast<size_t>(v) + 1];
      if (b == e) {
        std::fill(row, row + cols, 0.f);
        continue;
      }
      std::copy(pdy + positions[static_cast<size_t>(b)] * cols,
                pdy + (positions[static_cast<size_t>(b)] + 1) * cols, row);
      for (int64_t i = b + 1; i < e; ++i) {
        add_row(row, pdy + positions[static_cast<size_t>(i)] * cols, cols);
      }
    }
  });
}

}  // namespace octet::cpu
