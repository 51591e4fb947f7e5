// Device memory on CUDA: the tracker of cuda:0 counts exact requested bytes per tag like the
// CPU's (current and peak), the caching allocator reuses freed blocks without new cudaMalloc
// calls and returns them on empty_cache, storages retag and move between devices, and
// Tensor::to round-trips every dtype. Every check is a delta from the counters at its start.
#include "runtime/memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using test::gpu;

int64_t delta(const MemoryStats& start, const MemoryStats& now, MemTag tag) {
  return now.current_of(tag) - start.current_of(tag);
}

TEST(CudaMemory, TrackerCountsExactRequestedBytesPerTag) {
  OCTET_REQUIRE_CUDA();
  const MemoryStats start = memory_stats(gpu());
  const MemoryStats cpu_start = memory_stats(Device::cpu());
  {
    MemTagScope weights(MemTag::kWeights);
    Tensor w = Tensor::empty({3, 5}, DType::kF32, gpu());  // 60 bytes (the cache rounds to 512)
    Tensor b = Tensor::empty({7}, DType::kBF16, gpu());    // 14 bytes
    MemoryStats now = memory_stats(gpu());
    EXPECT_EQ(delta(start, now, MemTag::kWeights), 74);
    EXPECT_EQ(now.live_allocations - start.live_allocations, 2);
    {
      MemTagScope grads(MemTag::kGrads);
      Tensor g = Tensor::empty({2, 3, 5}, DType::kE4M3, gpu());        // 30 bytes
      Tensor i = Tensor::empty({3}, DType::kI64, gpu());               // 24 bytes
      Tensor big = Tensor::empty({(1 << 20) + 3}, DType::kU8, gpu());  // past the 1 MiB rounding
      now = memory_stats(gpu());
      EXPECT_EQ(delta(start, now, MemTag::kGrads), 54 + (1 << 20) + 3);
      EXPECT_EQ(delta(start, now, MemTag::kWeights), 74);
      EXPECT_EQ(now.total_current - start.total_current, 74 + 54 + (1 << 20) + 3);
    }
    now = memory_stats(gpu());
    EXPECT_EQ(delta(start, now, MemTag::kGrads), 0);
    EXPECT_EQ(delta(start, now, MemTag::kWeights), 74);
    // Device allocations are not host allocations.
    const MemoryStats cpu_now = memory_stats(Device::cpu());
    EXPECT_EQ(cpu_now.total_current, cpu_start.total_current);
  }
  const MemoryStats end = memory_stats(gpu());
  EXPECT_EQ(end.total_current, start.total_current);
  EXPECT_EQ(end.live_allocations, start.live_allocations);
}

TEST(CudaMemory, PeaksPerTagAndTotal) {
  OCTET_REQUIRE_CUDA();
  reset_peak_memory(gpu());
  const MemoryStats start = memory_stats(gpu());
  {
    MemTagScope scope(MemTag::kWeights);
    Tensor w = Tensor::empty({250}, DType::kF32, gpu());  // 1000 bytes, freed before the grads
  }
  {
    MemTagScope scope(MemTag::kGrads);
    Tensor g = Tensor::empty({300}, DType::kBF16, gpu());  // 600 bytes
  }
  const MemoryStats s = memory_stats(gpu());
  EXPECT_EQ(s.peak_of(MemTag::kWeights) - start.current_of(MemTag::kWeights), 1000);
  EXPECT_EQ(s.peak_of(MemTag::kGrads) - start.current_of(MemTag::kGrads), 600);
  EXPECT_EQ(s.total_peak - start.total_current, 1000);  // never both alive
  EXPECT_EQ(s.total_current, start.total_current);
  reset_peak_memory(gpu());
  EXPECT_EQ(memory_stats(gpu()).peak, memory_stats(gpu()).current);
}

TEST(CudaMemory, FreedBlockIsReusedWithoutANewCudaMalloc) {
  OCTET_REQUIRE_CUDA();
  for (int64_t bytes : {int64_t{1000}, int64_t{3} << 20}) {  // a small and a large block
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    Tensor t = Tensor::empty({bytes}, DType::kU8, gpu());
    const void* first = t.data();
    const cuda::CacheStats held = cuda::cache_stats(gpu());
    t = Tensor();
    const cuda::CacheStats freed = cuda::cache_stats(gpu());
    EXPECT_GT(freed.cached_bytes, held.cached_bytes) << "the block went back to the driver";
    EXPECT_EQ(freed.reserved_bytes, held.reserved_bytes);
    Tensor again = Tensor::empty({bytes}, DType::kU8, gpu());
    const cuda::CacheStats reused = cuda::cache_stats(gpu());
    EXPECT_EQ(reused.cuda_mallocs, held.cuda_mallocs);
    EXPECT_EQ(reused.cached_bytes, held.cached_bytes);
    EXPECT_EQ(again.data(), first) << "the one cached block of this size is the one handed out";
  }
}

