// CUDA emulation build: the CUDA runtime API on the CPU. One emulated device (more with
// OCTET_EMU_DEVICE_COUNT), device memory in a reserved address range that host code cannot touch
// outside kernels and copies (device_memory.cpp: a host dereference of a device pointer faults, as
// it would on a GPU, and the fault handler says so), streams and events that run everything at
// once, and the same error codes as the real runtime for the mistakes it can see. Copies check
// their direction and bounds against the device blocks.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "emu_internal.h"

namespace octet::emu::detail {
namespace {

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return static_cast<size_t>(std::strtoull(v, nullptr, 0));
}

}  // namespace

int compute_capability() { return static_cast<int>(env_size("OCTET_EMU_COMPUTE_CAPABILITY", 90)); }

size_t cublaslt_version() { return env_size("OCTET_EMU_CUBLASLT_VERSION", 130100); }

const Options& options() {
  static const Options o = [] {
    Options r;
    r.device_count = static_cast<int>(env_size("OCTET_EMU_DEVICE_COUNT", 1));
    r.poison = static_cast<uint8_t>(env_size("OCTET_EMU_POISON", 0xFF));
    r.stack_bytes = env_size("OCTET_EMU_STACK_KB", 256) << 10;
    if (const char* order = std::getenv("OCTET_EMU_ORDER")) {
      const std::string s = order;
      r.order = s == "reverse" ? 1 : s == "shuffle" ? 2 : 0;
    }
    r.protect = env_size("OCTET_EMU_PROTECT", 1) != 0;
    r.verbose = env_size("OCTET_EMU_VERBOSE", 0) != 0;
    r.arena_bytes = env_size("OCTET_EMU_ARENA_GB", 64) << 30;
#if defined(__SANITIZE_ADDRESS__)
    r.malloc_memory = true;  // ASan checks the bounds of malloc'd blocks; a private arena it cannot
#endif
    if (env_size("OCTET_EMU_MALLOC", 0) != 0) r.malloc_memory = true;
    if (r.malloc_memory) r.protect = false;
    return r;
  }();
  return o;
}

void warn(const std::string& message) {
  std::fprintf(stderr, "octet CUDA emulator: %s\n", message.c_str());
  std::fflush(stderr);
}

[[noreturn]] void fatal(const std::string& message) {
  std::fprintf(stderr,
               "\n==== octet CUDA emulator: %s\n==== (this is undefined behaviour or a fault on a "
               "real GPU; aborting)\n",
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%lx", static_cast<unsigned long>(v));
  return buf;
}

namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

// ---- streams and events ----
constexpr uint32_t kStreamMagic = 0x57524541, kEventMagic = 0x45564e54;

}  // namespace
}  // namespace octet::emu::detail

struct CUstream_st {
  uint32_t magic;
  int device;
  bool destroyed;
};
struct CUevent_st {
  uint32_t magic;
  int device;
  unsigned flags;
  bool destroyed;
  bool recorded;
  std::chrono::steady_clock::time_point time;
};

namespace octet::emu::detail {
namespace {

std::mutex& handles_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

cudaError_t record(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
  return error;
}

int current_device() { return t_device; }

cudaError_t check_stream(cudaStream_t stream, const char* what) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return cudaSuccess;
  }
  std::lock_guard lock(handles_mutex());
  if (stream->magic != kStreamMagic || stream->destroyed) {
    warn(std::string(what) + ": stream " + hex(reinterpret_cast<uintptr_t>(stream)) +
         (stream->magic == kStreamMagic ? " was destroyed" : " is not a stream"));
    return cudaErrorInvalidResourceHandle;
  }
  if (stream->device != t_device) {
    warn(std::string(what) + ": the stream belongs to cuda:" + std::to_string(stream->device) +
         " but cuda:" + std::to_string(t_device) + " is current");
    return cudaErrorInvalidResourceHandle;
  }
  return cudaSuccess;
}

namespace {

std::mutex& attributes_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const void*, size_t>& smem_limits() {
  static auto* m = new std::unordered_map<const void*, size_t>();
  return *m;
}

// Checks a copy's or a memset's device side: [p, p + n) inside one live block of the current
// device.
cudaError_t check_device_range(const void* p, size_t n, const char* call, const char* role) {
  DeviceBlock b;
  const PointerKind kind = classify(p, &b);
  if (kind != PointerKind::kDevice) {
    warn(std::string(call) + ": the " + role + " is not device memory (" + describe(p) + ")");
    return cudaErrorInvalidValue;
  }
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a + n > b.base + b.size) {
    warn(std::string(call) + " of " + std::to_string(n) + " bytes: the " + role +
         " runs past the end of its device block (" + describe(p) + ")");
    return cudaErrorInvalidValue;
  }
  // Another device's block is fine: with unified addressing cudaMemcpy copies between devices.
  return cudaSuccess;
}

