// octet's thread pool (runtime/parallel.h).
//
// One job at a time: the calling thread publishes (task count, function) in `state_`, a 64-bit word
// holding the job's generation, the next unclaimed task and the task count, and every thread,
// itself included, claims tasks by compare-and-swap on that word until none is left. A worker that
// wakes late finds the generation changed or no task left and touches nothing of the job, so the
// job can live on the caller's stack. Waiting (a worker for the next job, the caller for claimed
// tasks to finish) spins a few microseconds, then yields the core for a while, then sleeps on a
// futex (std::atomic::wait), so on a busy machine a waiting thread gives its core away at once
// instead of spinning through its time slice.
#include "runtime/parallel.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/error.h"

namespace octet {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// How long a waiting thread stays awake: spinning first (the next parallel region of a training
// step usually comes within microseconds), then yielding, so a thread that another program or
// octet's own working thread could use gets the core.
constexpr auto kSpinTime = std::chrono::microseconds(4);
constexpr auto kYieldTime = std::chrono::microseconds(200);

// Waits until pred() holds: spin, yield, then sleep on `word` (until it differs from the value
// `sleep_value()` gives at that moment; the caller's wake-up side notifies `word` after making pred
// true, when `sleepers` says someone sleeps).
template <typename Pred, typename Word>
void wait_until(Pred pred, std::atomic<Word>& word, std::atomic<int>& sleepers) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int i = 0;; ++i) {
    if (pred()) return;
    if ((i & 63) == 63) {
      const auto waited = Clock::now() - start;
      if (waited > kSpinTime + kYieldTime) break;
      if (waited > kSpinTime) sched_yield();
    }
    cpu_relax();
  }
  for (;;) {
    // seq_cst throughout: either the waker sees `sleepers` raised, or pred() sees its change.
    const Word seen = word.load();
    if (pred()) return;
    sleepers.fetch_add(1);
    if (!pred()) word.wait(seen);
    sleepers.fetch_sub(1);
  }
}

// state_ layout: generation (high 32 bits) | next task (16 bits) | task count (16 bits).
constexpr int64_t kMaxTasksPerJob = 0xFFFF;
constexpr uint64_t pack(uint64_t generation, uint64_t next, uint64_t count) {
  return (generation << 32) | (next << 16) | count;
}
constexpr uint32_t generation_of(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
constexpr int64_t next_of(uint64_t s) { return static_cast<int64_t>((s >> 16) & 0xFFFF); }
constexpr int64_t count_of(uint64_t s) { return static_cast<int64_t>(s & 0xFFFF); }

thread_local bool t_in_task = false;

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int threads() const { return threads_.load(std::memory_order_relaxed); }
  // Also ends a pause of the workers: a count set on purpose is tried at once.
  void set_threads(int n) {
    std::lock_guard<std::mutex> lock(submit_);
    threads_.store(n, std::memory_order_relaxed);
    governor_.restart();
  }
  int64_t pauses() {
    std::lock_guard<std::mutex> lock(submit_);
    return governor_.pauses();
  }

  // At exit: the workers stop and are joined, so no thread a runtime (LLVM's libomp) registered is
  // alive when that runtime shuts down. Skipped when the pool is busy or exit came from a task.
  void shut_down() {
    if (t_in_task) return;
    std::unique_lock<std::mutex> lock(submit_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    threads_.store(1, std::memory_order_relaxed);
    resize_workers();
  }

  // False when the pool is in use by another thread: the caller then runs the tasks itself.
  bool run(int64_t tasks, detail::TaskFn fn, void* context) {
    std::unique_lock<std::mutex> lock(submit_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    resize_workers();
    if (workers_.empty()) return false;
    if (!governor_.wake_workers(detail::WorkerGovernor::Clock::now())) return false;
    for (int64_t first = 0; first < tasks; first += kMaxTasksPerJob) {
      run_job(std::min(kMaxTasksPerJob, tasks - first), fn, context, first);
    }
    return true;
  }

 private:
  void run_job(int64_t count, detail::TaskFn fn, void* context, int64_t offset) {
    fn_ = fn;
    context_ = context;
    offset_ = offset;
    done_.store(0, std::memory_order_relaxed);
    generation_ += 1;
    state_.store(pack(generation_, 0, static_cast<uint64_t>(count)));
    if (worker_sleepers_.load() > 0) state_.notify_all();
    const int64_t mine = work(generation_);
    wait_until([&] { return done_.load() == count; }, done_, caller_sleepers_);
    governor_.record(count, count - mine, detail::WorkerGovernor::Clock::now());
  }

  // Claims and runs tasks of job `generation` until none is left; returns how many it ran.
  int64_t work(uint32_t generation) {
    int64_t ran = 0;
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      if (generation_of(s) != generation || next_of(s) >= count_of(s)) return ran;
      if (!state_.compare_exchange_weak(s, s + (uint64_t{1} << 16), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;
      }
      const int64_t count = count_of(s);
      // fn_, context_ and offset_ were written before the job's state was published (release),
      // and the caller keeps them until this task is counted done.
      fn_(context_, offset_ + next_of(s));
      ran += 1;
      if (done_.fetch_add(1) + 1 == count && caller_sleepers_.load() > 0) {
        done_.notify_all();
      }
      s = state_.load(std::memory_order_acquire);
    }
  }

  // `seen`: the generation before the worker existed (a job published before the thread got to
  // run is still its job).
  void worker_loop(uint32_t seen) {
    t_in_task = true;  // a parallel_for inside a task runs inline
    for (;;) {
      wait_until([&] { return generation_of(state_.load()) != seen || stop_.load(); }, state_,
                 worker_sleepers_);
      if (stop_.load(std::memory_order_acquire)) return;
      seen = generation_of(state_.load(std::memory_order_acquire));
      (void)work(seen);
    }
  }

  // Called with submit_ held.
  void resize_workers() {
    const size_t wanted = static_cast<size_t>(std::max(0, threads() - 1));
    if (workers_.size() == wanted) return;
    if (!workers_.empty()) {
      stop_.store(true);
      // A new state value too, so a worker between its last check and its sleep wakes as well.
      generation_ += 1;
      state_.store(pack(generation_, 0, 0));
      state_.notify_all();
      for (auto& w : workers_) w.join();
      workers_.clear();
      stop_.store(false);
    }
    const uint32_t seen = generation_;
    for (size_t i = 0; i < wanted; ++i) workers_.emplace_back([this, seen] { worker_loop(seen); });
  }

  std::atomic<int> threads_;
  std::mutex submit_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<int> worker_sleepers_{0};
  std::atomic<int> caller_sleepers_{0};
  std::atomic<bool> stop_{false};
  uint32_t generation_ = 0;          // written by the submitting thread only
  detail::WorkerGovernor governor_;  // used with submit_ held
  detail::TaskFn fn_ = nullptr;
  void* context_ = nullptr;
  int64_t offset_ = 0;
};

// OMP_NUM_THREADS when set (what users of OpenMP programs expect), else the CPUs this process may
// run on (its affinity mask: a container's or taskset's limit).
int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && n >= 1 && n <= 4096) return static_cast<int>(n);
  }
  return available_cpus();
}

