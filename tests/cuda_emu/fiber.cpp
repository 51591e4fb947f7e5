// CUDA emulation build: the fibers that run a block's threads (the execution model is described
// in exec.cpp). Each emulated thread is a fiber on a small mmap'd stack with a guard page, switched
// by a hand-written x86-64 context switch (ucontext elsewhere). A fiber runs until it reaches
// __syncthreads, a warp intrinsic or its end and then hands over to the next runnable thread of
// its block; when none is left, control goes back to run_block, which reports a deadlock if any
// thread still waits. A thread's exit is checked against the barrier and the warp intrinsics its
// block's other threads wait at.
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "emu_internal.h"
#include "octet_cuda_emu/device.h"

#if OCTET_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace octet::emu::detail {
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

unsigned long long g_block_serial = 0;  // under the launch mutex

void fiber_entry(void*);

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

}  // namespace

// The running fiber waits: the next thread runs; returns when this one is resumed.
void yield(Block& b, Thread& th) {
#if OCTET_EMU_ASAN
  switch_to_next(b, &th.ctx, &th.fake_stack);
#else
  switch_to_next(b, &th.ctx, nullptr);
#endif
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

// ---- names for the reports ----

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

}  // namespace octet::emu::detail
