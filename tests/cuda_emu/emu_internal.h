// CUDA emulation build: what the emulator's own files (runtime.cpp, device_memory.cpp, exec.cpp,
// fiber.cpp, cublaslt.cpp) share: options, diagnostics, the emulated device memory and the stream
// checks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace octet::emu::detail {

// Settings read once from the environment (documented in tests/cuda_emu/README.md).
struct Options {
  int device_count = 1;            // OCTET_EMU_DEVICE_COUNT
  uint8_t poison = 0xFF;           // OCTET_EMU_POISON: byte pattern of fresh shared/device memory
  size_t stack_bytes = 256 << 10;  // OCTET_EMU_STACK_KB: stack of each emulated thread
  int order = 0;                   // OCTET_EMU_ORDER: 0 forward, 1 reverse, 2 shuffled threads
  bool protect = true;             // OCTET_EMU_PROTECT=0: device memory stays host-accessible
  bool malloc_memory = false;      // device memory from malloc (AddressSanitizer builds)
  bool verbose = false;            // OCTET_EMU_VERBOSE=1: one line per launch on stderr
  size_t arena_bytes = size_t{64} << 30;  // OCTET_EMU_ARENA_GB
};
const Options& options();
// The emulated devices' compute capability, major * 10 + minor: OCTET_EMU_COMPUTE_CAPABILITY
// (default 90, Hopper), read at each query so that a test can emulate another GPU.
int compute_capability();
// cublasLtGetVersion(): OCTET_EMU_CUBLASLT_VERSION (default 130100, cuBLAS 13.1), read at each
// query.
size_t cublaslt_version();

// Prints "octet CUDA emulator: <message>" and aborts: a condition that is a bug on a real GPU
// (undefined behaviour or a fault), found while emulating.
[[noreturn]] void fatal(const std::string& message);
// Prints "octet CUDA emulator: <message>" as a warning (an API call that returns an error here).
void warn(const std::string& message);
// "0x..." for messages.
std::string hex(uintptr_t v);

// Sets the calling thread's last error (cudaGetLastError) and returns `error`.
cudaError_t record(cudaError_t error);
int current_device();

// ---- device memory ----
struct DeviceBlock {
  uintptr_t base = 0;
  size_t size = 0;  // bytes requested from cudaMalloc
  int device = 0;
};
enum class PointerKind : uint8_t {
  kHost,        // not device memory
  kDevice,      // inside (or one past the end of) a live cudaMalloc block
  kFreedDevice  // in the device address range but in no live block
};
// cudaMalloc and cudaFree of the emulated device memory (device_memory.cpp), and the bytes its
// live blocks map (cudaMemGetInfo).
cudaError_t device_allocate(void** ptr, size_t size, int device);
cudaError_t device_release(void* ptr);
size_t device_bytes_used();
// What `p` is; `block` gets its block when kDevice.
PointerKind classify(const void* p, DeviceBlock* block = nullptr);
std::string describe(const void* p);  // for messages: "host pointer 0x..", "device ..."

// While one is alive, device memory can be read and written by the host thread (kernels, copies,
// the emulated cuBLASLt). Outside, device memory faults on access (unless OCTET_EMU_PROTECT=0),
// which is what a GPU's memory looks like to host code. `track` (a kernel launch while traffic
// is recorded, octet_cuda_emu/traffic.h): the first load or store of each 4 KiB page faults once
// and is counted, and close() gives the counts of distinct pages read and written. Without page
// tracking (not x86-64, malloc mode, protection off) both counts stay 0.
class DeviceAccess {
 public:
  explicit DeviceAccess(bool track = false);
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
  void close(int64_t* pages_read, int64_t* pages_written);

 private:
  bool open_ = true;
};
bool traffic_pages_supported();

// The traffic recorder (traffic.cpp): whether it is on, and what the launches, the emulated
// cuBLASLt and the copies report to it.
bool traffic_on();
void record_launch_traffic(const char* kernel, int64_t pages_read, int64_t pages_written);
void record_gemm_traffic(int64_t flops, bool fp8, int64_t bytes_read, int64_t bytes_written);
enum class CopyKind : uint8_t { kDeviceToDevice, kHostDevice, kMemset };
void record_copy_traffic(CopyKind kind, int64_t bytes);

// Checks that `stream` is usable on the current device: 0, cudaStreamLegacy,
// cudaStreamPerThread or a live stream of this device. `what` names the call in a warning.
cudaError_t check_stream(cudaStream_t stream, const char* what);

// ---- stream capture (graph.cpp) ----
// One recorded operation of a capture: what it is (a kernel's name, "cudaMemcpyAsync", ...) and
// what runs at each replay.
struct GraphNode {
  std::string what;
  std::function<void()> run;
};
// Whether `stream` captures (a created stream; the legacy one never does).
bool capturing(cudaStream_t stream);
// Appends a node to `stream`'s capture (dropped once the capture is invalidated).
void capture(cudaStream_t stream, std::string what, std::function<void()> run);
// `call` on `stream` where CUDA refuses it during a capture: on a capturing stream, or on the
// legacy stream while a stream of the current device captures. Invalidates those captures and
// returns their error (cudaSuccess when no capture is involved).
cudaError_t refuse_in_capture(cudaStream_t stream, const char* call);
// `call` waits for the whole current device: refused while one of its streams captures.
cudaError_t refuse_device_wide(const char* call);

// The dynamic shared memory limit of a kernel (cudaFuncSetAttribute), 48 KiB by default.
size_t max_dynamic_smem(const void* kernel);
constexpr size_t kDefaultSmem = 48 * 1024;
constexpr size_t kOptinSmem = 232448;  // H100/H200 sharedMemPerBlockOptin

// Installs the SIGSEGV handler that explains faults on device memory and on emulated stacks.
void install_fault_handler();
// Registers [lo, hi) as a guard page (for the fault message): below an emulated thread's stack
// (kStack), or after the dynamic shared memory of a launch (kSharedMemory).
enum class Guard : uint8_t { kStack, kSharedMemory };
void register_guard(uintptr_t lo, uintptr_t hi, Guard kind);
// Names the launch that runs now and its dynamic shared memory (for the fault message); a null
// name when none runs.
void set_running(const char* kernel, const char* file, int line, size_t smem);

}  // namespace octet::emu::detail
