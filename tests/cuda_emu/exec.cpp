// CUDA emulation build: the execution model. A launch runs its blocks one after another on the
// calling thread; each block's threads are fibers on small mmap'd stacks with a guard page,
// switched by a hand-written x86-64 context switch (ucontext elsewhere). A fiber runs until it
// reaches __syncthreads, a warp intrinsic or its end, so every interleaving the emulator produces
// is one a GPU may produce, and the conditions CUDA leaves undefined are reported with the
// kernel, block, thread and source line: a barrier not reached by every thread of the block, an
// exited or missing lane in a warp intrinsic's mask, different barriers or intrinsics met at
// once, a deadlock. Shared memory is poisoned at the start of every block.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "emu_internal.h"
#include "octet_cuda_emu/device.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define OCTET_EMU_ASAN 1
#else
#define OCTET_EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace octet::emu::detail {

__thread ExecState g_exec;

namespace {

// ---- context switch ----
#if defined(__x86_64__)
extern "C" void octet_emu_switch(void** save_sp, void* load_sp);
extern "C" void octet_emu_trampoline();
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save_sp
// and resumes the context saved at load_sp. A new context's stack holds the same frame with the
// trampoline as return address, r12 = argument, r13 = entry. MXCSR and the x87 control word are
// not switched: every fiber of a launch runs with the launch's settings (launch() sets them).
asm(R"(
  .text
  .p2align 4
  .globl octet_emu_switch
  .hidden octet_emu_switch
  .type octet_emu_switch, @function
octet_emu_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size octet_emu_switch, .-octet_emu_switch

  .p2align 4
  .globl octet_emu_trampoline
  .hidden octet_emu_trampoline
  .type octet_emu_trampoline, @function
octet_emu_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size octet_emu_trampoline, .-octet_emu_trampoline
)");

struct Context {
  void* sp = nullptr;
};

void make_context(Context* c, char* stack, size_t size, void (*entry)(void*), void* arg) {
  // After the switch pops 6 registers and returns into the trampoline, rsp is `top`: 16-byte
  // aligned at the trampoline's call, as the ABI wants.
  const uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top - 56);
  frame[0] = 0;                                  // r15
  frame[1] = 0;                                  // r14
  frame[2] = reinterpret_cast<uint64_t>(entry);  // r13
  frame[3] = reinterpret_cast<uint64_t>(arg);    // r12
  frame[4] = 0;                                  // rbx
  frame[5] = 0;                                  // rbp
  frame[6] = reinterpret_cast<uint64_t>(&octet_emu_trampoline);
  c->sp = frame;
}

inline void switch_context(Context* from, Context* to) { octet_emu_switch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
};

void (*g_uc_entry)(void*) = nullptr;  // every fiber has the same entry, called with null
void uc_entry() { g_uc_entry(nullptr); }

void make_context(Context* c, char* stack, size_t size, void (*entry)(void*), void*) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  g_uc_entry = entry;
  makecontext(&c->uc, &uc_entry, 0);
}

