// CUDA emulation build: the traffic recorder behind octet_cuda_emu/traffic.h.
#include "octet_cuda_emu/traffic.h"

#include <atomic>
#include <mutex>

#include "emu_internal.h"

namespace octet::emu {
namespace detail {
namespace {

constexpr int64_t kPage = 4096;

std::atomic<bool> g_on{false};
std::mutex& traffic_mutex() {
  static std::mutex m;
  return m;
}
Traffic& traffic() {
  static Traffic t;
  return t;
}

}  // namespace

bool traffic_on() { return g_on.load(std::memory_order_relaxed); }

void record_launch_traffic(const char* kernel, int64_t pages_read, int64_t pages_written) {
  std::lock_guard lock(traffic_mutex());
  Traffic& t = traffic();
  ++t.launches;
  KernelTraffic* k = nullptr;
  for (KernelTraffic& entry : t.kernels) {
    if (entry.kernel == kernel) k = &entry;
  }
  if (k == nullptr) {
    t.kernels.push_back(KernelTraffic{kernel});
    k = &t.kernels.back();
  }
  ++k->launches;
  k->bytes_read += pages_read * kPage;
  k->bytes_written += pages_written * kPage;
}

void record_gemm_traffic(int64_t flops, bool fp8, int64_t bytes_read, int64_t bytes_written) {
  std::lock_guard lock(traffic_mutex());
  Traffic& t = traffic();
  ++t.gemm_calls;
  t.gemm_flops += flops;
  if (fp8) t.gemm_fp8_flops += flops;
  t.gemm_bytes_read += bytes_read;
  t.gemm_bytes_written += bytes_written;
}

void record_copy_traffic(CopyKind kind, int64_t bytes) {
  std::lock_guard lock(traffic_mutex());
  Traffic& t = traffic();
  switch (kind) {
    case CopyKind::kDeviceToDevice:
      t.copy_device_bytes += 2 * bytes;
      break;
    case CopyKind::kHostDevice:
      t.copy_host_bytes += bytes;
      break;
    case CopyKind::kMemset:
      t.memset_bytes += bytes;
      break;
  }
}

}  // namespace detail

bool traffic_supported() { return detail::traffic_pages_supported(); }

void start_traffic() {
  std::lock_guard lock(detail::traffic_mutex());
  detail::traffic() = Traffic{};
  detail::g_on.store(true);
}

Traffic stop_traffic() {
  std::lock_guard lock(detail::traffic_mutex());
  detail::g_on.store(false);
  Traffic out = std::move(detail::traffic());
  detail::traffic() = Traffic{};
  return out;
}

}  // namespace octet::emu