bool is_device(const void* p) { return classify(p) != PointerKind::kHost; }

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, const char* call) {
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) {
    warn(std::string(call) + ": null pointer");
    return cudaErrorInvalidValue;
  }
  const bool dst_dev = is_device(dst), src_dev = is_device(src);
  cudaMemcpyKind inferred = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                    : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  if (kind != cudaMemcpyDefault && kind != inferred) {
    static const char* names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                                  "Default"};
    warn(std::string(call) + " with cudaMemcpy" + names[kind] + " but dst is " + describe(dst) +
         " and src is " + describe(src) + " (a direction mix-up)");
    return cudaErrorInvalidValue;
  }
  if (dst_dev) {
    if (const cudaError_t e = check_device_range(dst, count, call, "destination")) return e;
  }
  if (src_dev) {
    if (const cudaError_t e = check_device_range(src, count, call, "source")) return e;
  }
  DeviceAccess access;
  std::memmove(dst, src, count);
  if (traffic_on() && (dst_dev || src_dev)) {
    record_copy_traffic(dst_dev && src_dev ? CopyKind::kDeviceToDevice : CopyKind::kHostDevice,
                        static_cast<int64_t>(count));
  }
  return cudaSuccess;
}

cudaError_t set(void* ptr, int value, size_t count, const char* call) {
  if (count == 0) return cudaSuccess;
  if (const cudaError_t e = check_device_range(ptr, count, call, "destination")) return e;
  DeviceAccess access;
  std::memset(ptr, value, count);
  if (traffic_on()) record_copy_traffic(CopyKind::kMemset, static_cast<int64_t>(count));
  return cudaSuccess;
}

constexpr size_t kTotalMemory = size_t{143771} << 20;  // an H200's 141 GiB

}  // namespace

size_t max_dynamic_smem(const void* kernel) {
  std::lock_guard lock(attributes_mutex());
  auto it = smem_limits().find(kernel);
  return it == smem_limits().end() ? kDefaultSmem : it->second;
}

}  // namespace octet::emu::detail

using octet::emu::detail::check_stream;
using octet::emu::detail::options;
using octet::emu::detail::record;
using octet::emu::detail::warn;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = options().device_count;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = octet::emu::detail::t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= options().device_count) return record(cudaErrorInvalidDevice);
  octet::emu::detail::t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= options().device_count) return record(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "octet CUDA emulator");
  prop->totalGlobalMem = octet::emu::detail::kTotalMemory;
  prop->sharedMemPerBlock = octet::emu::detail::kDefaultSmem;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7FFFFFFF;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->clockRate = 1980000;
  prop->totalConstMem = 65536;
  prop->major = octet::emu::detail::compute_capability() / 10;
  prop->minor = octet::emu::detail::compute_capability() % 10;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->sharedMemPerMultiprocessor = 233472;
  prop->sharedMemPerBlockOptin = octet::emu::detail::kOptinSmem;
  prop->regsPerMultiprocessor = 65536;
  prop->memoryBusWidth = 6144;
  prop->memoryClockRate = 2619000;
  prop->unifiedAddressing = 1;
  prop->concurrentKernels = 1;
  prop->pciDeviceID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  return record(octet::emu::detail::refuse_device_wide("cudaDeviceSynchronize"));
}
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }

cudaError_t cudaDriverGetVersion(int* version) {
  *version = 12080;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 12080;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *total = octet::emu::detail::kTotalMemory;
  const size_t used = octet::emu::detail::device_bytes_used();
  *free = used < *total ? *total - used : 0;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = octet::emu::detail::t_last_error;
  octet::emu::detail::t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return octet::emu::detail::t_last_error; }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    default:
      return "cudaError";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return record(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;  // the real runtime returns success and a null pointer
  return record(octet::emu::detail::device_allocate(ptr, size, octet::emu::detail::t_device));
}

