// Allocator accounting: exact bytes per tag, peaks, retagging, view lifetimes and concurrency,
// all asserted as deltas from the counters at the start of each test.
#include "runtime/memory.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/storage.h"
#include "runtime/tensor.h"

namespace octet {
namespace {

constexpr MemTag kAllTags[] = {MemTag::kWeights,     MemTag::kGrads, MemTag::kOptimizer,
                               MemTag::kActivations, MemTag::kSaved, MemTag::kWorkspace,
                               MemTag::kOther};

// Counter changes since a snapshot: current bytes per tag, total, live count.
struct Delta {
  std::array<int64_t, kNumMemTags> current{};
  int64_t total = 0;
  int64_t live = 0;

  int64_t of(MemTag tag) const { return current[static_cast<size_t>(tag)]; }
};

Delta delta_since(const MemoryStats& start) {
  const MemoryStats now = memory_stats();
  Delta d;
  for (size_t i = 0; i < kNumMemTags; ++i) d.current[i] = now.current[i] - start.current[i];
  d.total = now.total_current - start.total_current;
  d.live = now.live_allocations - start.live_allocations;
  return d;
}

// Every tag's delta, as "weights=60 grads=0 ..." so a failure shows the whole picture.
std::string describe(const Delta& d) {
  std::string text;
  for (MemTag tag : kAllTags) {
    text += std::string(mem_tag_name(tag)) + "=" + std::to_string(d.of(tag)) + " ";
  }
  return text + "total=" + std::to_string(d.total) + " live=" + std::to_string(d.live);
}

// Asserts that the deltas are exactly `expected` per tag (tags not listed: 0).
void expect_deltas(const MemoryStats& start, std::vector<std::pair<MemTag, int64_t>> expected,
                   int64_t live) {
  const Delta d = delta_since(start);
  Delta want;
  for (auto [tag, bytes] : expected) want.current[static_cast<size_t>(tag)] += bytes;
  for (int64_t bytes : want.current) want.total += bytes;
  want.live = live;
  EXPECT_EQ(d.current, want.current) << "got " << describe(d) << "\nwant " << describe(want);
  EXPECT_EQ(d.total, want.total) << describe(d);
  EXPECT_EQ(d.live, want.live) << describe(d);
}

TEST(Memory, TagNames) {
  const char* names[] = {"weights", "grads",     "optimizer", "activations",
                         "saved",   "workspace", "other"};
  for (size_t i = 0; i < kNumMemTags; ++i) EXPECT_EQ(mem_tag_name(kAllTags[i]), names[i]);
}

TEST(Memory, ScopesNestAndDefaultIsOther) {
  EXPECT_EQ(current_mem_tag(), MemTag::kOther);
  {
    MemTagScope weights(MemTag::kWeights);
    EXPECT_EQ(current_mem_tag(), MemTag::kWeights);
    {
      MemTagScope saved(MemTag::kSaved);
      EXPECT_EQ(current_mem_tag(), MemTag::kSaved);
    }
    EXPECT_EQ(current_mem_tag(), MemTag::kWeights);
  }
  EXPECT_EQ(current_mem_tag(), MemTag::kOther);
}

TEST(Memory, ScopeIsPerThread) {
  MemTagScope weights(MemTag::kWeights);
  MemTag seen = MemTag::kWeights;
  std::thread([&] { seen = current_mem_tag(); }).join();
  EXPECT_EQ(seen, MemTag::kOther);
  EXPECT_EQ(current_mem_tag(), MemTag::kWeights);
}

TEST(Memory, CountsExactRequestedBytesPerTag) {
  const MemoryStats start = memory_stats();
  {
    MemTagScope weights_scope(MemTag::kWeights);
    Tensor w = Tensor::empty({3, 5}, DType::kF32);  // 15 x 4 = 60 bytes
    Tensor b = Tensor::zeros({7}, DType::kBF16);    // 7 x 2 = 14 bytes
    expect_deltas(start, {{MemTag::kWeights, 74}}, 2);
    {
      MemTagScope grads_scope(MemTag::kGrads);
      Tensor g = Tensor::full({2, 3, 5}, 1.f, DType::kE4M3);  // 30 x 1 = 30 bytes
      Tensor i = Tensor::empty({3}, DType::kI64);             // 3 x 8 = 24 bytes
      expect_deltas(start, {{MemTag::kWeights, 74}, {MemTag::kGrads, 54}}, 4);
    }
    expect_deltas(start, {{MemTag::kWeights, 74}}, 2);
    // Outside the inner scope again, but inside weights: an f16 scalar is weights too.
    Tensor s = Tensor::empty({}, DType::kF16);  // 0-d: 1 x 2 = 2 bytes
    expect_deltas(start, {{MemTag::kWeights, 76}}, 3);
  }
  Tensor other = Tensor::from_floats({1, 2, 3, 4, 5}, {5}, DType::kI32);  // 5 x 4 = 20 bytes
  expect_deltas(start, {{MemTag::kOther, 20}}, 1);
  auto storage = Storage::allocate(33, Device::cpu(), MemTag::kWorkspace);  // tag argument wins
  expect_deltas(start, {{MemTag::kOther, 20}, {MemTag::kWorkspace, 33}}, 2);
  storage.reset();
  other = Tensor();
  expect_deltas(start, {}, 0);
}

TEST(Memory, EveryDtypeCountsNumelTimesSize) {
  // Sizes written out by hand, not taken from dtype_size, so a wrong table fails here too.
  const std::pair<DType, int64_t> sizes[] = {
      {DType::kF32, 4},  {DType::kBF16, 2}, {DType::kF16, 2}, {DType::kE4M3, 1}, {DType::kE5M2, 1},
      {DType::kE8M0, 1}, {DType::kI32, 4},  {DType::kI64, 8}, {DType::kU8, 1}};
  const MemoryStats start = memory_stats();
  MemTagScope scope(MemTag::kActivations);
  std::vector<Tensor> held;
  int64_t want = 0;
  for (auto [dtype, size] : sizes) {
    held.push_back(Tensor::empty({3, 11}, dtype));
    want += 33 * size;
    EXPECT_EQ(held.back().nbytes(), static_cast<size_t>(33 * size)) << dtype;
    expect_deltas(start, {{MemTag::kActivations, want}}, static_cast<int64_t>(held.size()));
  }
  EXPECT_EQ(want, 33 * 24);
  held.clear();
  expect_deltas(start, {}, 0);
}

TEST(Memory, TotalPeakIsHighestSumNotSumOfTagPeaks) {
  reset_peak_memory();
  const MemoryStats start = memory_stats();
  {
    MemTagScope scope(MemTag::kWeights);
    Tensor w = Tensor::empty({250}, DType::kF32);  // 1000 bytes, freed before the grads exist
  }
  {
    MemTagScope scope(MemTag::kGrads);
    Tensor g = Tensor::empty({300}, DType::kBF16);  // 600 bytes
  }
  const MemoryStats s = memory_stats();
  EXPECT_EQ(s.peak_of(MemTag::kWeights) - start.current_of(MemTag::kWeights), 1000);
  EXPECT_EQ(s.peak_of(MemTag::kGrads) - start.current_of(MemTag::kGrads), 600);
  // Never more than one of them alive: total peak is +1000, not +1600.
  EXPECT_EQ(s.total_peak - start.total_current, 1000);
  EXPECT_EQ(s.total_current, start.total_current);

  // Both alive at once: now the total peak is the sum.
  Tensor w, g;
  {
    MemTagScope scope(MemTag::kWeights);
    w = Tensor::empty({250}, DType::kF32);
  }
  {
    MemTagScope scope(MemTag::kGrads);
    g = Tensor::empty({300}, DType::kBF16);
  }
  EXPECT_EQ(memory_stats().total_peak - start.total_current, 1600);
}

TEST(Memory, PeakOfATagOnlyRises) {
  reset_peak_memory();
  const MemoryStats start = memory_stats();
  MemTagScope scope(MemTag::kWorkspace);
  Tensor a = Tensor::empty({128}, DType::kU8);  // 128
  Tensor b = Tensor::empty({64}, DType::kU8);   // 64: live 192
  a = Tensor();                                 // live 64
  Tensor c = Tensor::empty({100}, DType::kU8);  // live 164 < 192
  const MemoryStats s = memory_stats();
  EXPECT_EQ(s.current_of(MemTag::kWorkspace) - start.current_of(MemTag::kWorkspace), 164);
  EXPECT_EQ(s.peak_of(MemTag::kWorkspace) - start.current_of(MemTag::kWorkspace), 192);
  EXPECT_EQ(s.total_peak - start.total_current, 192);
}

TEST(Memory, ResetPeakMakesPeakEqualCurrent) {
  MemTagScope scope(MemTag::kActivations);
  Tensor kept = Tensor::empty({10}, DType::kF32);
  { Tensor big = Tensor::empty({1000}, DType::kF32); }
  MemoryStats s = memory_stats();
  ASSERT_GE(s.peak_of(MemTag::kActivations), s.current_of(MemTag::kActivations) + 4000);
  ASSERT_GE(s.total_peak, s.total_current + 4000);
  reset_peak_memory();
  s = memory_stats();
  EXPECT_EQ(s.peak, s.current);
  EXPECT_EQ(s.total_peak, s.total_current);
}

TEST(Memory, FreeingDecrementsExactly) {
  const MemoryStats start = memory_stats();
  {
    Tensor t = Tensor::empty({17, 3}, DType::kF16);  // 102 bytes
    expect_deltas(start, {{MemTag::kOther, 102}}, 1);
    Tensor copy = t;  // a second handle, not a second allocation
    expect_deltas(start, {{MemTag::kOther, 102}}, 1);
  }
  expect_deltas(start, {}, 0);
}

TEST(Memory, ViewsKeepStorageAliveUntilTheLastDies) {
  const MemoryStats start = memory_stats();
  MemTagScope scope(MemTag::kSaved);
  Tensor base = Tensor::empty({4, 8}, DType::kF32);  // 128 bytes
  Tensor rows = base.slice(1, 3);                    // views: no new bytes
  Tensor flat = rows.reshape({-1});
  EXPECT_EQ(rows.nbytes(), 64u);
  expect_deltas(start, {{MemTag::kSaved, 128}}, 1);
  base = Tensor();
  // The whole storage stays counted, not just the 64 bytes the views can see.
  expect_deltas(start, {{MemTag::kSaved, 128}}, 1);
  rows = Tensor();
  expect_deltas(start, {{MemTag::kSaved, 128}}, 1);
  flat = Tensor();
  expect_deltas(start, {}, 0);
}

TEST(Memory, CloneOfAViewCountsOnlyTheViewsBytes) {
  const MemoryStats start = memory_stats();
  Tensor base = Tensor::empty({10, 4}, DType::kF32);  // 160 bytes
  Tensor copy = base.slice(2, 5).clone();             // 3 x 4 x 4 = 48 bytes
  expect_deltas(start, {{MemTag::kOther, 208}}, 2);
}

TEST(Memory, SetTagMovesBytesAndRaisesDestinationPeak) {
  MemTagScope scope(MemTag::kActivations);
  Tensor t = Tensor::empty({100}, DType::kF32);  // 400 bytes
  reset_peak_memory();
  const MemoryStats start = memory_stats();
  t.storage()->set_tag(MemTag::kSaved);
  EXPECT_EQ(t.storage()->tag(), MemTag::kSaved);
  expect_deltas(start, {{MemTag::kActivations, -400}, {MemTag::kSaved, 400}}, 0);
  const MemoryStats s = memory_stats();
  EXPECT_EQ(s.peak_of(MemTag::kSaved) - start.current_of(MemTag::kSaved), 400);
  // The bytes left activations; its peak remembers them, and the total did not move.
  EXPECT_EQ(s.peak_of(MemTag::kActivations), start.current_of(MemTag::kActivations));
  EXPECT_EQ(s.total_peak, start.total_current);

  t.storage()->set_tag(MemTag::kSaved);  // same tag: nothing changes
  expect_deltas(start, {{MemTag::kActivations, -400}, {MemTag::kSaved, 400}}, 0);

  // Freed under the tag it has now, not the one it was born with.
  t = Tensor();
  expect_deltas(start, {{MemTag::kActivations, -400}}, -1);
}

TEST(Memory, ZeroByteTensorsAreLiveButWeighNothing) {
  const MemoryStats start = memory_stats();
  MemTagScope scope(MemTag::kWorkspace);
  Tensor a = Tensor::empty({0, 16}, DType::kF32);
  Tensor b = Tensor::zeros({5, 0}, DType::kBF16);
  Tensor c = Tensor::from_floats({}, {0}, DType::kE4M3);
  EXPECT_EQ(a.nbytes(), 0u);
  EXPECT_EQ(b.numel(), 0);
  expect_deltas(start, {}, 3);  // three storages, zero bytes
  Tensor d = a.clone();
  expect_deltas(start, {}, 4);
  a = b = c = d = Tensor();
  expect_deltas(start, {}, 0);
}

TEST(Memory, FailedAllocationLeavesCountersAlone) {
  const MemoryStats cpu_start = memory_stats();
  const MemoryStats cuda_start = memory_stats(Device::cuda(0));
  if (cuda_device_count() == 0) {
    EXPECT_THROW(Tensor::empty({8}, DType::kF32, Device::cuda(0)), Error);
  }
  EXPECT_THROW(Tensor::empty({-1, 8}, DType::kF32), Error);
  EXPECT_THROW(Tensor::from_floats({1, 2, 3}, {2, 2}), Error);
  expect_deltas(cpu_start, {}, 0);
  EXPECT_EQ(memory_stats(Device::cuda(0)).total_current, cuda_start.total_current);
  EXPECT_EQ(memory_stats(Device::cuda(0)).live_allocations, cuda_start.live_allocations);
}

TEST(Memory, ConcurrentAllocationIsExact) {
  constexpr int kThreads = 8;
  constexpr int kIterations = 2000;
  const MemoryStats start = memory_stats();
  std::barrier sync(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const MemTag tag = kAllTags[t % kNumMemTags];
      MemTagScope scope(tag);
      // Thread t holds (t + 1) x 100 bytes while the main thread looks.
      Tensor held = Tensor::empty({(t + 1) * 100}, DType::kU8);
      sync.arrive_and_wait();  // all allocated
      sync.arrive_and_wait();  // main thread has checked
      std::mt19937 gen(static_cast<uint32_t>(t));
      std::vector<Tensor> pool;
      for (int i = 0; i < kIterations; ++i) {
        pool.push_back(Tensor::empty({static_cast<int64_t>(gen() % 64)}, DType::kF32));
        if (i % 3 == 0) pool.back().storage()->set_tag(kAllTags[gen() % kNumMemTags]);
        if (pool.size() > 16) pool.erase(pool.begin() + static_cast<int64_t>(gen() % 16));
      }
    });
  }
  sync.arrive_and_wait();
  std::vector<std::pair<MemTag, int64_t>> want;
  for (int t = 0; t < kThreads; ++t) want.push_back({kAllTags[t % kNumMemTags], (t + 1) * 100});
  expect_deltas(start, want, kThreads);  // 100 + 200 + ... + 800 = 3600 bytes in all
  EXPECT_EQ(delta_since(start).total, 3600);
  sync.arrive_and_wait();
  for (auto& thread : threads) thread.join();
  expect_deltas(start, {}, 0);
}

}  // namespace
}  // namespace octet