inline void switch_context(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

// ---- stacks: mmap'd, a PROT_NONE guard page below, kept for reuse ----
constexpr size_t kPage = 4096;

class StackPool {
 public:
  char* acquire() {
    if (!free_.empty()) {
      char* s = free_.back();
      free_.pop_back();
#if OCTET_EMU_ASAN
      // A fiber that exited left its frames' redzones poisoned (it never returned).
      __asan_unpoison_memory_region(s, options().stack_bytes);
#endif
      return s;
    }
    const size_t size = options().stack_bytes;
    void* p =
        mmap(nullptr, size + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fatal("cannot map a stack for an emulated thread");
    mprotect(p, kPage, PROT_NONE);
    const auto lo = reinterpret_cast<uintptr_t>(p);
    register_guard(lo, lo + kPage, Guard::kStack);
    install_fault_handler();
    return static_cast<char*>(p) + kPage;
  }
  void release(char* s) { free_.push_back(s); }

 private:
  std::vector<char*> free_;
};

thread_local StackPool t_stacks;

// ---- a block's state ----
enum class State : uint8_t { kNew, kReady, kRunning, kWaitBarrier, kWaitWarp, kDone };

struct Thread {
  uint3 idx;
  State state = State::kNew;
  Context ctx;
  char* stack = nullptr;
  uint64_t warp_result = 0;
  const char* wait_file = nullptr;
  int wait_line = 0;
  WarpOp wait_op = WarpOp::kSyncwarp;
#if OCTET_EMU_ASAN
  void* fake_stack = nullptr;
#endif
};

struct WarpGroup {
  unsigned mask = 0, arrived = 0;
  WarpOp op = WarpOp::kSyncwarp;
  const char* file = nullptr;
  int line = 0;
  uint64_t values[32] = {};
  int src[32] = {};
};

struct Warp {
  unsigned exists = 0, done = 0;
  std::vector<WarpGroup> groups;  // pending rendezvous, by disjoint masks
};

struct Block {
  const LaunchConfig* config = nullptr;
  uint3 idx{};
  int nthreads = 0;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  // Runnable threads, a ring of nthreads slots: a thread is in it at most once.
  std::vector<int> ring;
  size_t head = 0, count = 0;
  int current = -1;
  char* dead_stack = nullptr;  // of the thread that just exited, released by whoever runs next
  int done = 0;
  unsigned long long serial = 0;
  // __syncthreads
  int arrived = 0;
  const char* barrier_file = nullptr;
  int barrier_line = 0;
  int reduce_op = -1;
  int reduce_acc = 0, reduce_result = 0;
  std::vector<int> waiters;
  // the scheduler's context and the body
  Context scheduler;
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
  char* smem = nullptr;
#if OCTET_EMU_ASAN
  void* scheduler_fake = nullptr;
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
#endif
};

unsigned long long g_block_serial = 0;  // under the launch mutex

// OCTET_EMU_STATS=1: totals printed at exit.
struct Stats {
  unsigned long long launches = 0, blocks = 0, threads = 0, barriers = 0, warp_ops = 0;
  ~Stats() {
    if (std::getenv("OCTET_EMU_STATS") == nullptr) return;
    std::fprintf(stderr,
                 "octet CUDA emulator: %llu launches, %llu blocks, %llu threads, %llu "
                 "__syncthreads, %llu warp intrinsics\n",
                 launches, blocks, threads, barriers, warp_ops);
  }
};
Stats g_stats;

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

void fiber_entry(void*);

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kShflIdx:
      return "__shfl_sync";
    case WarpOp::kShflUp:
      return "__shfl_up_sync";
    case WarpOp::kShflDown:
      return "__shfl_down_sync";
    case WarpOp::kShflXor:
      return "__shfl_xor_sync";
    case WarpOp::kBallot:
      return "__ballot_sync";
    case WarpOp::kAny:
      return "__any_sync";
    case WarpOp::kAll:
      return "__all_sync";
    case WarpOp::kSyncwarp:
      return "__syncwarp";
  }
  return "?";
}

bool is_shuffle(WarpOp op) {
  return op == WarpOp::kShflIdx || op == WarpOp::kShflUp || op == WarpOp::kShflDown ||
         op == WarpOp::kShflXor;
}

std::string str3(uint3 v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "(%u,%u,%u)", v.x, v.y, v.z);
  return buf;
}