cudaError_t cudaFree(void* ptr) { return record(octet::emu::detail::device_release(ptr)); }

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  if (ptr == nullptr) return record(cudaErrorInvalidValue);
  *ptr = std::malloc(size == 0 ? 1 : size);
  return *ptr != nullptr ? cudaSuccess : record(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  namespace d = octet::emu::detail;
  if (const cudaError_t e = d::refuse_in_capture(nullptr, "cudaMemcpy")) return record(e);
  return record(d::copy(dst, src, count, kind, "cudaMemcpy"));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  namespace d = octet::emu::detail;
  if (const cudaError_t e = check_stream(stream, "cudaMemcpyAsync")) return record(e);
  if (d::capturing(stream)) {
    // Checked now and again at each replay; a host end is read or written at the replay.
    for (const auto& [p, role] :
         {std::pair<const void*, const char*>{dst, "destination"}, {src, "source"}}) {
      if (!d::is_device(p)) continue;
      if (const cudaError_t e = d::check_device_range(p, count, "cudaMemcpyAsync", role)) {
        return record(e);
      }
    }
    d::capture(stream, "cudaMemcpyAsync",
               [=] { record(d::copy(dst, src, count, kind, "cudaMemcpyAsync")); });
    return cudaSuccess;
  }
  if (const cudaError_t e = d::refuse_in_capture(stream, "cudaMemcpyAsync")) return record(e);
  return record(d::copy(dst, src, count, kind, "cudaMemcpyAsync"));
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  namespace d = octet::emu::detail;
  if (const cudaError_t e = d::refuse_in_capture(nullptr, "cudaMemset")) return record(e);
  return record(d::set(ptr, value, count, "cudaMemset"));
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  namespace d = octet::emu::detail;
  if (const cudaError_t e = check_stream(stream, "cudaMemsetAsync")) return record(e);
  if (d::capturing(stream)) {
    if (const cudaError_t e = d::check_device_range(ptr, count, "cudaMemsetAsync", "destination")) {
      return record(e);
    }
    d::capture(stream, "cudaMemsetAsync",
               [=] { record(d::set(ptr, value, count, "cudaMemsetAsync")); });
    return cudaSuccess;
  }
  if (const cudaError_t e = d::refuse_in_capture(stream, "cudaMemsetAsync")) return record(e);
  return record(d::set(ptr, value, count, "cudaMemsetAsync"));
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  if (stream == nullptr) return record(cudaErrorInvalidValue);
  std::lock_guard lock(octet::emu::detail::handles_mutex());
  // Never freed: a use after cudaStreamDestroy must still find the dead stream.
  *stream = new CUstream_st{octet::emu::detail::kStreamMagic, octet::emu::detail::t_device, false};
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return record(cudaErrorInvalidResourceHandle);
  }
  if (const cudaError_t e = check_stream(stream, "cudaStreamDestroy")) return record(e);
  std::lock_guard lock(octet::emu::detail::handles_mutex());
  stream->destroyed = true;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (const cudaError_t e = check_stream(stream, "cudaStreamSynchronize")) return record(e);
  return record(octet::emu::detail::refuse_in_capture(stream, "cudaStreamSynchronize"));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return record(check_stream(stream, "cudaStreamQuery"));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr || event->magic != octet::emu::detail::kEventMagic || event->destroyed) {
    return record(cudaErrorInvalidResourceHandle);
  }
  if (const cudaError_t e = check_stream(stream, "cudaStreamWaitEvent")) return record(e);
  if (octet::emu::detail::capturing(stream)) {
    return record(octet::emu::detail::refuse_in_capture(stream, "cudaStreamWaitEvent"));
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return record(cudaErrorInvalidValue);
  std::lock_guard lock(octet::emu::detail::handles_mutex());
  *event = new CUevent_st{
      octet::emu::detail::kEventMagic, octet::emu::detail::t_device, flags, false, false, {}};
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr || event->magic != octet::emu::detail::kEventMagic || event->destroyed) {
    return record(cudaErrorInvalidResourceHandle);
  }
  event->destroyed = true;  // kept, so that a later use is reported
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr || event->magic != octet::emu::detail::kEventMagic || event->destroyed) {
    return record(cudaErrorInvalidResourceHandle);
  }
  if (const cudaError_t e = check_stream(stream, "cudaEventRecord")) return record(e);
  if (event->device != octet::emu::detail::t_device) {
    warn("cudaEventRecord: the event belongs to another device than the current one");
    return record(cudaErrorInvalidResourceHandle);
  }
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr || event->magic != octet::emu::detail::kEventMagic || event->destroyed) {
    return record(cudaErrorInvalidResourceHandle);
  }
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  for (cudaEvent_t e : {start, end}) {
    if (e == nullptr || e->magic != octet::emu::detail::kEventMagic || e->destroyed ||
        !e->recorded || (e->flags & cudaEventDisableTiming)) {
      return record(cudaErrorInvalidResourceHandle);
    }
  }
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  if (func == nullptr) return record(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > octet::emu::detail::kOptinSmem) {
      warn("cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(value) +
           ") is above the device's opt-in limit of " +
           std::to_string(octet::emu::detail::kOptinSmem));
      return record(cudaErrorInvalidValue);
    }
    std::lock_guard lock(octet::emu::detail::attributes_mutex());
    octet::emu::detail::smem_limits()[func] = static_cast<size_t>(value);
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return record(cudaErrorInvalidValue);
}

}  // extern "C"
