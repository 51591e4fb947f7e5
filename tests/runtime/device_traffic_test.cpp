// The traffic model's arithmetic (runtime/device_traffic.h), worked out by hand, and the error
// where a build cannot record traffic.
#include "runtime/device_traffic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

namespace octet {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTraffic, PredictedTimeAddsGemmsBytesAndLaunches) {
  DeviceTraffic t;
  t.gemm_flops = 3'000'000'000'000;      // 2e12 of them FP8
  t.gemm_fp8_flops = 2'000'000'000'000;  // 2e12 / 2000 TFLOP/s = 1 ms; 1e12 / 500 = 2 ms
  t.kernels = {{"a", 3, 1'000'000'000, 500'000'000}, {"b", 1, 0, 500'000'000}};
  t.launches = 4;
  t.gemm_calls = 6;
  t.copy_device_bytes = 1'000'000'000;
  t.memset_bytes = 1'000'000'000;
  t.copy_host_bytes = 7'000'000'000;  // not device bandwidth: left out
  t.gemm_bytes = 9'000'000'000;       // inside the GEMMs' time
  EXPECT_EQ(t.non_gemm_bytes(), 4'000'000'000);
  const TrafficRates rates{500, 2000, 1000, 10};  // 4e9 B / 1e12 B/s = 4 ms; 10 launches, 0.1 ms
  EXPECT_DOUBLE_EQ(predicted_ms(t, rates), 1 + 2 + 4 + 0.1);
  EXPECT_THAT(test::error_of([&] {
                predicted_ms(t, TrafficRates{500, 2000, 0, 10});
              }),
              HasSubstr("0 GB/s"));
}

TEST(DeviceTraffic, RecordingWhereTheBuildCannotSaysSo) {
  if (device_traffic_available()) {
    TrafficRecording a;
    EXPECT_THAT(test::error_of([] { TrafficRecording b; }), HasSubstr("already running"));
    a.stop();
    EXPECT_THAT(test::error_of([&] { a.stop(); }), HasSubstr("already stopped"));
    return;
  }
  EXPECT_THAT(test::error_of([] { TrafficRecording r; }), HasSubstr("CUDA emulation build only"));
}

}  // namespace
}  // namespace octet
