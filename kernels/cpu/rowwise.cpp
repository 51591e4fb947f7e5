// Row-wise FP8 on the CPU (kernels/rowwise.h): one scale per row from the row's amax, and the
// inverse. Arguments are validated by kernels/rowwise.cpp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "runtime/fp8.h"
#include "runtime/fp8_scaling.h"
#include "runtime/parallel.h"

namespace octet::cpu {

void CpuBackend::quantize_rowwise(const Tensor& x, const ops::RowwiseCast& c, Tensor& data,
                                  Tensor& scale_inv, FP8CastCounts* counts) const {
  const int64_t rows = x.rows(), cols = x.cols();
  // The largest finite value of the input dtype: a scale that overflows becomes it.
  const float inf_value = x.dtype() == DType::kBF16 ? from_bf16(0x7F7Fu) : FLT_MAX;
  const auto* px = static_cast<const uint8_t*>(x.data());
  const size_t es = x.element_size();
  uint8_t* q = data.data_as<uint8_t>();
  float* s = scale_inv.data_as<float>();
  std::vector<FP8CastCounts> partial(static_cast<size_t>(num_threads()));
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    FP8CastCounts* mine = counts ? &partial[static_cast<size_t>(parallel_chunk())] : nullptr;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      to_f32(x.dtype(), px + r * cols * es, row.data(), cols);
      float amax = 0.f;
      for (const float v : row) amax = std::fmax(amax, std::fabs(v));  // fmax ignores NaN
      const float scale =
          blockwise_scale(amax, c.fp8_max, c.amax_epsilon, c.power_2_scale, inf_value);
      s[r] = scale_inverse(scale);
      cast_fp8_block(data.dtype(), row.data(), cols, scale, amax, q + r * cols, mine);
    }
  });
  add_partial_counts(partial, rows * cols, counts);
}

void CpuBackend::dequantize_rowwise(const Tensor& data, const Tensor& scale_inv,
                                    Tensor& out) const {
  const float* s = scale_inv.data_as<float>();
  dequantize_scaled_fp8(data, out, [s](int64_t r, int64_t) { return s[r]; });
}

}  // namespace octet::cpu