// Never destroyed, so nothing that runs during static destruction can find the pool gone; its
// workers are joined at exit (the atexit handler below: LLVM's OpenMP runtime asserts at its own
// shutdown while threads it once saw are alive) and it keeps working on the calling thread after
// that. A forked child (its workers do not exist there) starts a fresh one.
std::atomic<Pool*> g_pool{nullptr};
std::once_flag g_pool_once;

Pool& pool() {
  std::call_once(g_pool_once, [] {
    g_pool.store(new Pool(default_threads()), std::memory_order_release);
    // The OpenMP runtime starts first, so this handler runs before its own shutdown.
    (void)omp_get_max_threads();
    std::atexit([] { g_pool.load(std::memory_order_acquire)->shut_down(); });
    pthread_atfork(nullptr, nullptr, [] {
      const int threads = g_pool.load(std::memory_order_relaxed)->threads();
      g_pool.store(new Pool(threads), std::memory_order_relaxed);
    });
  });
  return *g_pool.load(std::memory_order_acquire);
}

std::mutex g_error_lock;

}  // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int num_threads() { return pool().threads(); }

namespace detail {
int64_t worker_pauses() { return pool().pauses(); }
}  // namespace detail

void set_num_threads(int n) {
  OCTET_CHECK(n >= 1, "thread count must be at least 1, got ", n);
  OCTET_CHECK(!t_in_task, "set_num_threads: called from inside a parallel task");
  pool().set_threads(n);
}

namespace detail {

void run_tasks(int64_t tasks, TaskFn fn, void* context) {
  if (tasks <= 0) return;
  Pool& the_pool = pool();
  // No OpenMP call here: only the kernels that call an OpenMP library (oneDNN) touch its runtime,
  // through SerialLibraryScope, so the pool's threads register with it only when they need to.
  const bool nested = t_in_task;
  t_in_task = true;
  const bool ran = !nested && tasks > 1 && the_pool.run(tasks, fn, context);
  if (!ran) {
    for (int64_t t = 0; t < tasks; ++t) fn(context, t);
  }
  t_in_task = nested;
}

void keep_first_error(std::exception_ptr* slot) {
  std::lock_guard<std::mutex> lock(g_error_lock);
  if (!*slot) *slot = std::current_exception();
}

}  // namespace detail

SerialLibraryScope::SerialLibraryScope() : previous_(omp_get_max_threads()) {
  omp_set_num_threads(1);
}
SerialLibraryScope::~SerialLibraryScope() { omp_set_num_threads(previous_); }

}  // namespace octet
