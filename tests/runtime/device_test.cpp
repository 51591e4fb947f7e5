// Device names and CUDA availability: parsing, printing, and clear errors (never a crash) on a
// machine without a GPU; the GPU branches run where cuda_device_count() > 0.
#include "runtime/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/tensor.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using test::error_of;

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:0"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:1"), Device::cuda(1));
  EXPECT_EQ(parse_device("cuda:12"), (Device{DeviceType::kCUDA, 12}));
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_TRUE(parse_device("cuda:3").is_cuda());
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cpu(), Device::cuda(0));
  EXPECT_EQ(Device().str(), "cpu");  // the default is the CPU
  EXPECT_EQ(Device::cuda(7).str(), "cuda:7");
  for (const char* name : {"cpu", "cuda:0", "cuda:15"}) EXPECT_EQ(parse_device(name).str(), name);
  std::ostringstream out;
  out << Device::cuda(2) << " " << Device::cpu();
  EXPECT_EQ(out.str(), "cuda:2 cpu");
}

TEST(Device, BadNamesThrowNamingTheName) {
  for (const char* bad : {"gpu", "CPU", "", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "cuda:0 ",
                          " cpu", "cuda1", "cuda:99999999999"}) {
    const std::string message = error_of([&] { parse_device(bad); });
    EXPECT_THAT(message, HasSubstr(std::string("unknown device \"") + bad + "\"")) << bad;
    EXPECT_THAT(message, HasSubstr("expected \"cpu\", \"cuda\" or \"cuda:N\""));
  }
}

TEST(Device, CpuIsAlwaysUsable) {
  EXPECT_NO_THROW(require_device(Device::cpu()));
  EXPECT_NO_THROW(require_device(parse_device("cpu")));
}

TEST(Device, StatusAndRequireWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: " << cuda_status();
  EXPECT_EQ(cuda_device_count(), 0);
  const std::string status = cuda_status();
  EXPECT_THAT(status, StartsWith("no CUDA device ("));
  EXPECT_EQ(status.back(), ')');
  if (!built_with_cuda()) {
    EXPECT_EQ(status, "no CUDA device (octet was built without CUDA)");
  }
  // The probe is cached: asking again gives the same answer, not a new sticky CUDA error.
  EXPECT_EQ(cuda_status(), status);

  for (Device device : {Device::cuda(0), Device::cuda(3)}) {
    const std::string message = error_of([&] { require_device(device); });
    EXPECT_THAT(message, HasSubstr("device " + device.str() +
                                   " requested but there is no CUDA "
                                   "device ("));
    EXPECT_THAT(message, StartsWith("device.cpp:"));
  }
}

TEST(Device, CudaTensorWithoutAGpuIsAClearErrorAndCountsNothing) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const MemoryStats cpu = memory_stats();
  const std::string message = error_of([] { Tensor::empty({4}, DType::kF32, Device::cuda(0)); });
  // A CUDA build names the missing device; a CPU-only build says it was built without CUDA.
  EXPECT_THAT(message, HasSubstr(built_with_cuda() ? "no CUDA device" : "built without CUDA"));
  EXPECT_THAT(message, HasSubstr("cuda:0"));
  EXPECT_EQ(memory_stats().live_allocations, cpu.live_allocations);
  EXPECT_EQ(memory_stats(Device::cuda(0)).live_allocations, 0);
}

TEST(Device, StatusAndRequireWithAGpu) {
  const int count = cuda_device_count();
  if (count == 0) GTEST_SKIP() << cuda_status();
  EXPECT_TRUE(built_with_cuda());
  EXPECT_THAT(cuda_status(), StartsWith(std::to_string(count) + " CUDA device"));
  EXPECT_THAT(cuda_status(), HasSubstr("cuda:0 "));
  EXPECT_NO_THROW(require_device(Device::cuda(count - 1)));
  EXPECT_THAT(error_of([&] { require_device(Device::cuda(count)); }),
              HasSubstr("requested but only " + std::to_string(count) + " CUDA device(s) exist"));
  // A round trip through device memory, accounted on that device only.
  const MemoryStats before = memory_stats(Device::cuda(0));
  {
    const Tensor dev = Tensor::full({3}, 0.75f, DType::kBF16, Device::cuda(0));
    EXPECT_EQ(dev.device(), Device::cuda(0));
    EXPECT_EQ(dev.to_floats(), (std::vector<float>{0.75f, 0.75f, 0.75f}));
    EXPECT_EQ(memory_stats(Device::cuda(0)).total_current - before.total_current, 6);
    EXPECT_EQ(Tensor::zeros({2}, DType::kF32, Device::cuda(0)).clone().to_floats(),
              (std::vector<float>{0.f, 0.f}));
  }
  EXPECT_EQ(memory_stats(Device::cuda(0)).total_current, before.total_current);
}

}  // namespace
}  // namespace octet
