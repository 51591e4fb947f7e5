// Device names and the CUDA availability check (cudart only when built with CUDA).
#include "runtime/device.h"

#include <charconv>
#include <ostream>

#include "runtime/error.h"

#if OCTET_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace octet {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) {
      return Device::cuda(index);
    }
  }
  OCTET_FAIL("unknown device \"", text, "\": expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

bool built_with_cuda() { return OCTET_WITH_CUDA != 0; }

namespace {

struct CudaProbe {
  int count = 0;
  std::string reason;
};

const CudaProbe& probe() {
  static const CudaProbe result = [] {
    CudaProbe p;
#if OCTET_WITH_CUDA
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess) {
      p.count = count;
      if (count == 0) p.reason = "the driver reports zero devices";
    } else {
      p.reason = cudaGetErrorString(status);
      (void)cudaGetLastError();  // clear the sticky error so later calls start clean
    }
#else
    p.reason = "octet was built without CUDA";
#endif
    return p;
  }();
  return result;
}

}  // namespace

int cuda_device_count() { return probe().count; }

std::string cuda_status() {
  const CudaProbe& p = probe();
  if (p.count == 0) return "no CUDA device (" + p.reason + ")";
  std::string text = std::to_string(p.count) + " CUDA device" + (p.count > 1 ? "s" : "");
#if OCTET_WITH_CUDA
  for (int i = 0; i < p.count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      text += detail::concat(i == 0 ? ": " : ", ", "cuda:", i, " ", prop.name, " (sm_", prop.major,
                             prop.minor, ")");
    }
  }
#endif
  return text;
}

void require_device(Device device) {
  if (device.is_cpu()) return;
  const CudaProbe& p = probe();
  OCTET_CHECK(p.count > 0, "device ", device, " requested but there is no CUDA device (", p.reason,
              ")");
  OCTET_CHECK(device.index < p.count, "device ", device, " requested but only ", p.count,
              " CUDA device(s) exist");
}

}  // namespace octet
