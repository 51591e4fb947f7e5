// Helpers shared by the device memory tests of the module layer (module_memory_test.cpp) and of
// the autograd engine under it (engine_memory_test.cpp): byte counts read from
// memory_stats(cuda:0), the CPU tests' inputs on the device, and device bytes read back to the
// host for comparison.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "runtime/float8_tensor.h"
#include "runtime/memory.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/quantized_tensor.h"
#include "runtime/tensor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet::test {

// Bytes held for backward on the device (what every test reads) and bytes of one tag there.
inline int64_t saved_bytes() { return memory_stats(gpu()).current_of(MemTag::kSaved); }
inline int64_t gpu_bytes(MemTag tag) { return memory_stats(gpu()).current_of(tag); }

// N(0, 1) values from `seed`, on the device (the CPU tests' inputs, copied).
inline Tensor gpu_random(const Shape& shape, uint64_t seed) {
  return on_gpu(test::random_tensor(shape, DType::kF32, seed));
}

// A device leaf that requires a gradient (the CPU tests' leaf(), on the device).
inline Tensor gpu_leaf(const Shape& shape, uint64_t seed) {
  Tensor t = gpu_random(shape, seed);
  autograd::set_requires_grad(t);
  return t;
}

// A tensor's bytes, read back to the host: a device pointer cannot be memcpy'd.
inline std::vector<uint8_t> host_bytes(const Tensor& t) {
  if (!t.defined()) return {};
  const Tensor h = test::on_cpu(t);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return {p, p + h.nbytes()};
}

inline std::vector<uint8_t> concat_bytes(const std::vector<Tensor>& buffers) {
  std::vector<uint8_t> out;
  for (const Tensor& t : buffers) {
    const std::vector<uint8_t> b = host_bytes(t);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

// Every buffer of a quantized tensor (data of each usage, scale_inv or E8M0 exponents).
inline std::vector<uint8_t> bytes_of(const QuantizedTensor& q) {
  if (q.format() == kPerTensorFormat) {
    const auto& f = dynamic_cast<const Float8Tensor&>(q);
    return concat_bytes({f.rowwise_data(), f.columnwise_data(), f.scale_inv()});
  }
  const auto& m = dynamic_cast<const MXFP8Tensor&>(q);
  return concat_bytes(
      {m.rowwise_data(), m.rowwise_scales(), m.columnwise_data(), m.columnwise_scales()});
}

}  // namespace octet::test