std::string hex32(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string where(const Block& b) {
  return "kernel " + std::string(b.config->name) + " (launched at " + b.config->file + ":" +
         std::to_string(b.config->line) + ", grid " + str3(b.config->grid) + ", block " +
         str3(b.config->block) + "), block " + str3(b.idx);
}

std::string thread_name(const Block& b, int t) {
  return "thread " + str3(b.threads[t].idx) + " (linear " + std::to_string(t) + ", warp " +
         std::to_string(t / 32) + " lane " + std::to_string(t % 32) + ")";
}

Block& current_block(const char* what) {
  if (g_exec.block == nullptr) {
    fatal(std::string(what) + " called outside a kernel (host code)");
  }
  return *static_cast<Block*>(g_exec.block);
}

void push_back(Block& b, int t) {
  b.threads[t].state = State::kReady;
  size_t at = b.head + b.count++;
  if (at >= b.ring.size()) at -= b.ring.size();
  b.ring[at] = t;
}

void push_front(Block& b, int t) {
  b.threads[t].state = State::kReady;
  b.head = b.head == 0 ? b.ring.size() - 1 : b.head - 1;
  b.ring[b.head] = t;
  ++b.count;
}

int pop(Block& b) {
  if (b.count == 0) return -1;
  const int t = b.ring[b.head];
  if (++b.head == b.ring.size()) b.head = 0;
  --b.count;
  return t;
}

// Whoever runs after a switch: the stack of a thread that exited is free now.
void after_switch(Block& b) {
  if (b.dead_stack != nullptr) {
    t_stacks.release(b.dead_stack);
    b.dead_stack = nullptr;
  }
}

// Leaves the running context (a fiber, or the scheduler when `from` is null) for the next
// runnable thread, or for the scheduler when none is left (the block is done or deadlocked).
// `fake` is the leaving fiber's AddressSanitizer slot, null for a fiber that exits.
void switch_to_next(Block& b, Context* from, void** fake) {
  const int t = pop(b);
  Context* to = &b.scheduler;
#if OCTET_EMU_ASAN
  const void* bottom = b.scheduler_bottom;
  size_t size = b.scheduler_size;
#endif
  if (t >= 0) {
    Thread& th = b.threads[t];
    if (th.state == State::kReady && th.stack == nullptr) {
      th.stack = t_stacks.acquire();
      make_context(&th.ctx, th.stack, options().stack_bytes, &fiber_entry, nullptr);
    }
    th.state = State::kRunning;
    b.current = t;
    g_exec.thread_idx = th.idx;
    g_exec.tid = t;
    to = &th.ctx;
#if OCTET_EMU_ASAN
    bottom = th.stack;
    size = options().stack_bytes;
#endif
  } else {
    b.current = -1;
  }
#if OCTET_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake;
#endif
  Context* self = from != nullptr ? from : &b.scheduler;
  switch_context(self, to);
#if OCTET_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake != nullptr ? *fake : nullptr, nullptr, nullptr);
#endif
  after_switch(b);
}

// The running fiber waits: the next thread runs; returns when this one is resumed.
void yield(Block& b, Thread& th) {
#if OCTET_EMU_ASAN
  switch_to_next(b, &th.ctx, &th.fake_stack);
#else
  switch_to_next(b, &th.ctx, nullptr);
#endif
}

[[noreturn]] void thread_exit(Block& b) {
  const int t = b.current;
  Thread& th = b.threads[t];
  th.state = State::kDone;
  ++b.done;
  if (b.arrived > 0) {
    fatal(thread_name(b, t) + " of " + where(b) + " exited while " + std::to_string(b.arrived) +
          " thread(s) of the block wait at __syncthreads (" + b.barrier_file + ":" +
          std::to_string(b.barrier_line) +
          "): a barrier must be reached by every thread of the block (return early only after "
          "the last __syncthreads, or keep the exiting threads in the loop)");
  }
  Warp& w = b.warps[t / 32];
  const unsigned bit = 1u << (t % 32);
  w.done |= bit;
  for (const WarpGroup& g : w.groups) {
    if ((g.mask & bit) && !(g.arrived & bit)) {
      fatal(thread_name(b, t) + " of " + where(b) + " exited while lanes " + hex32(g.arrived) +
            " of its warp wait for it at " + op_name(g.op) + " (" + g.file + ":" +
            std::to_string(g.line) + ", mask " + hex32(g.mask) + ")");
    }
  }
  b.dead_stack = th.stack;
  th.stack = nullptr;
  switch_to_next(b, &th.ctx, nullptr);
  __builtin_unreachable();
}

void fiber_entry(void*) {
  Block& b = *static_cast<Block*>(g_exec.block);
#if OCTET_EMU_ASAN
  // The first fiber of a block learns the scheduler's stack from the switch that started it.
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (b.scheduler_bottom == nullptr) {
    b.scheduler_bottom = bottom;
    b.scheduler_size = size;
  }
#endif
  after_switch(b);
  try {
    b.body(b.ctx);
  } catch (const std::exception& e) {
    fatal(thread_name(b, b.current) + " of " + where(b) + " threw an exception (device code " +
          "cannot throw): " + e.what());
  } catch (...) {
    fatal(thread_name(b, b.current) + " of " + where(b) + " threw an exception");
  }
  thread_exit(b);
}

// One line per distinct wait, for the deadlock report.
std::string waits(const Block& b) {
  std::string text;
  int shown = 0;
  for (int t = 0; t < b.nthreads && shown < 12; ++t) {
    const Thread& th = b.threads[t];
    if (th.state != State::kWaitBarrier && th.state != State::kWaitWarp) continue;
    if (t > 0 && b.threads[t - 1].state == th.state && b.threads[t - 1].wait_line == th.wait_line &&
        b.threads[t - 1].wait_op == th.wait_op) {
      continue;  // the same wait as the thread before: shown once per run
    }
    text += "\n    " + thread_name(b, t) + " and following: " +
            (th.state == State::kWaitBarrier ? std::string("__syncthreads")
                                             : std::string(op_name(th.wait_op))) +
            " at " + th.wait_file + ":" + std::to_string(th.wait_line);
    ++shown;
  }
  return text;
}

void run_block(Block& b) {
  const Options& o = options();
  b.serial = ++g_block_serial;
  ++g_stats.blocks;
  g_stats.threads += b.nthreads;
  b.done = 0;
  b.arrived = 0;
  b.reduce_op = -1;
  b.waiters.clear();
  b.ring.resize(b.nthreads);
  b.head = b.count = 0;
  for (Warp& w : b.warps) {
    w.done = 0;
    w.groups.clear();
  }
  for (Thread& th : b.threads) {
    if (th.stack != nullptr) t_stacks.release(th.stack);  // a thread left waiting by a fatal
    th.stack = nullptr;
  }
  if (b.config->smem > 0) std::memset(b.smem, o.poison, b.config->smem);
  g_exec.block_idx = b.idx;
  if (o.order == 1) {
    for (int t = b.nthreads - 1; t >= 0; --t) push_back(b, t);
  } else {
    for (int t = 0; t < b.nthreads; ++t) push_back(b, t);
    if (o.order == 2) {
      std::mt19937 rng(static_cast<unsigned>(b.serial));
      std::shuffle(b.ring.begin(), b.ring.end(), rng);
    }
  }
  g_exec.block = &b;
  // The fibers hand over to each other; control comes back here when none can run.
#if OCTET_EMU_ASAN
  b.scheduler_bottom = nullptr;
  switch_to_next(b, nullptr, &b.scheduler_fake);
#else
  switch_to_next(b, nullptr, nullptr);
#endif
  g_exec.block = nullptr;
  b.current = -1;
  if (b.done != b.nthreads) {
    fatal("deadlock in " + where(b) + ": " + std::to_string(b.nthreads - b.done) + " of " +
          std::to_string(b.nthreads) + " threads wait and none can run (" + std::to_string(b.done) +
          " exited):" + waits(b));
  }
}

// Dynamic shared memory: the end of a mapping followed by a PROT_NONE page, so a kernel that
// indexes past its dynamic shared memory faults at once.
char* dynamic_smem_buffer(size_t bytes) {
  thread_local char* region = nullptr;
  thread_local size_t capacity = 0;
  const size_t need = (bytes + kPage - 1) / kPage * kPage;
  if (need > capacity) {
    if (region != nullptr) munmap(region, capacity + kPage);
    void* p =
        mmap(nullptr, need + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fatal("cannot map dynamic shared memory");
    region = static_cast<char*>(p);
    capacity = need;
    mprotect(region + capacity, kPage, PROT_NONE);
    const auto guard = reinterpret_cast<uintptr_t>(region + capacity);
    register_guard(guard, guard + kPage, Guard::kSharedMemory);
  }
  const size_t rounded = (bytes + 15) / 16 * 16;
  return region + capacity - rounded;
}

}  // namespace

void syncthreads(const char* file, int line) {
  Block& b = current_block("__syncthreads");
  ++g_stats.barriers;
  const int t = b.current;
  Thread& th = b.threads[t];
  if (b.done > 0) {
    fatal(thread_name(b, t) + " of " + where(b) + " reached __syncthreads at " + file + ":" +
          std::to_string(line) + " after " + std::to_string(b.done) +
          " thread(s) of the block exited: a barrier must be reached by every thread of the "
          "block");
  }
  if (b.arrived == 0) {
    b.barrier_file = file;
    b.barrier_line = line;
  } else if (b.barrier_line != line ||
             (b.barrier_file != file && std::strcmp(b.barrier_file, file) != 0)) {
    fatal("divergent barriers in " + where(b) + ": " + thread_name(b, t) + " is at " + file + ":" +
          std::to_string(line) + " while " + std::to_string(b.arrived) + " thread(s) wait at " +
          b.barrier_file + ":" + std::to_string(b.barrier_line));
  }
  if (++b.arrived == b.nthreads) {
    b.arrived = 0;
    for (int w : b.waiters) push_back(b, w);
    b.waiters.clear();
    return;
  }
  th.state = State::kWaitBarrier;
  th.wait_file = file;
  th.wait_line = line;
  b.waiters.push_back(t);
  yield(b, th);
}

int syncthreads_reduce(int predicate, int op, const char* file, int line) {
  Block& b = current_block("__syncthreads_count/and/or");
  if (b.arrived == 0) {
    b.reduce_op = op;
    b.reduce_acc = 0;
  } else if (b.reduce_op != op) {
    fatal("divergent barriers in " + where(b) + ": different __syncthreads_* variants meet");
  }
  b.reduce_acc += predicate != 0;
  const int n = b.nthreads;
  const bool last = b.arrived + 1 == n;
  if (last) {
    b.reduce_result = op == 0 ? b.reduce_acc : op == 1 ? (b.reduce_acc == n) : (b.reduce_acc > 0);
  }
  syncthreads(file, line);
  return b.reduce_result;  // read before any thread can reach the next barrier
}

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                 int line) {
  Block& b = current_block(op_name(op));
  ++g_stats.warp_ops;
  const int t = b.current;
  Thread& th = b.threads[t];
  const int lane = t % 32, base = t - lane;
  Warp& w = b.warps[t / 32];
  const unsigned bit = 1u << lane;
  auto site = [&] { return std::string(op_name(op)) + " at " + file + ":" + std::to_string(line); };
  if (!(mask & bit)) {
    fatal(thread_name(b, t) + " of " + where(b) + " calls " + site() + " with mask " + hex32(mask) +
          ", which does not name its own lane");
  }
  if (mask & ~w.exists) {
    fatal(site() + " in " + where(b) + ": mask " + hex32(mask) + " names lanes " +
          hex32(mask & ~w.exists) + " that do not exist (the block has " +
          std::to_string(b.nthreads) + " threads, not a multiple of 32)");
  }
  if (mask & w.done) {
    fatal(site() + " in " + where(b) + ": mask " + hex32(mask) + " names lanes " +
          hex32(mask & w.done) + " that have exited; " + thread_name(b, t) + " would wait forever");
  }
  int src = lane;
  if (is_shuffle(op)) {
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
      fatal(site() + " in " + where(b) + ": width " + std::to_string(width) +
            " is not a power of two up to 32");
    }
    const int seg = lane & ~(width - 1), in = lane & (width - 1);
    switch (op) {
      case WarpOp::kShflIdx:
        src = seg + (arg & (width - 1));
        break;
      case WarpOp::kShflUp:
        src = in - arg >= 0 ? lane - arg : lane;
        break;
      case WarpOp::kShflDown:
        src = in + arg < width ? lane + arg : lane;
        break;
      case WarpOp::kShflXor: {
        const int x = lane ^ arg;
        src = (x >= 0 && x < seg + width) ? x : lane;  // later groups: own value (CUDA's rule)
        break;
      }
      default:
        break;
    }
  }
  WarpGroup* g = nullptr;
  for (WarpGroup& group : w.groups) {
    if (!(group.mask & mask)) continue;
    if (group.mask != mask) {
      fatal(site() + " in " + where(b) + ": " + thread_name(b, t) + " uses mask " + hex32(mask) +
            " while lanes " + hex32(group.arrived) + " wait at " + op_name(group.op) + " (" +
            group.file + ":" + std::to_string(group.line) + ") with the overlapping mask " +
            hex32(group.mask));
    }
    g = &group;
  }
  if (g == nullptr) {
    w.groups.emplace_back();
    g = &w.groups.back();
    g->mask = mask;
    g->op = op;
    g->file = file;
    g->line = line;
  } else if (g->op != op) {
    // CUDA: every lane named in the mask executes the same intrinsic (from any call site).
    fatal("divergent warp in " + where(b) + ": " + thread_name(b, t) + " is at " + site() +
          " while lanes " + hex32(g->arrived) + " of mask " + hex32(mask) + " wait at " +
          op_name(g->op) + " (" + g->file + ":" + std::to_string(g->line) + ")");
  }
  g->values[lane] = value;
  g->src[lane] = src;
  g->arrived |= bit;
  if (g->arrived != g->mask) {
    th.state = State::kWaitWarp;
    th.wait_file = file;
    th.wait_line = line;
    th.wait_op = op;
    yield(b, th);
    return th.warp_result;
  }
  // Everyone is here: every lane's result at once, then the waiting lanes run again.
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) {
    if ((g->mask >> l & 1u) && g->values[l] != 0) ballot |= 1u << l;
  }
  for (int l = 0; l < 32; ++l) {
    if (!(g->mask >> l & 1u)) continue;
    uint64_t r = 0;
    switch (is_shuffle(g->op) ? WarpOp::kShflIdx : g->op) {
      case WarpOp::kShflIdx: {
        const int s = g->src[l];
        if (!(g->mask >> s & 1u)) {
          fatal("warp shuffle in " + where(b) + " (" + op_name(g->op) + " at " + g->file + ":" +
                std::to_string(g->line) + "): lane " + std::to_string(l) + " reads lane " +
                std::to_string(s) + ", which is not in the mask " + hex32(g->mask) +
                " (the value is undefined)");
        }
        r = g->values[s];
        break;
      }
      case WarpOp::kBallot:
        r = ballot;
        break;
      case WarpOp::kAny:
        r = ballot != 0;
        break;
      case WarpOp::kAll:
        r = ballot == g->mask;
        break;
      default:
        break;
    }
    b.threads[base + l].warp_result = r;
  }
  const unsigned group_mask = g->mask;
  w.groups.erase(w.groups.begin() + (g - w.groups.data()));
  // The released lanes run next, in lane order: a warp's lanes then go from one intrinsic to the
  // next together, which keeps their stacks in cache.
  for (int l = 31; l >= 0; --l) {
    if ((group_mask >> l & 1u) && l != lane) push_front(b, base + l);
  }
  return th.warp_result;
}

