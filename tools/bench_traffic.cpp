// `octet bench layer --device cuda --traffic`: the device traffic of one layer step as the CUDA
// emulation build records it, and the step time the traffic model predicts from it.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "tools/bench_common.h"

namespace octet::bench::detail {
namespace {

double mib_of(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

void print_traffic(std::ostream& out, const DeviceTraffic& t, const TrafficRates& rates,
                   std::optional<double> floor_bytes) {
  char line[256];
  std::snprintf(line, sizeof line,
                "  %lld launches, %lld GEMMs (%.3f GFLOP, %.3f FP8), non-GEMM %.2f MiB (copies "
                "%.2f, memsets %.2f), GEMM operands %.2f MiB, host copies %.2f MiB\n",
                static_cast<long long>(t.launches), static_cast<long long>(t.gemm_calls),
                t.gemm_flops * 1e-9, t.gemm_fp8_flops * 1e-9, mib_of(t.non_gemm_bytes()),
                mib_of(t.copy_device_bytes), mib_of(t.memset_bytes), mib_of(t.gemm_bytes),
                mib_of(t.copy_host_bytes));
  out << line;
  if (floor_bytes) {
    std::snprintf(line, sizeof line,
                  "  fused design's non-GEMM floor %.2f MiB: this step moves %.2fx it\n",
                  *floor_bytes / (1 << 20), static_cast<double>(t.non_gemm_bytes()) / *floor_bytes);
    out << line;
  }
  std::snprintf(line, sizeof line,
                "  predicted %.4f ms at %.0f (bf16) / %.0f (FP8) TFLOP/s, %.0f GB/s, %.1f us a "
                "launch\n",
                predicted_ms(t, rates), rates.bf16_tflops, rates.fp8_tflops, rates.bandwidth_gbs,
                rates.launch_us);
  out << line;
  std::vector<KernelTraffic> kernels = t.kernels;
  std::stable_sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) {
    return a.bytes_read + a.bytes_written > b.bytes_read + b.bytes_written;
  });
  std::snprintf(line, sizeof line, "  %-44s %8s %11s %11s\n", "kernel", "launches", "read MiB",
                "written MiB");
  out << line;
  for (const KernelTraffic& k : kernels) {
    std::snprintf(line, sizeof line, "  %-44.44s %8lld %11.3f %11.3f\n", k.kernel.c_str(),
                  static_cast<long long>(k.launches), mib_of(k.bytes_read),
                  mib_of(k.bytes_written));
    out << line;
  }
}

nlohmann::json traffic_json(const DeviceTraffic& t, const TrafficRates& rates,
                            std::optional<double> floor_bytes) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelTraffic& k : t.kernels) {
    kernels.push_back({{"kernel", k.kernel},
                       {"launches", k.launches},
                       {"bytes_read", k.bytes_read},
                       {"bytes_written", k.bytes_written}});
  }
  nlohmann::json floor;  // null where unknown
  if (floor_bytes) {
    floor = {{"bytes", *floor_bytes},
             {"ratio", static_cast<double>(t.non_gemm_bytes()) / *floor_bytes}};
  }
  return {{"launches", t.launches},
          {"floor", floor},
          {"gemm_calls", t.gemm_calls},
          {"gemm_flops", t.gemm_flops},
          {"gemm_fp8_flops", t.gemm_fp8_flops},
          {"gemm_bytes", t.gemm_bytes},
          {"non_gemm_bytes", t.non_gemm_bytes()},
          {"copy_device_bytes", t.copy_device_bytes},
          {"copy_host_bytes", t.copy_host_bytes},
          {"memset_bytes", t.memset_bytes},
          {"predicted_ms", predicted_ms(t, rates)},
          {"rates",
           {{"bf16_tflops", rates.bf16_tflops},
            {"fp8_tflops", rates.fp8_tflops},
            {"bandwidth_gbs", rates.bandwidth_gbs},
            {"launch_us", rates.launch_us}}},
          {"kernels", kernels}};
}

}  // namespace octet::bench::detail
