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

// A layer of 4 tokens, d 2, ffn 8, 1 head, bf16 activations, 74 parameters, by hand. bf16:
// LayerNorm 72 bytes (x 16, gamma and beta 8, y 16, stats 32) and 92 backward (dy and x 32,
// stats 32, gamma 4, dx 16, dgamma and dbeta 8); GELU 128 and 256 - 64 = 192 backward;
// attention 80 and 160; a residual add 48, two each way; the optimizer 2 * 74 * 14 = 2072;
// forward 2 * 72 + 80 + 128 + 96 = 448, backward 96 + 192 + 2 * 92 + 160 = 632.
TEST(DeviceTraffic, LayerStepFloorByHand) {
  const LayerStepShape shape{4, 2, 8, 1, 2};
  EXPECT_DOUBLE_EQ(layer_step_floor_bytes(shape, operand_format_on_hopper("bf16")),
                   448 + 632 + 2072);
  // Delayed: a cast of n elements reads 2n and writes n per usage, plus its 8 scale and amax
  // bytes: 4n + 8. Activations 8 elements (40) three times forward, twice backward, the QKV
  // gradient's 24 (104); GELU + cast 64 + 64 + 8, dGELU + cast 128 + 64 + 8; the weights
  // 12, 4, 16 and 16 elements (56 + 24 + 72 + 72).
  const double delayed = 2 * 72 + 3 * 40 + 80 + 136 + 96 +
                         (96 + 40 + 200 + 2 * 92 + 40 + 160 + 104) + (56 + 24 + 72 + 72) + 2072;
  EXPECT_DOUBLE_EQ(delayed, 3696);
  EXPECT_DOUBLE_EQ(layer_step_floor_bytes(shape, operand_format_on_hopper("delayed")), delayed);
  EXPECT_DOUBLE_EQ(layer_step_floor_bytes(shape, operand_format_on_hopper("current")), delayed);
  // Expanded to bf16 by the cast: 2 bytes per element and usage, no scale bytes.
  const OperandFormat mxfp8 = operand_format_on_hopper("mxfp8");
  EXPECT_TRUE(mxfp8.quantized);
  EXPECT_EQ(mxfp8.data_bytes, 2);
  EXPECT_THAT(test::error_of([] { operand_format_on_hopper("fp16"); }),
              HasSubstr("unknown precision \"fp16\""));
  EXPECT_THAT(test::error_of([&] {
                layer_step_floor_bytes({0, 2, 8, 1, 2}, operand_format_on_hopper("bf16"));
              }),
              HasSubstr("tokens 0"));
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
