// The device harness: one test body that runs on every device, the CPU always and cuda:0 where
// one exists (elsewhere that instance skips with the reason, as OCTET_REQUIRE_CUDA does), as
// gtest value-parameterized tests named Devices/<Suite>.<Test>/cpu and .../cuda0. The fixture
// makes a test's inputs on its device and reads that device's byte counts, so a body written
// once proves a contract on each backend.
//
//   class EngineMemory : public test::DeviceTest {};
//   TEST_P(EngineMemory, SavedBytesReachZero) { Tensor x = leaf({4, 4}, 1); ... saved_bytes() }
//   OCTET_DEVICE_TESTS(EngineMemory);
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "runtime/device.h"
#include "runtime/float8_tensor.h"
#include "runtime/memory.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/quantized_tensor.h"
#include "runtime/tensor.h"
#include "tests/support/test_util.h"

namespace octet::test {

class DeviceTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (device().is_cuda() && cuda_device_count() == 0) {
      GTEST_SKIP() << "skipped: " << cuda_status();
    }
  }

  Device device() const { return GetParam(); }

  // `t` on the test's device: itself on the CPU (no copy, so a CPU run allocates exactly what
  // the CPU-only test did), else a device copy; undefined stays undefined.
  Tensor here(const Tensor& t) const {
    return !t.defined() || t.device() == device() ? t : t.to(device());
  }
  // N(0, std) values from `seed` (test::random_tensor's), on the test's device.
  Tensor random(const Shape& shape, uint64_t seed, float std = 1.f) const {
    return here(random_tensor(shape, DType::kF32, seed, std));
  }
  // The same, as a leaf that requires a gradient.
  Tensor leaf(const Shape& shape, uint64_t seed) const {
    Tensor t = random(shape, seed);
    autograd::set_requires_grad(t);
    return t;
  }
  // A one-element f32 tensor (a scale, an amax) on the test's device.
  Tensor scalar(float value) const { return here(Tensor::from_floats({value}, {1})); }

  // Live bytes of the test's device: saved for backward, and of one tag.
  int64_t saved_bytes() const { return bytes(MemTag::kSaved); }
  int64_t bytes(MemTag tag) const { return memory_stats(device()).current_of(tag); }
};

// The instance names: "cpu", "cuda0".
inline std::string device_test_name(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cpu() ? "cpu" : "cuda" + std::to_string(info.param.index);
}

// A tensor's bytes read back to the host (a device pointer cannot be memcpy'd); undefined: none.
inline std::vector<uint8_t> host_bytes(const Tensor& t) {
  if (!t.defined()) return {};
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(h.data());
  return {p, p + h.nbytes()};
}

// Every buffer of a quantized tensor, concatenated: data of each usage, then the scale_inv or
// the E8M0 exponents.
inline std::vector<uint8_t> bytes_of(const QuantizedTensor& q) {
  std::vector<uint8_t> out;
  for (const Tensor& t : q.held_tensors()) {
    const std::vector<uint8_t> b = host_bytes(t);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

}  // namespace octet::test

// Instantiates every TEST_P of `suite` (a DeviceTest) on the CPU and on cuda:0.
#define OCTET_DEVICE_TESTS(suite)                                                               \
  INSTANTIATE_TEST_SUITE_P(Devices, suite,                                                      \
                           ::testing::Values(::octet::Device::cpu(), ::octet::Device::cuda(0)), \
                           ::octet::test::device_test_name)
