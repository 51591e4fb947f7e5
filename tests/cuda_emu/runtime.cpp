// CUDA emulation build: the CUDA runtime API on the CPU. One emulated device (more with
// OCTET_EMU_DEVICE_COUNT), device memory in a reserved address range that host code cannot touch
// outside kernels and copies (a host dereference of a device pointer faults, as it would on a
// GPU, and the fault handler says so), streams and events that run everything at once, and the
// same error codes as the real runtime for the mistakes it can see. Copies check their direction
// and bounds against the device blocks.
#include <cuda_runtime_api.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
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

namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%lx", static_cast<unsigned long>(v));
  return buf;
}

// ---- device memory ----
// Arena mode: one reserved range, blocks page-aligned inside it, PROT_NONE except while a
// DeviceAccess is alive. Malloc mode (AddressSanitizer): aligned_alloc blocks, no protection.
class Memory {
 public:
  static Memory& get() {
    static Memory* m = new Memory();  // never destroyed: tensors may be freed at exit
    return *m;
  }

  cudaError_t allocate(void** ptr, size_t size, int device) {
    std::lock_guard lock(mutex_);
    const size_t mapped = mapped_size(size);
    uintptr_t base = 0;
    if (options().malloc_memory) {
      void* p = std::aligned_alloc(256, round_up(size == 0 ? 1 : size, 256));
      if (p == nullptr) return cudaErrorMemoryAllocation;
      base = reinterpret_cast<uintptr_t>(p);
      std::memset(p, options().poison, size);
    } else {
      if (!reserve()) return cudaErrorMemoryAllocation;
      // Blocks of 2 MiB and more are 2 MiB-aligned so that they are backed by huge pages: the
      // per-launch mprotect then changes a few page-table entries instead of thousands.
      const size_t align = mapped >= kHuge ? kHuge : kPage;
      size_t offset = 0;
      if (!take_free(mapped, align, &offset)) {
        const size_t at = round_up(top_, align);
        if (at + mapped > options().arena_bytes) return cudaErrorMemoryAllocation;
        if (at > top_) put_free(top_, at - top_, /*lower_top=*/false);
        offset = at;
        top_ = at + mapped;
      }
      base = arena_ + offset;
      // Fresh blocks hold the poison pattern: a kernel that reads what nobody wrote sees NaN.
      mprotect(reinterpret_cast<void*>(base), mapped, PROT_READ | PROT_WRITE);
      std::memset(reinterpret_cast<void*>(base), options().poison, mapped);
      if (access_depth_ == 0 && options().protect) {
        mprotect(reinterpret_cast<void*>(base), mapped, PROT_NONE);
      }
    }
    live_[base] = DeviceBlock{base, size, device};
    used_ += mapped;
    *ptr = reinterpret_cast<void*>(base);
    return cudaSuccess;
  }

  cudaError_t release(void* ptr) {
    if (ptr == nullptr) return cudaSuccess;
    std::lock_guard lock(mutex_);
    const auto base = reinterpret_cast<uintptr_t>(ptr);
    auto it = live_.find(base);
    if (it == live_.end()) {
      warn("cudaFree(" + hex(base) + "): not a pointer returned by cudaMalloc (" +
           describe_locked(ptr) + ")");
      return cudaErrorInvalidValue;
    }
    const size_t mapped = mapped_size(it->second.size);
    live_.erase(it);
    used_ -= mapped;
    if (options().malloc_memory) {
      std::free(ptr);
      return cudaSuccess;
    }
    // Give the pages back; the range stays reserved and inaccessible until reused.
    madvise(ptr, mapped, MADV_DONTNEED);
    if (access_depth_ > 0 && options().protect) mprotect(ptr, mapped, PROT_NONE);
    put_free(base - arena_, mapped);
    return cudaSuccess;
  }

  PointerKind classify(const void* p, DeviceBlock* block) {
    std::lock_guard lock(mutex_);
    return classify_locked(p, block);
  }

  std::string describe(const void* p) {
    std::lock_guard lock(mutex_);
    return describe_locked(p);
  }

  // Best effort from the fault handler: no lock if another path holds it.
  bool in_arena(uintptr_t a) const {
    return arena_ != 0 && a >= arena_ && a < arena_ + options().arena_bytes;
  }
  std::string describe_for_fault(uintptr_t a) {
    if (!mutex_.try_lock()) return "device address " + hex(a);
    std::string s = describe_locked(reinterpret_cast<const void*>(a));
    mutex_.unlock();
    return s;
  }

