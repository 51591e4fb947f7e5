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
