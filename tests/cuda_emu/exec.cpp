// CUDA emulation build: the execution model. A launch runs its blocks one after another on the
// calling thread; each block's threads are fibers (fiber.cpp: small mmap'd stacks with a guard
// page, a hand-written x86-64 context switch, ucontext elsewhere). A fiber runs until it reaches
// __syncthreads, a warp intrinsic or its end, so every interleaving the emulator produces is one a
// GPU may produce, and the conditions CUDA leaves undefined are reported with the kernel, block,
// thread and source line: a barrier not reached by every thread of the block, an exited or missing
// lane in a warp intrinsic's mask, different barriers or intrinsics met at once, a deadlock.
// Shared memory is poisoned at the start of every block. This file: the launch (its checks, the
// order of the blocks, dynamic shared memory), __syncthreads and the warp intrinsics.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "emu_internal.h"
#include "fiber.h"
#include "octet_cuda_emu/device.h"

namespace octet::emu::detail {

__thread ExecState g_exec;
Stats g_stats;

namespace {

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

bool is_shuffle(WarpOp op) {
  return op == WarpOp::kShflIdx || op == WarpOp::kShflUp || op == WarpOp::kShflDown ||
         op == WarpOp::kShflXor;
}

Block& current_block(const char* what) {
  if (g_exec.block == nullptr) {
    fatal(std::string(what) + " called outside a kernel (host code)");
  }
  return *static_cast<Block*>(g_exec.block);
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
  // Device memory opened for the grid; page-tracked when the traffic recorder is on.
  const bool tracked = traffic_on();
  DeviceAccess access(tracked);
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
  if (tracked) {
    int64_t pages_read = 0, pages_written = 0;
    access.close(&pages_read, &pages_written);
    record_launch_traffic(config.name, pages_read, pages_written);
  }
}

}  // namespace octet::emu::detail
