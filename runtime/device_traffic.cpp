// Device traffic: the CUDA emulator's recorder (octet_cuda_emu/traffic.h) as octet's types, and
// the time model.
#include "runtime/device_traffic.h"

#include <atomic>

#include "runtime/error.h"

#if OCTET_CUDA_EMULATION
#include "octet_cuda_emu/traffic.h"
#endif

namespace octet {
namespace {

std::atomic<bool> g_recording{false};

#if OCTET_CUDA_EMULATION
DeviceTraffic from_emulator(const emu::Traffic& t) {
  DeviceTraffic out;
  for (const emu::KernelTraffic& k : t.kernels) {
    out.kernels.push_back({k.kernel, k.launches, k.bytes_read, k.bytes_written});
  }
  out.launches = t.launches;
  out.gemm_calls = t.gemm_calls;
  out.gemm_flops = t.gemm_flops;
  out.gemm_fp8_flops = t.gemm_fp8_flops;
  out.gemm_bytes = t.gemm_bytes_read + t.gemm_bytes_written;
  out.copy_device_bytes = t.copy_device_bytes;
  out.copy_host_bytes = t.copy_host_bytes;
  out.memset_bytes = t.memset_bytes;
  return out;
}
#endif

}  // namespace

int64_t DeviceTraffic::non_gemm_bytes() const {
  int64_t bytes = copy_device_bytes + memset_bytes;
  for (const KernelTraffic& k : kernels) bytes += k.bytes_read + k.bytes_written;
  return bytes;
}

OperandFormat operand_format_on_hopper(const std::string& precision) {
  OperandFormat f;
  if (precision == "bf16" || precision == "f32") return f;
  f.quantized = true;
  if (precision == "delayed" || precision == "current") {
    f.cast_bytes = 8;
  } else if (precision == "blockwise") {
    f.scale_bytes = 4.0 / 128;  // an f32 scale per 1x128 block
    f.weight_scale_bytes = 4.0 / (128 * 128);
  } else if (precision == "mxfp8" || precision == "nvfp4" || precision == "quartet2" ||
             precision == "rowwise") {
    f.data_bytes = 2;  // expanded to bf16 by the cast itself
  } else {
    OCTET_FAIL("traffic floor: unknown precision \"", precision,
               "\" (expected bf16, delayed, current, blockwise, mxfp8, nvfp4, quartet2, rowwise)");
  }
  return f;
}

double layer_step_floor_bytes(const LayerStepShape& s, const OperandFormat& f) {
  OCTET_CHECK(s.tokens > 0 && s.d_model > 0 && s.ffn > 0 && s.heads > 0 && s.activation_bytes > 0,
              "traffic floor: the shape must be positive, got tokens ", s.tokens, ", d_model ",
              s.d_model, ", ffn ", s.ffn, ", heads ", s.heads);
  const auto t = static_cast<double>(s.tokens), d = static_cast<double>(s.d_model),
             ff = static_cast<double>(s.ffn), h = static_cast<double>(s.heads),
             e = static_cast<double>(s.activation_bytes);
  // A cast of n elements read once, writing both usages (none in high precision).
  const auto cast = [&](double n, double scale_bytes) {
    return f.quantized ? n * e + 2 * n * (f.data_bytes + scale_bytes) + f.cast_bytes : 0.0;
  };
  const auto act = [&](double n) { return cast(n, f.scale_bytes); };
  const double layernorm = (t * d + 2 * d) * e + t * d * e + 8 * t;  // x, gamma, beta; y, stats
  // dy, x, stats, gamma; dx, dgamma, dbeta.
  const double layernorm_backward = 2 * t * d * e + 8 * t + d * e + t * d * e + 2 * d * e;
  // A residual add, forward or the gradients' sum backward: two reads and a write.
  const double residual = 3 * t * d * e;
  const double gelu =
      t * ff * e +
      (f.quantized ? 2 * t * ff * (f.data_bytes + f.scale_bytes) + f.cast_bytes : t * ff * e);
  const double gelu_backward =
      2 * t * ff * e +
      (f.quantized ? 2 * t * ff * (f.data_bytes + f.scale_bytes) + f.cast_bytes : t * ff * e);
  const double attention = 3 * t * d * e + t * d * e + 4 * t * h;
  const double attention_backward = 5 * t * d * e + 4 * t * h + 3 * t * d * e + 4 * t * h;
  double weights = 0;
  for (const double n : {3 * d * d, d * d, ff * d, d * ff})
    weights += cast(n, f.weight_scale_bytes);
  const double params = 3 * d * d + 3 * d + d * d + d + ff * d + ff + d * ff + d + 4 * d;
  const double optimizer = 2 * params * (12 + e);
  const double forward =
      2 * layernorm + act(t * d) + attention + act(t * d) + act(t * d) + gelu + 2 * residual;
  const double backward = 2 * residual + act(t * d) + gelu_backward + 2 * layernorm_backward +
                          act(t * d) + attention_backward + act(3 * t * d);
  return forward + backward + weights + optimizer;
}

double predicted_ms(const DeviceTraffic& traffic, const TrafficRates& rates) {
  OCTET_CHECK(rates.bf16_tflops > 0 && rates.fp8_tflops > 0 && rates.bandwidth_gbs > 0 &&
                  rates.launch_us >= 0,
              "traffic model: rates must be positive (bf16 ", rates.bf16_tflops, " TFLOP/s, fp8 ",
              rates.fp8_tflops, " TFLOP/s, ", rates.bandwidth_gbs, " GB/s, ", rates.launch_us,
              " us a launch)");
  const double fp8 = static_cast<double>(traffic.gemm_fp8_flops);
  const double other = static_cast<double>(traffic.gemm_flops - traffic.gemm_fp8_flops);
  const double gemm_s = fp8 / (rates.fp8_tflops * 1e12) + other / (rates.bf16_tflops * 1e12);
  const double bytes_s =
      static_cast<double>(traffic.non_gemm_bytes()) / (rates.bandwidth_gbs * 1e9);
  const double launch_s =
      static_cast<double>(traffic.launches + traffic.gemm_calls) * rates.launch_us * 1e-6;
  return 1e3 * (gemm_s + bytes_s + launch_s);
}

bool device_traffic_available() {
#if OCTET_CUDA_EMULATION
  return emu::traffic_supported();
#else
  return false;
#endif
}

TrafficRecording::TrafficRecording() {
  OCTET_CHECK(device_traffic_available(),
              "device traffic is recorded by the CUDA emulation build only (build-emu, on "
              "x86-64): this build cannot record it");
  OCTET_CHECK(!g_recording.exchange(true), "a device traffic recording is already running");
#if OCTET_CUDA_EMULATION
  emu::start_traffic();
#endif
}

TrafficRecording::~TrafficRecording() {
  if (!running_) return;
  g_recording.store(false);
#if OCTET_CUDA_EMULATION
  emu::stop_traffic();
#endif
}

DeviceTraffic TrafficRecording::stop() {
  OCTET_CHECK(running_, "TrafficRecording::stop: already stopped");
  running_ = false;
  g_recording.store(false);
#if OCTET_CUDA_EMULATION
  return from_emulator(emu::stop_traffic());
#else
  return {};
#endif
}

}  // namespace octet
