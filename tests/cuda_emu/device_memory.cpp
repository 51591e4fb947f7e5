// CUDA emulation build: the emulated device memory and its protection. Device memory lives in a
// reserved address range that is PROT_NONE except while a DeviceAccess is alive (a kernel, a copy,
// the emulated cuBLASLt), so host code that dereferences a device pointer faults, as it would on a
// GPU, and the fault handler here says so (it also explains overflows of an emulated thread's
// stack and accesses past a launch's dynamic shared memory). Pointers are classified against the
// live cudaMalloc blocks for the checks of launches, copies and the emulated cuBLASLt.
#include <cuda_runtime_api.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "emu_internal.h"

namespace octet::emu::detail {
namespace {

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

  // `track`: a kernel launch whose traffic is recorded (TrafficRecorder on, arena mode, device
  // memory protected, no access already open). Device memory then stays PROT_NONE and the first
  // load from a page of a live block opens it for reading, the first store for reading and
  // writing (track_fault), so that close() can count the distinct 4 KiB pages read and written.
  void open(bool track) {
    std::lock_guard lock(mutex_);
    const bool protect = options().protect && arena_ != 0 && top_ > 0;
    if (access_depth_++ != 0 || !protect) return;
    if (track && tracking_supported()) {
      const size_t pages = top_ / kPage;
      page_state_.assign(pages, 0);
      for (const auto& [base, block] : live_) {
        const size_t first = (base - arena_) / kPage;
        const size_t last = std::min(pages, first + mapped_size(block.size) / kPage);
        for (size_t i = first; i < last; ++i) page_state_[i] = kLive;
      }
      tracked_pages_ = pages;
      tracking_.store(true);
      return;
    }
    mprotect(reinterpret_cast<void*>(arena_), top_, PROT_READ | PROT_WRITE);
  }
  // `pages_read` and `pages_written` get the tracked launch's page counts (0 when untracked).
  void close(int64_t* pages_read = nullptr, int64_t* pages_written = nullptr) {
    std::lock_guard lock(mutex_);
    if (tracking_.exchange(false)) {
      int64_t read = 0, written = 0;
      for (size_t i = 0; i < tracked_pages_; ++i) {
        read += (page_state_[i] & kRead) != 0;
        written += (page_state_[i] & kWritten) != 0;
      }
      if (pages_read != nullptr) *pages_read = read;
      if (pages_written != nullptr) *pages_written = written;
    }
    if (--access_depth_ == 0 && options().protect && arena_ != 0 && top_ > 0) {
      mprotect(reinterpret_cast<void*>(arena_), top_, PROT_NONE);
    }
  }

  // From the fault handler, during a tracked launch: opens the page of `a` for the access and
  // marks it; false when `a` is not in a live block (a real fault) or the page was open already.
  bool track_fault(uintptr_t a, bool store) {
    if (!tracking_.load() || a < arena_ || a >= arena_ + tracked_pages_ * kPage) return false;
    uint8_t& state = page_state_[(a - arena_) / kPage];
    const uint8_t bit = store ? kWritten : kRead;
    if ((state & kLive) == 0 || (state & bit) != 0) return false;
    state |= bit;
    void* page = reinterpret_cast<void*>(a & ~(kPage - 1));
    mprotect(page, kPage, (state & kWritten) != 0 ? PROT_READ | PROT_WRITE : PROT_READ);
    return true;
  }

  // Tracking reads the store bit of x86-64's page-fault error code.
  static bool tracking_supported() {
#if defined(__x86_64__)
    return !options().malloc_memory && options().protect;
#else
    return false;
#endif
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
  static constexpr uint8_t kLive = 1, kRead = 2, kWritten = 4;
  std::atomic<bool> tracking_{false};
  size_t tracked_pages_ = 0;
  std::vector<uint8_t> page_state_;  // per arena page while tracking: kLive | kRead | kWritten
  std::map<size_t, size_t> free_;    // arena offset -> bytes
  std::map<uintptr_t, DeviceBlock> live_;
};

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

// The store bit (1) of the page-fault error code, on x86-64 Linux.
bool fault_is_store(void* context) {
#if defined(__x86_64__)
  return (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
  (void)context;
  return false;
#endif
}

void segv_handler(int sig, siginfo_t* info, void* context) {
  const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  if (Memory::get().track_fault(a, fault_is_store(context))) return;  // a traffic-recorded launch
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

PointerKind classify(const void* p, DeviceBlock* block) { return Memory::get().classify(p, block); }

std::string describe(const void* p) { return Memory::get().describe(p); }

DeviceAccess::DeviceAccess(bool track) { Memory::get().open(track); }
DeviceAccess::~DeviceAccess() {
  if (open_) Memory::get().close();
}
void DeviceAccess::close(int64_t* pages_read, int64_t* pages_written) {
  open_ = false;
  Memory::get().close(pages_read, pages_written);
}
bool traffic_pages_supported() { return Memory::tracking_supported(); }

cudaError_t device_allocate(void** ptr, size_t size, int device) {
  return Memory::get().allocate(ptr, size, device);
}

cudaError_t device_release(void* ptr) { return Memory::get().release(ptr); }

size_t device_bytes_used() { return Memory::get().used(); }

}  // namespace octet::emu::detail
