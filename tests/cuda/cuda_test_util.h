// Helpers of the CUDA-only tests (tests/cuda): tensors on cuda:0, and comparisons of a CUDA result
// with the CPU's, bit for bit where both backends apply the same rule, else within the one
// tolerance table (tests/support/tolerances.h). Every test starts with OCTET_REQUIRE_CUDA(). Each
// op against the CPU backend is tests/devices/op_table_test.cpp's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/float8_tensor.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/quantized_tensor.h"
#include "runtime/scaled_tensor.h"
#include "runtime/tensor.h"
#include "tests/support/scoped_env.h"
#include "tests/support/test_util.h"
#include "tests/support/tolerances.h"

namespace octet::test {

inline Device gpu() { return Device::cuda(0); }
// The same values on the GPU (a new storage; undefined stays undefined); test::on_cpu the other
// way.
inline Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(gpu()) : t; }

// A one-element f32 tensor (a scale, a scale_inv, an amax) on `device`.
inline Tensor scalar(float value, Device device = Device::cpu()) {
  const Tensor t = Tensor::from_floats({value}, {1});
  return device.is_cpu() ? t : t.to(device);
}

// `got` (a CUDA result, or one brought back) equals the CPU result `want` in shape and dtype and
// is within `tol` of it everywhere; equal values (infinities included) always match, NaN matches
// only NaN.
inline ::testing::AssertionResult close_to(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (!got.defined() || !want.defined()) {
    return ::testing::AssertionFailure()
           << "undefined tensor: got " << got.defined() << ", want " << want.defined();
  }
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  }
  std::vector<float> g = on_cpu(got).to_floats();
  std::vector<float> w = on_cpu(want).to_floats();
  // all_close measures |got - want|, which is NaN for two equal infinities: equal values are
  // taken out first.
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) g[i] = w[i] = 0.f;
  }
  return all_close(g, std::vector<double>(w.begin(), w.end()), tol);
}

// Every buffer of two quantized tensors (data of each usage, scale_inv or E8M0 exponents) bit for
// bit, and the same usages, shape and dtype.
inline ::testing::AssertionResult same_quantized(const QuantizedTensor& got,
                                                 const QuantizedTensor& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype() || got.usage() != want.usage() ||
      got.format() != want.format()) {
    return ::testing::AssertionFailure()
           << "got " << got.describe() << ", want " << want.describe();
  }
  struct Buffer {
    const char* name;
    Tensor got, want;
  };
  std::vector<Buffer> buffers;
  if (want.format() == kPerTensorFormat) {
    const auto& g = dynamic_cast<const Float8Tensor&>(got);
    const auto& w = dynamic_cast<const Float8Tensor&>(want);
    buffers.push_back({"scale_inv", g.scale_inv(), w.scale_inv()});
    if (want.has(Usage::kRowwise)) {
      buffers.push_back({"row-wise data", g.rowwise_data(), w.rowwise_data()});
    }
    if (want.has(Usage::kColumnwise)) {
      buffers.push_back({"column-wise data", g.columnwise_data(), w.columnwise_data()});
    }
  } else {
    // MXFP8, blockwise FP8, NVFP4: per direction data, scales (E8M0 exponents, f32 scale_inv,
    // E4M3 codes) and, for NVFP4, the direction's amax.
    const auto& g = dynamic_cast<const ScaledTensor&>(got);
    const auto& w = dynamic_cast<const ScaledTensor&>(want);
    if (want.has(Usage::kRowwise)) {
      buffers.push_back({"row-wise scales", g.rowwise_scales(), w.rowwise_scales()});
      buffers.push_back({"row-wise data", g.rowwise_data(), w.rowwise_data()});
      if (w.rowwise_extra().defined()) {
        buffers.push_back({"row-wise extra", g.rowwise_extra(), w.rowwise_extra()});
      }
    }
    if (want.has(Usage::kColumnwise)) {
      buffers.push_back({"column-wise scales", g.columnwise_scales(), w.columnwise_scales()});
      buffers.push_back({"column-wise data", g.columnwise_data(), w.columnwise_data()});
      if (w.columnwise_extra().defined()) {
        buffers.push_back({"column-wise extra", g.columnwise_extra(), w.columnwise_extra()});
      }
    }
  }
  for (const Buffer& b : buffers) {
    ::testing::AssertionResult r = same_bits(b.got, b.want);
    if (!r) return ::testing::AssertionFailure() << b.name << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace octet::test