unsigned active_mask() {
  Block& b = current_block("__activemask");
  const Warp& w = b.warps[b.current / 32];
  return w.exists & ~w.done;
}

void* dynamic_shared() {
  Block& b = current_block("extern __shared__");
  return b.smem;
}

void static_shared(void* p, size_t bytes, unsigned long long* generation) {
  Block& b = current_block("__shared__");
  if (*generation == b.serial) return;
  *generation = b.serial;
  std::memset(p, options().poison, bytes);
}

void launch(const LaunchConfig& config, const PointerArg* pointers, int count, void (*body)(void*),
            void* ctx) {
  const Options& o = options();
  if (g_exec.block != nullptr) {
    fatal("kernel " + std::string(config.name) + " launched from inside a kernel (" +
          where(*static_cast<Block*>(g_exec.block)) + "): dynamic parallelism is not emulated");
  }
  const dim3 bd = config.block, gd = config.grid;
  const uint64_t threads = uint64_t{bd.x} * bd.y * bd.z;
  if (threads == 0 || threads > 1024 || bd.x > 1024 || bd.y > 1024 || bd.z > 64 || gd.x == 0 ||
      gd.y == 0 || gd.z == 0 || gd.x > 0x7FFFFFFFu || gd.y > 65535 || gd.z > 65535) {
    if (o.verbose) {
      warn("launch of " + std::string(config.name) + " at " + config.file + ":" +
           std::to_string(config.line) + ": invalid configuration grid " + str3(gd) + " block " +
           str3(bd));
    }
    record(cudaErrorInvalidConfiguration);
    return;
  }
  const size_t smem_limit = max_dynamic_smem(config.id);
  if (config.smem > smem_limit) {
    warn("launch of " + std::string(config.name) + " at " + config.file + ":" +
         std::to_string(config.line) + ": " + std::to_string(config.smem) +
         " bytes of dynamic shared memory, above the kernel's limit of " +
         std::to_string(smem_limit) +
         (config.id == nullptr ? " (a deduced kernel template: the emulator cannot see "
                                 "cudaFuncSetAttribute for it)"
                               : " (raise it with cudaFuncSetAttribute)"));
    record(cudaErrorInvalidValue);
    return;
  }
  if (const cudaError_t e = check_stream(config.stream, config.name)) {
    record(e);
    return;
  }
  for (int i = 0; i < count; ++i) {
    DeviceBlock blk;
    const PointerArg& a = pointers[i];
    if (a.ptr == nullptr) continue;
    const PointerKind kind = classify(a.ptr, &blk);
    const std::string arg = "argument " + std::to_string(a.index) + " of kernel " + config.name +
                            " (launched at " + config.file + ":" + std::to_string(config.line) +
                            ")";
    if (kind == PointerKind::kHost) {
      fatal(arg + " is a " + describe(a.ptr) +
            ": a kernel cannot dereference host memory on a GPU");
    }
    if (kind == PointerKind::kFreedDevice) fatal(arg + " is a " + describe(a.ptr));
    if (blk.device != current_device()) {
      fatal(arg + " points to memory of cuda:" + std::to_string(blk.device) +
            " but the kernel runs on cuda:" + std::to_string(current_device()));
    }
  }
  if (o.verbose) {
    warn("launch " + std::string(config.name) + " grid " + str3(gd) + " block " + str3(bd) +
         " smem " + std::to_string(config.smem) + " at " + config.file + ":" +
         std::to_string(config.line));
  }

  std::lock_guard lock(launch_mutex());
  ++g_stats.launches;
  DeviceAccess access;
  thread_local Block b;
  b.config = &config;
  b.nthreads = static_cast<int>(threads);
  b.threads.resize(threads);
  for (int t = 0; t < b.nthreads; ++t) {
    b.threads[t].idx = {static_cast<unsigned>(t % bd.x), static_cast<unsigned>(t / bd.x % bd.y),
                        static_cast<unsigned>(t / (bd.x * bd.y))};
  }
  b.warps.assign((threads + 31) / 32, Warp{});
  for (size_t w = 0; w < b.warps.size(); ++w) {
    const uint64_t lanes = std::min<uint64_t>(32, threads - w * 32);
    b.warps[w].exists = lanes == 32 ? 0xFFFFFFFFu : ((1u << lanes) - 1);
  }
  b.body = body;
  b.ctx = ctx;
  b.smem = dynamic_smem_buffer(config.smem);
  g_exec.block_dim = uint3{bd.x, bd.y, bd.z};
  g_exec.grid_dim = uint3{gd.x, gd.y, gd.z};
  set_running(config.name, config.file, config.line, config.smem);
#if defined(__x86_64__)
  // GPU arithmetic: round to nearest even, subnormals kept (no FTZ/DAZ), whatever the host set.
  const unsigned host_csr = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(0x1F80);
#endif
  // Blocks in order, or (OCTET_EMU_ORDER reverse/shuffle) in another order a GPU may use too: a
  // result that depends on it reveals blocks that race on global memory.
  const uint64_t blocks = uint64_t{gd.x} * gd.y * gd.z;
  std::vector<uint64_t> order;
  if (o.order == 2) {
    order.resize(blocks);
    for (uint64_t i = 0; i < blocks; ++i) order[i] = i;
    std::mt19937_64 rng(g_stats.launches);
    std::shuffle(order.begin(), order.end(), rng);
  }
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t k = o.order == 1 ? blocks - 1 - i : o.order == 2 ? order[i] : i;
    b.idx = uint3{static_cast<unsigned>(k % gd.x), static_cast<unsigned>(k / gd.x % gd.y),
                  static_cast<unsigned>(k / (uint64_t{gd.x} * gd.y))};
    run_block(b);
  }
#if defined(__x86_64__)
  __builtin_ia32_ldmxcsr(host_csr);
#endif
  set_running(nullptr, nullptr, 0, 0);
  g_exec = ExecState{};
}

}  // namespace octet::emu::detail
