// CUDA emulation build: the device traffic of a stretch of work, for a traffic model that needs no
// GPU. Kernel launches count the distinct 4 KiB pages of device memory they read and wrote (a page
// touched by a launch counts once, whole); the emulated cuBLASLt counts each matmul's FLOPs and
// the bytes of its operands, scales and output exactly; copies and memsets count their bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace octet::emu {

struct KernelTraffic {
  std::string kernel;  // as written at the launch
  int64_t launches = 0;
  int64_t bytes_read = 0;     // distinct pages read by each launch, times 4096, summed
  int64_t bytes_written = 0;  // the same for pages written
};

struct Traffic {
  std::vector<KernelTraffic> kernels;  // in order of first launch
  int64_t launches = 0;
  int64_t gemm_calls = 0;
  int64_t gemm_flops = 0;          // 2 * m * n * k per matmul
  int64_t gemm_fp8_flops = 0;      // the part with FP8 operands
  int64_t gemm_bytes_read = 0;     // A, B, C (when beta != 0), bias and scales
  int64_t gemm_bytes_written = 0;  // D (and the amax of D)
  int64_t copy_device_bytes = 0;   // device-to-device copies: bytes read plus bytes written
  int64_t copy_host_bytes = 0;     // host-to-device and device-to-host copies
  int64_t memset_bytes = 0;
};

// Whether launches can count their pages here (x86-64 Linux, device memory protected).
bool traffic_supported();
// Starts recording (what was recorded before is dropped) on every thread; stop returns it.
void start_traffic();
Traffic stop_traffic();

}  // namespace octet::emu