  void open() {
    std::lock_guard lock(mutex_);
    if (access_depth_++ == 0 && options().protect && arena_ != 0 && top_ > 0) {
      mprotect(reinterpret_cast<void*>(arena_), top_, PROT_READ | PROT_WRITE);
    }
  }
  void close() {
    std::lock_guard lock(mutex_);
    if (--access_depth_ == 0 && options().protect && arena_ != 0 && top_ > 0) {
      mprotect(reinterpret_cast<void*>(arena_), top_, PROT_NONE);
    }
  }

  size_t used() {
    std::lock_guard lock(mutex_);
    return used_;
  }

 private:
  static constexpr size_t kPage = 4096, kHuge = size_t{2} << 20;
  static size_t round_up(size_t v, size_t unit) { return (v + unit - 1) / unit * unit; }
  static size_t mapped_size(size_t size) {
    const size_t pages = round_up(size == 0 ? 1 : size, kPage);
    return pages >= kHuge ? round_up(pages, kHuge) : pages;
  }

  bool reserve() {
    if (arena_ != 0) return true;
    const size_t bytes = options().arena_bytes + kHuge;
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      warn("cannot reserve " + std::to_string(options().arena_bytes >> 30) +
           " GiB of address space for device memory (set OCTET_EMU_ARENA_GB lower)");
      return false;
    }
    arena_ = round_up(reinterpret_cast<uintptr_t>(p), kHuge);
    madvise(reinterpret_cast<void*>(arena_), options().arena_bytes, MADV_HUGEPAGE);
    install_fault_handler();
    return true;
  }

  bool take_free(size_t size, size_t align, size_t* offset) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const size_t start = round_up(it->first, align);
      if (start + size > it->first + it->second) continue;
      const size_t begin = it->first, end = it->first + it->second;
      free_.erase(it);
      if (start > begin) free_[begin] = start - begin;
      if (end > start + size) free_[start + size] = end - (start + size);
      *offset = start;
      return true;
    }
    return false;
  }

  void put_free(size_t offset, size_t size, bool lower_top = true) {
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + size == next->first) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    if (lower_top && offset + size == top_) {
      top_ = offset;  // the range above `top_` is never opened
    } else {
      free_[offset] = size;
    }
  }

  PointerKind classify_locked(const void* p, DeviceBlock* block) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = live_.upper_bound(a);
    if (it != live_.begin()) {
      --it;
      if (a <= it->second.base + it->second.size) {  // one past the end counts
        if (block != nullptr) *block = it->second;
        return PointerKind::kDevice;
      }
    }
    if (in_arena(a)) return PointerKind::kFreedDevice;
    return PointerKind::kHost;
  }

  std::string describe_locked(const void* p) const {
    DeviceBlock b;
    switch (classify_locked(p, &b)) {
      case PointerKind::kDevice:
        return "device pointer " + hex(reinterpret_cast<uintptr_t>(p)) + ", " +
               std::to_string(reinterpret_cast<uintptr_t>(p) - b.base) +
               " bytes into a cudaMalloc block of " + std::to_string(b.size) +
               " bytes on cuda:" + std::to_string(b.device);
      case PointerKind::kFreedDevice:
        return "device address " + hex(reinterpret_cast<uintptr_t>(p)) +
               " in no live cudaMalloc block (freed, or past a block's end)";
      case PointerKind::kHost:
        break;
    }
    return "host pointer " + hex(reinterpret_cast<uintptr_t>(p));
  }

  std::mutex mutex_;
  uintptr_t arena_ = 0;
  size_t top_ = 0;  // arena offset above every block
  size_t used_ = 0;
  int access_depth_ = 0;
  std::map<size_t, size_t> free_;  // arena offset -> bytes
  std::map<uintptr_t, DeviceBlock> live_;
};

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

// A fault at a device address, or on an emulated thread's stack guard, gets an explanation and a
// backtrace; any other fault goes to the handler that was there before.
struct sigaction g_previous_segv;
std::atomic<uintptr_t> g_guards[4096][3];  // lo, hi, Guard
std::atomic<int> g_guard_count{0};
std::atomic<const char*> g_running_kernel{nullptr};
std::atomic<const char*> g_running_file{nullptr};
std::atomic<int> g_running_line{0};
std::atomic<size_t> g_running_smem{0};

void write_str(const char* s) {
  const ssize_t rc = write(STDERR_FILENO, s, std::strlen(s));
  (void)rc;
}

