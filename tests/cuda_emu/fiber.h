// CUDA emulation build: a block of emulated threads, as the scheduler that runs its threads as
// fibers (fiber.cpp) and the launch, barriers and warp intrinsics that drive it (exec.cpp) share
// it: the threads' and warps' states, the ring of runnable threads, the counters of
// OCTET_EMU_STATS and the names used in the emulator's reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "octet_cuda_emu/device.h"

#if defined(__SANITIZE_ADDRESS__)
#define OCTET_EMU_ASAN 1
#else
#define OCTET_EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace octet::emu::detail {

// A suspended fiber (made and switched in fiber.cpp): its stack pointer, whose stack holds the
// callee-saved registers and the return address (x86-64), or a ucontext elsewhere.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

// The page size of the guard pages (below each emulated stack, after dynamic shared memory).
constexpr size_t kPage = 4096;

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
extern Stats g_stats;  // exec.cpp

// ---- names for the reports (fiber.cpp) ----
const char* op_name(WarpOp op);
std::string str3(uint3 v);
std::string hex32(unsigned v);
// "kernel k (launched at file:line, grid (..), block (..)), block (x,y,z)"
std::string where(const Block& b);
// "thread (x,y,z) (linear t, warp w lane l)"
std::string thread_name(const Block& b, int t);

// ---- the ring of runnable threads ----
inline void push_back(Block& b, int t) {
  b.threads[t].state = State::kReady;
  size_t at = b.head + b.count++;
  if (at >= b.ring.size()) at -= b.ring.size();
  b.ring[at] = t;
}

inline void push_front(Block& b, int t) {
  b.threads[t].state = State::kReady;
  b.head = b.head == 0 ? b.ring.size() - 1 : b.head - 1;
  b.ring[b.head] = t;
  ++b.count;
}

inline int pop(Block& b) {
  if (b.count == 0) return -1;
  const int t = b.ring[b.head];
  if (++b.head == b.ring.size()) b.head = 0;
  --b.count;
  return t;
}

// ---- the scheduler (fiber.cpp) ----
// The running fiber waits: the next thread runs; returns when this one is resumed.
void yield(Block& b, Thread& th);
// Runs every thread of block `b` (b.idx) to its end, from a fresh ring and poisoned dynamic
// shared memory; a deadlock is fatal.
void run_block(Block& b);

}  // namespace octet::emu::detail