TEST(CudaMemory, EmptyCacheReturnsCachedBytesToTheDriver) {
  OCTET_REQUIRE_CUDA();
  { Tensor t = Tensor::empty({5 << 20}, DType::kU8, gpu()); }
  const cuda::CacheStats before = cuda::cache_stats(gpu());
  ASSERT_GT(before.cached_bytes, 0u);
  const int64_t live = memory_stats(gpu()).total_current;
  cuda::empty_cache(gpu());
  const cuda::CacheStats after = cuda::cache_stats(gpu());
  EXPECT_EQ(after.cached_bytes, 0u);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes - before.cached_bytes);
  EXPECT_EQ(memory_stats(gpu()).total_current, live) << "live tensors are not touched";
  // The next allocation needs the driver again.
  Tensor t = Tensor::empty({5 << 20}, DType::kU8, gpu());
  EXPECT_EQ(cuda::cache_stats(gpu()).cuda_mallocs, after.cuda_mallocs + 1);
}

TEST(CudaMemory, StorageRetagsAndBackwardHoldsOnTheDevice) {
  OCTET_REQUIRE_CUDA();
  MemTagScope scope(MemTag::kActivations);
  Tensor t = Tensor::empty({100}, DType::kF32, gpu());  // 400 bytes
  reset_peak_memory(gpu());
  const MemoryStats start = memory_stats(gpu());
  t.storage()->set_tag(MemTag::kSaved);
  MemoryStats now = memory_stats(gpu());
  EXPECT_EQ(delta(start, now, MemTag::kActivations), -400);
  EXPECT_EQ(delta(start, now, MemTag::kSaved), 400);
  EXPECT_EQ(now.peak_of(MemTag::kSaved) - start.current_of(MemTag::kSaved), 400);
  EXPECT_EQ(now.total_current, start.total_current);
  t.storage()->set_tag(MemTag::kActivations);
  // A save-for-backward hold counts computed data as saved until released.
  t.storage()->hold_for_backward();
  EXPECT_EQ(delta(start, memory_stats(gpu()), MemTag::kSaved), 400);
  t.storage()->release_from_backward();
  EXPECT_EQ(delta(start, memory_stats(gpu()), MemTag::kSaved), 0);
  EXPECT_EQ(delta(start, memory_stats(gpu()), MemTag::kActivations), 0);
}

TEST(CudaMemory, ToRoundTripsEveryDtypeAndCountsOnTheDevice) {
  OCTET_REQUIRE_CUDA();
  for (DType dtype : kAllDTypes) {
    std::vector<uint8_t> bytes(37 * 11 * dtype_size(dtype));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
    const Tensor host = Tensor::from_bytes(bytes.data(), {37, 11}, dtype);
    const MemoryStats start = memory_stats(gpu());
    Tensor dev;
    {
      MemTagScope scope(MemTag::kWorkspace);
      dev = host.to(gpu());
    }
    EXPECT_TRUE(dev.device().is_cuda());
    EXPECT_EQ(dev.shape(), host.shape());
    EXPECT_EQ(dev.dtype(), dtype);
    EXPECT_EQ(delta(start, memory_stats(gpu()), MemTag::kWorkspace),
              static_cast<int64_t>(host.nbytes()));
    const Tensor copy = dev.clone();  // device to device
    EXPECT_TRUE(copy.device().is_cuda());
    EXPECT_FALSE(copy.shares_storage(dev));
    const Tensor back = copy.to(Device::cpu());
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_EQ(std::memcmp(back.data(), host.data(), host.nbytes()), 0) << dtype;
  }
  // A view (a slice of rows) copies only its own bytes.
  const Tensor base = test::random_tensor({10, 4}, DType::kF32, 8);
  const Tensor rows = test::on_gpu(base).slice(2, 5);
  EXPECT_TRUE(test::same_bits(rows.to(Device::cpu()), base.slice(2, 5).clone()));
  // to_floats and item read device tensors through a host copy.
  EXPECT_EQ(test::on_gpu(base).to_floats(), base.to_floats());
  EXPECT_EQ(test::scalar(2.5f, gpu()).item(), 2.5f);
}

TEST(CudaMemory, MoveStorageToTheDeviceAndBackKeepsTagVersionAndViews) {
  OCTET_REQUIRE_CUDA();
  const Tensor values = test::random_tensor({8, 16}, DType::kF32, 9);
  MemTagScope scope(MemTag::kWeights);
  Tensor t = values.clone();
  const Tensor view = t.slice(2, 4);
  t.bump_version();
  const uint64_t version = t.version();
  const MemoryStats cpu_start = memory_stats(Device::cpu());
  const MemoryStats gpu_start = memory_stats(gpu());
  t.move_storage_to(gpu());
  EXPECT_TRUE(t.device().is_cuda());
  EXPECT_TRUE(view.device().is_cuda()) << "a view shares the storage, so it moves too";
  EXPECT_EQ(t.version(), version);
  EXPECT_EQ(t.storage()->tag(), MemTag::kWeights);
  EXPECT_EQ(delta(gpu_start, memory_stats(gpu()), MemTag::kWeights), 8 * 16 * 4);
  EXPECT_EQ(delta(cpu_start, memory_stats(Device::cpu()), MemTag::kWeights), -8 * 16 * 4);
  EXPECT_TRUE(test::same_bits(view, values.slice(2, 4).clone()));
  t.move_storage_to(Device::cpu());
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(delta(gpu_start, memory_stats(gpu()), MemTag::kWeights), 0);
  EXPECT_EQ(delta(cpu_start, memory_stats(Device::cpu()), MemTag::kWeights), 0);
  EXPECT_TRUE(test::same_bits(t, values));
}

}  // namespace
}  // namespace octet
