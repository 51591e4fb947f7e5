// octet's thread pool (runtime/parallel.h): every task runs exactly once on any thread count, from
// any number of calling threads at once; a task's exception reaches the caller after every other
// task ran; nested loops run inline; chunk indices stay in [0, num_threads()).
#include "runtime/parallel.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/support/test_util.h"

namespace octet {
namespace {

class ThreadCount {
 public:
  explicit ThreadCount(int n) : previous_(num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(previous_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int previous_;
};

TEST(ThreadPool, EveryTaskRunsExactlyOnceOnAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadCount count(threads);
    for (int64_t tasks : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}, int64_t{70000}}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      parallel_tasks(tasks, [&](int64_t t) { runs[static_cast<size_t>(t)].fetch_add(1); });
      for (int64_t t = 0; t < tasks; ++t) {
        ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1)
            << "task " << t << " of " << tasks << " on " << threads << " threads";
      }
    }
  }
}

TEST(ThreadPool, UsesSeveralThreadsWhenThereAreSeveral) {
  ThreadCount count(2);
  // Tasks that wait for each other finish only if two threads run them at the same time.
  std::atomic<int> arrived{0};
  parallel_tasks(2, [&](int64_t) {
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 2);
}

TEST(ThreadPool, ParallelForChunksCoverTheRangeWithIndicesBelowTheThreadCount) {
  ThreadCount count(3);
  std::vector<std::atomic<int>> hits(1000);
  std::vector<std::atomic<int>> chunk_used(3);
  parallel_for(0, 1000, 1, [&](int64_t lo, int64_t hi) {
    const int chunk = parallel_chunk();
    ASSERT_GE(chunk, 0);
    ASSERT_LT(chunk, 3);
    chunk_used[static_cast<size_t>(chunk)].fetch_add(1);
    // The split depends on the range and the thread count only.
    EXPECT_EQ(lo, 1000 * chunk / 3);
    EXPECT_EQ(hi, 1000 * (chunk + 1) / 3);
    for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  for (auto& c : chunk_used) EXPECT_EQ(c.load(), 1);
}

TEST(ThreadPool, TheFirstExceptionReachesTheCallerAfterEveryTaskRan) {
  ThreadCount count(2);
  std::atomic<int> ran{0};
  const std::string e = test::error_of([&] {
    parallel_tasks(64, [&](int64_t t) {
      ran.fetch_add(1);
      if (t % 8 == 3) OCTET_FAIL("task ", t, " failed");
    });
  });
  EXPECT_NE(e.find("failed"), std::string::npos) << e;
  EXPECT_EQ(ran.load(), 64);
  // A non-octet exception keeps its type.
  EXPECT_THROW(parallel_tasks(4,
                              [](int64_t t) {
                                if (t == 2) throw std::out_of_range("two");
                              }),
               std::out_of_range);
  // And the pool is usable afterwards.
  std::atomic<int> after{0};
  parallel_tasks(16, [&](int64_t) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 16);
}

TEST(ThreadPool, NestedLoopsRunInlineWithTheirOwnChunks) {
  ThreadCount count(2);
  std::atomic<int> inner{0};
  parallel_for(0, 4, 1, [&](int64_t lo, int64_t hi) {
    const int outer_chunk = parallel_chunk();
    for (int64_t i = lo; i < hi; ++i) {
      parallel_for(0, 100, 1,
                   [&](int64_t a, int64_t b) { inner.fetch_add(static_cast<int>(b - a)); });
    }
    EXPECT_EQ(parallel_chunk(), outer_chunk);  // restored after the inner loop
  });
  EXPECT_EQ(inner.load(), 400);
  // The thread count cannot change under a running loop.
  const std::string e =
      test::error_of([] { parallel_tasks(2, [](int64_t) { set_num_threads(1); }); });
  EXPECT_NE(e.find("inside a parallel task"), std::string::npos) << e;
}

TEST(ThreadPool, SeveralCallingThreadsAtOnce) {
  ThreadCount count(2);
  constexpr int kCallers = 4;
  std::vector<int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 200; ++round) {
        std::vector<int64_t> partial(64, 0);
        parallel_tasks(64, [&](int64_t t) { partial[static_cast<size_t>(t)] = t + c; });
        for (int64_t p : partial) sums[static_cast<size_t>(c)] += p;
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(sums[static_cast<size_t>(c)], 200 * (63 * 64 / 2 + 64 * c)) << "caller " << c;
  }
}

TEST(ThreadPool, AForkedChildHasAWorkingPool) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork";
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork";
#endif
#endif
  ThreadCount count(2);
  parallel_tasks(8, [](int64_t) {});  // the workers exist in the parent
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> ran{0};
    parallel_tasks(8, [&](int64_t) { ran.fetch_add(1); });
    _exit(ran.load() == 8 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ThreadPool, ThreadCountRejectsZero) {
  const std::string e = test::error_of([] { set_num_threads(0); });
  EXPECT_NE(e.find("got 0"), std::string::npos) << e;
  EXPECT_GE(available_cpus(), 1);
}

// The governor of a busy machine (detail::WorkerGovernor), on a clock the test moves by hand.
using Governor = detail::WorkerGovernor;
constexpr int64_t kWindow = Governor::kWindowTasks;

// One window of jobs of 4 tasks, `by_workers` of each job's tasks run by workers.
void record_window(Governor& g, int64_t by_workers, Governor::Clock::time_point now) {
  for (int64_t t = 0; t < kWindow; t += 4) g.record(4, by_workers, now);
}

TEST(WorkerGovernor, KeepsTheWorkersWhileTheyRunAnEighthOfTheTasks) {
  Governor g;
  const auto t0 = Governor::Clock::time_point{} + std::chrono::hours(1);
  // 1 task in 8 by workers (half a task per job of 4): just enough.
  for (int64_t t = 0; t < kWindow; t += 8) {
    g.record(4, 1, t0);
    g.record(4, 0, t0);
  }
  EXPECT_FALSE(g.paused());
  EXPECT_TRUE(g.wake_workers(t0));
  EXPECT_EQ(g.pauses(), 0);
}

TEST(WorkerGovernor, PausesTheWorkersForAWindowWhereTheyDidNotHelpThenTriesAgain) {
  Governor g;
  const auto t0 = Governor::Clock::time_point{} + std::chrono::hours(1);
  // Under an eighth: no verdict before the window is full, a pause once it is.
  for (int64_t t = 0; t + 4 < kWindow; t += 4) g.record(4, t % 32 == 0 ? 1 : 0, t0);
  EXPECT_FALSE(g.paused());
  g.record(4, 0, t0);
  ASSERT_TRUE(g.paused());
  EXPECT_EQ(g.pauses(), 1);
  EXPECT_FALSE(g.wake_workers(t0 + Governor::kFirstPause - std::chrono::microseconds(1)));
  EXPECT_TRUE(g.wake_workers(t0 + Governor::kFirstPause));
  EXPECT_FALSE(g.paused());

  // Each further idle window doubles the pause, up to the longest.
  auto now = t0 + Governor::kFirstPause;
  Governor::Clock::duration expected = 2 * Governor::kFirstPause;
  for (int round = 0; round < 10; ++round) {
    record_window(g, 0, now);
    ASSERT_TRUE(g.paused());
    EXPECT_FALSE(g.wake_workers(now + expected - std::chrono::microseconds(1))) << round;
    now += expected;
    EXPECT_TRUE(g.wake_workers(now)) << round;
    expected = std::min<Governor::Clock::duration>(2 * expected, Governor::kLongestPause);
  }
  EXPECT_EQ(expected, Governor::kLongestPause);
  EXPECT_EQ(g.pauses(), 11);

  // A window where the workers help resets the pause to the first one.
  record_window(g, 2, now);
  EXPECT_FALSE(g.paused());
  record_window(g, 0, now);
  ASSERT_TRUE(g.paused());
  EXPECT_FALSE(g.wake_workers(now + Governor::kFirstPause - std::chrono::microseconds(1)));
  EXPECT_TRUE(g.wake_workers(now + Governor::kFirstPause));

  // A restart (a thread count set) ends a pause at once and keeps the count.
  record_window(g, 0, now);
  ASSERT_TRUE(g.paused());
  g.restart();
  EXPECT_TRUE(g.wake_workers(now));
  EXPECT_EQ(g.pauses(), 13);
}

TEST(ThreadPool, SettingTheThreadCountEndsAPauseOfTheWorkers) {
  // A process held to one CPU, two threads and jobs of trivial tasks: the calling thread usually
  // claims them all before the woken worker gets the CPU, so the pool may pause its workers (how
  // often depends on the scheduler; every task still runs once). A thread count set afterwards
  // is tried at once: two tasks that wait for each other finish.
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const int64_t pauses_before = detail::worker_pauses();
  {
    ThreadCount serial(1);
    parallel_tasks(2, [](int64_t) {});  // the old workers leave
    ThreadCount count(2);               // new ones start on this thread's one CPU
    std::atomic<int64_t> runs{0};
    for (int64_t job = 0; job < 16 * kWindow; ++job) {
      parallel_tasks(2, [&](int64_t) { runs.fetch_add(1); });
    }
    EXPECT_EQ(runs.load(), 32 * kWindow);
  }
  const int64_t paused = detail::worker_pauses() - pauses_before;
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  ThreadCount serial(1);
  parallel_tasks(2, [](int64_t) {});
  if (paused == 0) GTEST_SKIP() << "the scheduler ran the worker often enough: no pause to end";
  ThreadCount count(2);
  // Each task waits (10 s at most) for the other to start: both only see 2 on two threads.
  std::atomic<int> arrived{0};
  std::atomic<int> saw_both{0};
  parallel_tasks(2, [&](int64_t) {
    arrived.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    if (arrived.load() == 2) saw_both.fetch_add(1);
  });
  EXPECT_EQ(saw_both.load(), 2) << "the two tasks did not run at the same time";
}

}  // namespace
}  // namespace octet
