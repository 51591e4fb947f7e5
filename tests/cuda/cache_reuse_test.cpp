// The caching allocator under training on cuda:0: the blocks a step frees are handed to the next
// step's tensors (no new cudaMalloc once the steps repeat), while the tracker, which follows the
// tensors and not the blocks, shows every tag back where the step found it. GPU only: the CPU has
// no cache. (The memory contracts that hold on every device are in tests/devices.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/optimizer.h"
#include "runtime/cuda.h"
#include "runtime/memory.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/small_gpt.h"
#include "tests/support/test_util.h"

namespace octet::modules {
namespace {

using test::gpu;

// The per-tag live bytes of two snapshots are equal, and so is their total.
void expect_same_current(const MemoryStats& got, const MemoryStats& want, const std::string& what) {
  for (size_t t = 0; t < kNumMemTags; ++t) {
    EXPECT_EQ(got.current[t], want.current[t])
        << what << ": " << mem_tag_name(static_cast<MemTag>(t)) << " bytes";
  }
  EXPECT_EQ(got.total_current, want.total_current) << what;
  EXPECT_EQ(got.live_allocations, want.live_allocations) << what;
}

// (rows, cols) i32 ids in [0, vocab), on the device.
Tensor gpu_ids(int64_t rows, int64_t cols, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::kI32);
  Generator gen(seed);
  auto* p = t.data_as<int32_t>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    p[i] = static_cast<int32_t>(gen.next_u32() % static_cast<uint32_t>(vocab));
  }
  return t.to(gpu());
}

// Freed blocks go to the cache and the next step's tensors get them back (no new cudaMalloc once
// the steps repeat); the tracker follows the tensors, not the blocks, so after every step each
// tag holds what it held after the previous one, and a repeated step reaches the same peaks.
TEST(CudaMemoryBehaviour, CachedBlockReuseLeavesEveryTagWhereTheStepFoundIt) {
  OCTET_REQUIRE_CUDA();
  GPTConfig c = test::gpt_config(/*vocab_size=*/16, /*n_layer=*/1, /*n_head=*/4, /*seed=*/3);
  c.recipe = Recipe::delayed();  // FP8 metas from construction, moved with the model
  GPT gpt(c);
  gpt.to(gpu());
  Optimizer opt(gpt.parameters(), {});
  // One training step; everything it makes but the new parameter values and the optimizer's
  // state dies before it returns.
  auto step = [&](uint64_t seed) {
    const Tensor ids = gpu_ids(2, 16, c.vocab_size, seed);
    const Tensor targets = gpu_ids(2, 16, c.vocab_size, seed + 100);
    Tensor loss;
    {
      FP8Autocast scope(*c.recipe);
      loss = gpt.loss(ids, targets);
    }
    autograd::backward(loss);
    opt.step(1e-3f);
    opt.zero_grad();
    return loss.item();
  };
  std::vector<MemoryStats> after;
  std::vector<cuda::CacheStats> cache;
  for (uint64_t s = 0; s < 3; ++s) {
    reset_peak_memory(gpu());
    const MemoryStats start = memory_stats(gpu());
    EXPECT_TRUE(std::isfinite(step(50 + s))) << "step " << s + 1;
    after.push_back(memory_stats(gpu()));
    cache.push_back(cuda::cache_stats(gpu()));
    // The step made and freed activations and saved state: blocks for the next one to reuse.
    EXPECT_GT(after.back().peak_of(MemTag::kActivations), start.current_of(MemTag::kActivations));
    EXPECT_GT(after.back().peak_of(MemTag::kSaved), start.current_of(MemTag::kSaved));
    EXPECT_GT(cache.back().cached_bytes, 0u) << "step " << s + 1;
  }
  // Step 1 may allocate what lives on (the GEMM workspace, optimizer moments); from then on
  // nothing accumulates under any tag.
  expect_same_current(after[1], after[0], "step 2 vs step 1");
  expect_same_current(after[2], after[1], "step 3 vs step 2");
  // Steps 2 and 3 start from the same live tensors and make the same requests in the same order:
  // step 3 is served from the blocks step 2 left in the cache, and peaks where step 2 did.
  EXPECT_EQ(cache[2].cuda_mallocs, cache[1].cuda_mallocs) << "step 3 needed the driver";
  EXPECT_EQ(cache[2].reserved_bytes, cache[1].reserved_bytes);
  for (size_t t = 0; t < kNumMemTags; ++t) {
    EXPECT_EQ(after[2].peak[t], after[1].peak[t])
        << mem_tag_name(static_cast<MemTag>(t)) << " peak, step 3 vs step 2";
  }
  EXPECT_EQ(after[2].total_peak, after[1].total_peak);
}

}  // namespace
}  // namespace octet::modules
