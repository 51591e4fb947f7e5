// The device policy with two devices: an op given tensors on the CPU and on cuda:0 refuses, naming
// the op, the two arguments and their devices, before any kernel runs (kernels/device_policy.h).
#include "kernels/device_policy.h"

#include <gtest/gtest.h>

#include <string>

#include "kernels/ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

void expect_mixed_device_error(const std::string& e, const std::string& op, const std::string& arg,
                               const std::string& first) {
  EXPECT_NE(e.find(op + ": " + arg + " is on cuda:0 but " + first + " is on cpu"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("must all be on one device"), std::string::npos) << e;
}

TEST(CudaDevicePolicy, MixedDeviceCallsNameTheOpTheArgumentsAndBothDevices) {
  OCTET_REQUIRE_CUDA();
  const Tensor a = test::random_tensor({8, 16}, DType::kF32, 1);  // on the CPU
  const Tensor b = test::on_gpu(test::random_tensor({8, 16}, DType::kF32, 2));
  expect_mixed_device_error(test::error_of([&] { ops::add(a, b); }), "add", "b", "a");
  expect_mixed_device_error(test::error_of([&] { ops::softmax_backward(a, b); }),
                            "softmax_backward", "y", "dy");
  // A scalar on the wrong device is caught like a data tensor.
  const Tensor scale = test::scalar(1.f, test::gpu());
  Tensor q = Tensor::empty({8, 16}, DType::kE4M3);
  expect_mixed_device_error(
      test::error_of([&] { ops::quantize_fp8(a, scale, &q, nullptr, nullptr); }), "quantize_fp8",
      "scale", "x");
  Tensor out = Tensor::empty({8, 8}, DType::kF32);
  expect_mixed_device_error(
      test::error_of([&] { ops::gemm(a, ops::Transpose::kNo, b, ops::Transpose::kYes, out); }),
      "gemm", "b", "a");
}

TEST(CudaDevicePolicy, TheCudaDevicesTableIsTheCudaBackend) {
  OCTET_REQUIRE_CUDA();
  EXPECT_STREQ(ops::detail::backend_for(test::gpu()).name(), "cuda");
}

}  // namespace
}  // namespace octet
