// The backend interface and the device policy: an op a backend does not implement says so by
// name (it never falls through to another backend), each device has its table, and an op takes
// its device from its tensors. The mixed-device error needs a second device: tests/cuda.
#include "kernels/backend.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/device_policy.h"
#include "tests/support/test_util.h"

namespace octet::ops::detail {
namespace {

// A backend that implements nothing, as a new backend starts out.
class EmptyBackend final : public Backend {
 public:
  const char* name() const override { return "empty"; }
};

// `f` throws the interface's message for `op` on the empty backend.
template <typename F>
void expect_not_supported(const char* op, F&& f) {
  const std::string e = test::error_of(f);
  EXPECT_NE(e.find(std::string("not supported on empty: ") + op), std::string::npos) << e;
}

TEST(Backend, AnOpTheBackendLacksSaysNotSupportedOnTheBackendAndNamesTheOp) {
  const EmptyBackend empty;
  const Tensor x = test::random_tensor({4, 32}, DType::kF32, 1);
  Tensor y = Tensor::empty({4, 32}, DType::kF32);
  Tensor one = Tensor::empty({1}, DType::kF32);
  Tensor q = Tensor::empty({4, 32}, DType::kE4M3);
  // One op of each family: elementwise, reduction, FP8, MXFP8, GEMM, nn, optimizer, scaling.
  expect_not_supported("binary", [&] { empty.binary(BinaryOp::kAdd, x, x, y); });
  expect_not_supported("sum", [&] { empty.sum(x, one); });
  expect_not_supported("sum_of_squares", [&] { empty.sum_of_squares(x); });
  expect_not_supported("quantize_fp8",
                       [&] { empty.quantize_fp8(x, one, &q, nullptr, nullptr, nullptr, nullptr); });
  expect_not_supported("quantize_mxfp8_rowwise",
                       [&] { empty.quantize_mxfp8_rowwise(x, q, y, nullptr); });
  expect_not_supported(
      "gemm", [&] { empty.gemm(x, Transpose::kNo, x, Transpose::kYes, y, GemmOptions{}); });
  expect_not_supported("softmax", [&] { empty.softmax(x, y); });
  expect_not_supported("cross_entropy", [&] { empty.cross_entropy(x, x, -1, one, y, one); });
  expect_not_supported("adamw_step", [&] { empty.adamw_step({}, AdamWHyper{}); });
  expect_not_supported("update_fp8_slots", [&] { empty.update_fp8_slots({}); });
  expect_not_supported("release_workspace", [&] { empty.release_workspace(); });
  // Nothing was written on the way.
  EXPECT_EQ(y.dtype(), DType::kF32);
}

TEST(Backend, EachDeviceHasItsTable) {
  EXPECT_STREQ(backend_for(Device::cpu()).name(), "cpu");
  if (built_with_cuda()) {
    EXPECT_STREQ(backend_for(Device::cuda(0)).name(), "cuda");
  } else {
    const std::string e = test::error_of([] { backend_for(Device::cuda(0)); });
    EXPECT_NE(e.find("not supported on cuda: octet was built without CUDA"), std::string::npos)
        << e;
  }
}

TEST(Backend, TheCpuTableComputesWhatTheOpsDo) {
  // A scalar result lives in a tensor on the data's device, as on every backend.
  const Tensor x = Tensor::from_floats({1.f, -2.f, 3.5f}, {3});
  Tensor out = Tensor::empty({1}, DType::kF32);
  backend_for(Device::cpu()).amax(x, out);
  EXPECT_EQ(out.item(), 3.5f);
  backend_for(Device::cpu()).mean(x, out);
  EXPECT_EQ(out.item(), static_cast<float>(2.5 / 3.0));
  Tensor inv = Tensor::empty({1}, DType::kF32);
  backend_for(Device::cpu()).reciprocal(Tensor::from_floats({4.f}, {1}), inv);
  EXPECT_EQ(inv.item(), 0.25f);
}

TEST(DevicePolicy, AnOpRunsOnTheDeviceOfItsDefinedTensors) {
  const Tensor a = Tensor::zeros({2}, DType::kF32), undefined;
  EXPECT_EQ(op_device("test_op", {{undefined, "skipped"}, {a, "a"}, {nullptr, "absent"}}),
            Device::cpu());
}

}  // namespace
}  // namespace octet::ops::detail
