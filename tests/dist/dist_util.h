// Helpers of the data-parallel tests, which run under mpirun -np 2 (tests/dist/dist_main.cpp):
// the world communicator, comparisons of tensors across ranks bit for bit, a small GPT, and
// the rows of a global batch. Every helper that communicates is called by every rank, so a
// failed expectation never leaves a rank waiting.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "modules/gpt.h"
#include "runtime/comm.h"
#include "runtime/safetensors.h"
#include "tests/support/small_gpt.h"
#include "train/trainer.h"

namespace octet::test::dist {

inline const std::shared_ptr<Communicator>& world() {
  static const std::shared_ptr<Communicator> w = world_communicator();
  return w;
}

// Whether every rank holds the same bytes in `t` as every other (the same verdict everywhere).
inline bool same_on_all_ranks(const Tensor& t) {
  Communicator& comm = *world();
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  const auto n = static_cast<int64_t>(host.nbytes());
  if (n == 0) return true;
  const Tensor mine = Tensor::from_bytes(host.data(), {n}, DType::kU8);
  Tensor all = Tensor::empty({n * comm.size()}, DType::kU8);
  comm.all_gather(mine, all);
  const auto* p = static_cast<const uint8_t*>(all.data());
  for (int r = 1; r < comm.size(); ++r) {
    if (std::memcmp(p, p + r * n, static_cast<size_t>(n)) != 0) return false;
  }
  return true;
}

// The names of the tensors that are not the same bits on every rank.
inline std::vector<std::string> differing_across_ranks(const NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) {
    if (!same_on_all_ranks(t)) out.push_back(name);
  }
  return out;
}

// The names of the tensors of `a` whose bytes differ from b's (same names, same order).
inline std::vector<std::string> differing(const NamedTensors& a, const NamedTensors& b) {
  std::vector<std::string> out;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const Tensor x = a[i].second.device().is_cpu() ? a[i].second : a[i].second.to(Device::cpu());
    const Tensor y = b[i].second.device().is_cpu() ? b[i].second : b[i].second.to(Device::cpu());
    if (x.nbytes() != y.nbytes() || std::memcmp(x.data(), y.data(), x.nbytes()) != 0) {
      out.push_back(a[i].first);
    }
  }
  return out;
}

// The message of the octet::Error that `f` throws; empty when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using test::small_gpt;

inline constexpr int64_t kRowsPerRank = 4;  // sequences per rank and micro-batch
inline constexpr int64_t kSeq = 16;

struct Rows {
  Tensor ids, targets;  // (rows, kSeq) i32
};
// Rows [first, first + count) of micro-batch `micro` of step `step`'s global batch: a pure
// function of the global row index, so that N ranks with kRowsPerRank rows each see what one
// process with N x kRowsPerRank rows sees.
inline Rows rows_of(int64_t step, int64_t micro, int64_t first, int64_t count) {
  Rows b{Tensor::empty({count, kSeq}, DType::kI32), Tensor::empty({count, kSeq}, DType::kI32)};
  auto* ids = b.ids.data_as<int32_t>();
  auto* t = b.targets.data_as<int32_t>();
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t i = 0; i < kSeq; ++i) {
      uint64_t h = static_cast<uint64_t>(((step * 7 + micro) * 1000 + first + r) * 64 + i);
      h = (h ^ (h >> 31)) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
      ids[r * kSeq + i] = static_cast<int32_t>(h % 16);
      t[r * kSeq + i] = static_cast<int32_t>((h % 16 + (h >> 8) % 3) % 16);
    }
  }
  return b;
}

// One step of `trainer` on rows [first, first + count) of each micro-batch of the global batch:
// a rank's own rows, or all of them for a one-process reference.
inline train::StepResult step_on(train::Trainer& trainer, modules::GPT& model, int64_t step,
                                 int64_t first, int64_t count) {
  return trainer.step([&](int64_t micro, modules::FirstMicrobatch first_micro) {
    const Rows b = rows_of(step, micro, first, count);
    return model.loss(b.ids, b.targets, first_micro);
  });
}
// This rank's rows, and every rank's.
inline int64_t my_first_row() { return world()->rank() * kRowsPerRank; }
inline int64_t global_rows() { return world()->size() * kRowsPerRank; }

inline train::TrainerOptions dp_options(std::optional<Recipe> recipe, int64_t accum,
                                        std::shared_ptr<Communicator> comm,
                                        train::ZeroStage zero = train::ZeroStage::kNone) {
  train::TrainerOptions o;
  o.recipe = std::move(recipe);
  o.grad_accum = accum;
  o.schedule = {3e-3f, 2, 20, 0.1f};
  o.grad_clip = 0.5;  // small enough to clip: clipping must see the global gradient
  o.comm = std::move(comm);
  o.zero_stage = zero;
  o.grad_bucket_bytes = 8 * 1024;  // several buckets even for this small model
  return o;
}

}  // namespace octet::test::dist
