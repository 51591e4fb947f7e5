// The one threading runtime of octet's own code: a pool of octet's own threads (runtime/
// parallel.cpp). Work is split into tasks that any thread may claim, the calling thread included,
// so a thread that the operating system has not scheduled yet (a busy machine) does not hold the
// others up: whoever runs takes the tasks nobody has claimed. Waiting threads spin only briefly,
// then sleep in the kernel, so they do not take the cores that other programs, or octet's own
// working thread, need. oneDNN's GEMM runs single-threaded inside these tasks (kernels/cpu/gemm.cpp
// tiles the output), so no OpenMP team spins either.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>

namespace octet {

// The thread count (the calling thread plus the pool's workers). Defaults to the CPUs this process
// may run on (or OMP_NUM_THREADS when set); set_num_threads changes it (not from inside a task).
int num_threads();
void set_num_threads(int n);
// The CPUs this process may run on (its affinity mask).
int available_cpus();

// While alive, OpenMP code of a library called on this thread (oneDNN's sgemm) runs on this thread
// alone: octet's kernels call such libraries from inside their own tasks or tiles.
class SerialLibraryScope {
 public:
  SerialLibraryScope();
  ~SerialLibraryScope();
  SerialLibraryScope(const SerialLibraryScope&) = delete;
  SerialLibraryScope& operator=(const SerialLibraryScope&) = delete;

 private:
  int previous_;
};

namespace detail {
// Whether the pool's workers are worth waking (runtime/parallel.cpp asks before each job and
// reports after it). On a busy machine the scheduler may run a woken worker so late that the
// calling thread has claimed every task of the job by then (on a 2-core machine beside two busy
// programs, the worker ran 2% of the tasks): the wake-ups are then pure cost, and a worker that
// waits runnable for its turn counts as a fourth program on the cores (the calling thread ran
// 57-67% of the time, where one thread alone beside two busy programs gets two thirds). When the
// workers ran under 1/8 of a window's tasks, jobs run on the calling thread alone for a pause (20
// ms, doubled while the next window says the same, at most 2.56 s), then the workers are tried
// again; a window where they help resets the pause. Results do not change: a job's tasks give the
// same bits on any thread count.
class WorkerGovernor {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int64_t kWindowTasks = 256;
  static constexpr int64_t kHelpfulShare = 8;  // workers must run at least 1/kHelpfulShare
  static constexpr Clock::duration kFirstPause = std::chrono::milliseconds(20);
  static constexpr Clock::duration kLongestPause = std::chrono::milliseconds(2560);

  WorkerGovernor() = default;

  // True when the next job should go to the workers (false during a pause).
  bool wake_workers(Clock::time_point now) {
    if (!paused_) return true;
    if (now < resume_at_) return false;
    paused_ = false;
    return true;
  }
  // A job the workers were woken for: `tasks` in all, `by_workers` of them run by workers.
  void record(int64_t tasks, int64_t by_workers, Clock::time_point now) {
    window_tasks_ += tasks;
    window_by_workers_ += by_workers;
    if (window_tasks_ < kWindowTasks) return;
    if (window_by_workers_ * kHelpfulShare < window_tasks_) {
      paused_ = true;
      resume_at_ = now + pause_;
      pauses_ += 1;
      pause_ = std::min<Clock::duration>(2 * pause_, kLongestPause);
    } else {
      pause_ = kFirstPause;
    }
    window_tasks_ = 0;
    window_by_workers_ = 0;
  }
  // Ends a pause and forgets the window and the pause length; the count of pauses stays.
  void restart() { *this = WorkerGovernor{pauses_}; }
  bool paused() const { return paused_; }
  int64_t pauses() const { return pauses_; }

 private:
  explicit WorkerGovernor(int64_t pauses) : pauses_(pauses) {}
  bool paused_ = false;
  Clock::time_point resume_at_{};
  Clock::duration pause_ = kFirstPause;
  int64_t window_tasks_ = 0;
  int64_t window_by_workers_ = 0;
  int64_t pauses_ = 0;
};
// How many times the pool has paused its workers so far (WorkerGovernor).
int64_t worker_pauses();

// The chunk the calling thread is running inside parallel_for (0 when it runs inline).
inline thread_local int t_chunk = 0;
struct ChunkScope {
  explicit ChunkScope(int chunk) : previous(t_chunk) { t_chunk = chunk; }
  ~ChunkScope() { t_chunk = previous; }
  int previous;
};

using TaskFn = void (*)(void* context, int64_t task);
// Runs fn(context, t) for every t in [0, tasks), each once, on the pool's threads and the calling
// thread; returns when all have finished. fn must not throw (parallel_tasks catches). Runs them in
// order on the calling thread when already inside a task, when another thread is using the pool,
// or when tasks <= 1.
void run_tasks(int64_t tasks, TaskFn fn, void* context);
// Stores std::current_exception() into *slot unless one is there already (thread-safe).
void keep_first_error(std::exception_ptr* slot);
}  // namespace detail

// Index of the chunk the calling body runs, in [0, num_threads()): the slot for per-chunk partial
// results.
inline int parallel_chunk() { return detail::t_chunk; }

// Calls f(t) once for each t in [0, tasks), on any thread, in any order, possibly at the same
// time. The first exception thrown by an f is kept, every other task still runs, and it is
// rethrown on the calling thread (exceptions never cross a thread boundary otherwise).
template <typename F>
void parallel_tasks(int64_t tasks, F&& f) {
  if (tasks <= 0) return;
  struct Context {
    F* f;
    std::exception_ptr error;
  };
  Context context{&f, nullptr};
  detail::run_tasks(
      tasks,
      [](void* c, int64_t t) {
        auto* ctx = static_cast<Context*>(c);
        try {
          (*ctx->f)(t);
        } catch (...) {
          detail::keep_first_error(&ctx->error);
        }
      },
      &context);
  if (context.error) std::rethrow_exception(context.error);
}

// Calls f(lo, hi) on disjoint chunks covering [begin, end). The split depends only on the range
// and the thread count, so per-chunk partial results (indexed by parallel_chunk()) combine
// deterministically. Runs inline when the range is under `grain`. Exceptions as parallel_tasks.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  const int64_t chunks = std::min<int64_t>(num_threads(), max_chunks);
  if (chunks <= 1) {
    detail::ChunkScope chunk(0);
    f(begin, end);
    return;
  }
  parallel_tasks(chunks, [&](int64_t t) {
    detail::ChunkScope chunk(static_cast<int>(t));
    const int64_t lo = begin + n * t / chunks;
    const int64_t hi = begin + n * (t + 1) / chunks;
    if (lo < hi) f(lo, hi);
  });
}

// Reductions: [begin, end) split into chunks that depend only on the range and `grain` (at least
// `grain` elements each, at most kReductionChunks of them), never on the thread count, and
// f(chunk, lo, hi) called once per chunk, on any thread. Partial results kept per chunk and
// combined in chunk order give the same bits on 1, 2 or 16 threads.
inline constexpr int64_t kReductionChunks = 64;
inline int64_t reduction_chunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  const int64_t g = std::max<int64_t>(grain, 1);
  return std::clamp<int64_t>((n + g - 1) / g, 1, kReductionChunks);
}
template <typename F>
void parallel_chunks(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  const int64_t chunks = reduction_chunks(n, grain);
  if (chunks == 1) {
    f(0, begin, end);
    return;
  }
  parallel_tasks(chunks,
                 [&](int64_t c) { f(c, begin + n * c / chunks, begin + n * (c + 1) / chunks); });
}

}  // namespace octet
