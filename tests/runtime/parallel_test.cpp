// octet's thread pool (runtime/parallel.h): every task runs exactly once on any thread count, from
// any number of calling threads at once; a task's exception reaches the caller after every other
// task ran; nested loops run inline; chunk indices stay in [0, num_threads()).
#include "runtime/parallel.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

}  // namespace
}  // namespace octet
