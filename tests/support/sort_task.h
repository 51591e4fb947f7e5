// The digit-sorting task the GPT training tests learn (tests/modules/gpt_training_test.cpp and
// tests/cuda/module_test.cpp), and the 2-layer GPT they and the host-sync tests train.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include "autograd/engine.h"
#include "modules/gpt.h"
#include "modules/optimizer.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"
#include "tests/modules/module_test_util.h"

namespace octet::test {

constexpr int64_t kSortBatch = 16, kSortDigits = 8, kSortSeq = 2 * kSortDigits;  // 256 token rows
constexpr int32_t kSortSeparator = 10;

struct SortBatch {
  Tensor ids, targets;  // (kSortBatch, kSortSeq) i32, on the CPU
};

// Sorting: ids = 8 random digits, the separator, the first 7 sorted digits; the targets are the 8
// sorted digits at the separator and after it (-100 on the unsorted half). Fixed per step.
inline SortBatch sort_batch(int64_t step) {
  SortBatch b{Tensor::empty({kSortBatch, kSortSeq}, DType::kI32),
              Tensor::empty({kSortBatch, kSortSeq}, DType::kI32)};
  Generator gen(1000 + static_cast<uint64_t>(step));
  auto* ids = b.ids.data_as<int32_t>();
  auto* targets = b.targets.data_as<int32_t>();
  for (int64_t r = 0; r < kSortBatch; ++r) {
    int32_t digits[kSortDigits];
    for (int32_t& d : digits) d = static_cast<int32_t>(gen.next_u32() % 10);
    int32_t* row = ids + r * kSortSeq;
    int32_t* target = targets + r * kSortSeq;
    std::copy(digits, digits + kSortDigits, row);
    std::sort(digits, digits + kSortDigits);
    row[kSortDigits] = kSortSeparator;
    std::copy(digits, digits + kSortDigits - 1, row + kSortDigits + 1);
    std::fill(target, target + kSortDigits, -100);
    std::copy(digits, digits + kSortDigits, target + kSortDigits);
  }
  return b;
}

// A GPT of 2 layers of width 64 with 4 heads.
inline modules::GPTConfig two_layer_gpt(int64_t vocab, int64_t seq, uint64_t seed) {
  return {.vocab_size = vocab,
          .max_seq_len = seq,
          .n_layer = 2,
          .d_model = 64,
          .n_head = 4,
          .seed = seed};
}

// Mean of the first or last `n` losses: one batch's loss is noisy.
inline float mean_of(const std::vector<float>& v, bool last, int64_t n) {
  const auto begin = last ? v.end() - n : v.begin();
  return std::accumulate(begin, begin + n, 0.f) / static_cast<float>(n);
}

// Per-step losses of training two_layer_gpt(16, kSortSeq, 6) on the sorting task on `device`
// (batches moved there): AdamW with weight decay 0.01, `lr`'s schedule, an FP8 scope with *recipe
// per forward (f32 when null), gradients clipped to norm 1. on_loss sees each step's loss.
inline std::vector<float> train_sort_task(
    const Recipe* recipe, const modules::LrSchedule& lr, int64_t steps, Device device,
    const std::function<void(const Tensor&)>& on_loss = [](const Tensor&) {}) {
  modules::GPT gpt(two_layer_gpt(16, kSortSeq, 6));
  gpt.to(device);
  modules::OptimizerOptions o;
  o.weight_decay = 0.01f;
  modules::Optimizer opt(gpt.parameters(), o);
  std::vector<float> losses;
  for (int64_t step = 0; step < steps; ++step) {
    const SortBatch b = sort_batch(step);
    const Tensor ids = device.is_cpu() ? b.ids : b.ids.to(device);
    const Tensor targets = device.is_cpu() ? b.targets : b.targets.to(device);
    Tensor loss = with_fp8(recipe, [&] { return gpt.loss(ids, targets); });
    on_loss(loss);
    losses.push_back(loss.item());
    autograd::backward(loss);
    modules::clip_grad_norm(opt.parameters(), 1.0);
    opt.step(lr.at(step));
    opt.zero_grad();
  }
  return losses;
}

}  // namespace octet::test
