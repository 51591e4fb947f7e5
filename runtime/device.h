// Where a tensor lives: the CPU, or CUDA device n (only when built with CUDA).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace octet {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const;  // "cpu", "cuda:0"
  friend bool operator==(const Device&, const Device&) = default;
};

Device parse_device(std::string_view text);  // "cpu", "cuda", "cuda:1"; throws on anything else
std::ostream& operator<<(std::ostream& out, const Device& device);

// CUDA availability, answered without crashing on machines that have no GPU or no driver.
bool built_with_cuda();
int cuda_device_count();             // 0 when not built with CUDA or no device/driver
std::string cuda_status();           // "2 CUDA devices: ..." or "no CUDA device (<reason>)"
void require_device(Device device);  // throws "no CUDA device ..." when `device` cannot be used

}  // namespace octet