void segv_handler(int sig, siginfo_t* info, void* context) {
  const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  std::string what;
  const char* kernel = g_running_kernel.load();
  if (Memory::get().in_arena(a)) {
    what = kernel == nullptr
               ? "host code accessed device memory (" + Memory::get().describe_for_fault(a) +
                     "). On a GPU, a device pointer cannot be dereferenced on the host: use "
                     "cudaMemcpy, or run the code in a kernel"
               : std::string("kernel ") + kernel + " accessed " +
                     Memory::get().describe_for_fault(a) + " (an illegal address on a GPU)";
  } else {
    const int n = std::min(g_guard_count.load(), 4096);
    for (int i = 0; i < n; ++i) {
      if (a >= g_guards[i][0].load() && a < g_guards[i][1].load()) {
        what = g_guards[i][2].load() == static_cast<uintptr_t>(Guard::kStack)
                   ? "stack overflow of an emulated GPU thread (set OCTET_EMU_STACK_KB above " +
                         std::to_string(options().stack_bytes >> 10) + ")"
                   : "access past the end of the launch's " +
                         std::to_string(g_running_smem.load()) +
                         " bytes of dynamic shared memory (extern __shared__)";
      }
    }
  }
  if (what.empty()) {
    // Not ours: restore the previous handler and let the fault happen again under it.
    sigaction(SIGSEGV, &g_previous_segv, nullptr);
    if (!(g_previous_segv.sa_flags & SA_SIGINFO) && g_previous_segv.sa_handler == SIG_DFL) return;
    if (g_previous_segv.sa_flags & SA_SIGINFO) {
      g_previous_segv.sa_sigaction(sig, info, context);
    } else if (g_previous_segv.sa_handler != SIG_IGN) {
      g_previous_segv.sa_handler(sig);
    }
    return;
  }
  write_str("\n==== octet CUDA emulator: segmentation fault: ");
  write_str(what.c_str());
  if (kernel != nullptr) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "\n==== in kernel %s launched at %s:%d", kernel,
                  g_running_file.load(), g_running_line.load());
    write_str(buf);
  }
  write_str("\n==== backtrace:\n");
  void* frames[64];
  const int count = backtrace(frames, 64);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  signal(SIGSEGV, SIG_DFL);
  std::abort();
}

}  // namespace

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // An alternate stack, so that a stack overflow can still be reported.
    static char alt_stack[1 << 16];
    stack_t ss{};
    ss.ss_sp = alt_stack;
    ss.ss_size = sizeof(alt_stack);
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = &segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
  });
}

void register_guard(uintptr_t lo, uintptr_t hi, Guard kind) {
  const int i = g_guard_count.fetch_add(1);
  if (i < 4096) {
    g_guards[i][2] = static_cast<uintptr_t>(kind);
    g_guards[i][0] = lo;
    g_guards[i][1] = hi;
  }
}

void set_running(const char* kernel, const char* file, int line, size_t smem) {
  g_running_file = file;
  g_running_line = line;
  g_running_smem = smem;
  g_running_kernel = kernel;
}

cudaError_t record(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
  return error;
}

int current_device() { return t_device; }

PointerKind classify(const void* p, DeviceBlock* block) { return Memory::get().classify(p, block); }

std::string describe(const void* p) { return Memory::get().describe(p); }

DeviceAccess::DeviceAccess() { Memory::get().open(); }
DeviceAccess::~DeviceAccess() { Memory::get().close(); }

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
  return cudaSuccess;
}

cudaError_t set(void* ptr, int value, size_t count, const char* call) {
  if (count == 0) return cudaSuccess;
  if (const cudaError_t e = check_device_range(ptr, count, call, "destination")) return e;
  DeviceAccess access;
  std::memset(ptr, value, count);
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
using octet::emu::detail::Memory;
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
  prop->major = 9;
  prop->minor = 0;
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

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
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
  const size_t used = Memory::get().used();
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
    default:
      return "cudaError";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return record(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;  // the real runtime returns success and a null pointer
  return record(Memory::get().allocate(ptr, size, octet::emu::detail::t_device));
}

cudaError_t cudaFree(void* ptr) { return record(Memory::get().release(ptr)); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return record(octet::emu::detail::copy(dst, src, count, kind, "cudaMemcpy"));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (const cudaError_t e = check_stream(stream, "cudaMemcpyAsync")) return record(e);
  return record(octet::emu::detail::copy(dst, src, count, kind, "cudaMemcpyAsync"));
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  return record(octet::emu::detail::set(ptr, value, count, "cudaMemset"));
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (const cudaError_t e = check_stream(stream, "cudaMemsetAsync")) return record(e);
  return record(octet::emu::detail::set(ptr, value, count, "cudaMemsetAsync"));
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
  return record(check_stream(stream, "cudaStreamSynchronize"));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return record(check_stream(stream, "cudaStreamQuery"));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr || event->magic != octet::emu::detail::kEventMagic || event->destroyed) {
    return record(cudaErrorInvalidResourceHandle);
  }
  return record(check_stream(stream, "cudaStreamWaitEvent"));
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
