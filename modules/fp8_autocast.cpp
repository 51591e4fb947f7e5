// FP8 scope state (thread-local) and the deduplicated forward and backward meta updates.
#include "modules/fp8_autocast.h"

#include <algorithm>
#include <exception>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "kernels/fp8_per_tensor.h"
#include "kernels/ops.h"
#include "runtime/log.h"
#include "runtime/memory.h"

namespace octet::modules {
namespace {

struct ScopeState {
  int depth = 0;
  bool enabled = false;
  std::shared_ptr<const Recipe> recipe;
  std::shared_ptr<Communicator> group;  // the amax group (null: this process alone)
  // Metas whose modules ran forward since the outermost scope was entered.
  std::vector<std::weak_ptr<FP8Meta>> forward_metas;
};
thread_local ScopeState t_scope;

// The metas waiting for the end of the current backward pass. The engine's callback owns it, so
// it dies with the pass's callback list; the weak handle tells a later call whether a callback
// for this pass is already scheduled (also after a pass that ended with an exception).
struct BackwardUpdates {
  std::vector<std::shared_ptr<FP8Meta>> metas;
};
thread_local std::weak_ptr<BackwardUpdates> t_backward_updates;

// An update that failed in a scope's destructor, for the next scope on this thread to throw.
thread_local std::exception_ptr t_pending_error;

// history[0] of every `direction` slot of the metas that reduce amaxes over a group of several
// ranks, all-reduced (MAX) in one packed call per group, so that every rank computes the same
// scales. Groups are taken in the order the metas list them, the same on every rank.
void reduce_amaxes(const std::vector<FP8Meta*>& metas, FP8Direction direction) {
  std::vector<Communicator*> groups;
  for (FP8Meta* meta : metas) {
    Communicator* g = meta->amax_group().get();
    if (g == nullptr || g->size() == 1 || !meta->recipe().reduce_amax) continue;
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  for (Communicator* group : groups) {
    std::vector<Tensor> newest;  // (1,) views of history[0]
    for (FP8Meta* meta : metas) {
      if (meta->amax_group().get() != group || !meta->recipe().reduce_amax) continue;
      for (FP8Slot& s : meta->slots(direction)) newest.push_back(s.amax_history.slice(0, 1));
    }
    if (newest.empty()) continue;
    const auto n = static_cast<int64_t>(newest.size());
    Tensor packed;
    {
      MemTagScope tag(MemTag::kWorkspace);
      packed = Tensor::empty({n}, DType::kF32, newest.front().device());
    }
    for (int64_t i = 0; i < n; ++i) {
      Tensor dst = packed.slice(i, i + 1);
      ops::copy_(dst, newest[static_cast<size_t>(i)]);
    }
    group->all_reduce(packed, ReduceOp::kMax);
    for (int64_t i = 0; i < n; ++i)
      ops::copy_(newest[static_cast<size_t>(i)], packed.slice(i, i + 1));
  }
}

// Every meta's slots of one direction in one batched update (one launch for all CUDA slots),
// after the amax reduction of data-parallel runs.
void update(const std::vector<std::shared_ptr<FP8Meta>>& metas, FP8Direction direction) {
  std::vector<FP8Meta*> raw;
  raw.reserve(metas.size());
  for (const auto& m : metas) raw.push_back(m.get());
  reduce_amaxes(raw, direction);
  ops::update_fp8_metas(raw, direction);
}

}  // namespace

FP8Autocast::FP8Autocast(const Recipe& recipe, FP8Enabled enabled,
                         std::shared_ptr<Communicator> amax_group)
    : previous_enabled_(t_scope.enabled),
      previous_recipe_(t_scope.recipe),
      previous_group_(t_scope.group),
      uncaught_at_entry_(std::uncaught_exceptions()) {
  if (t_pending_error) std::rethrow_exception(std::exchange(t_pending_error, nullptr));
  if (amax_group != nullptr) t_scope.group = std::move(amax_group);
  t_scope.enabled = enabled == FP8Enabled::kYes;
  if (t_scope.enabled) t_scope.recipe = std::make_shared<const Recipe>(recipe);
  ++t_scope.depth;
}

FP8Autocast::~FP8Autocast() {
  if (closed_) return;
  try {
    close();
  } catch (const std::exception& e) {
    OCTET_LOG_ERROR("the FP8 scale update at the end of an FP8 scope failed: {}", e.what());
    if (!t_pending_error) t_pending_error = std::current_exception();
  }
}

void FP8Autocast::close() {
  OCTET_CHECK(!closed_, "FP8Autocast::close: the scope is already closed");
  closed_ = true;
  t_scope.enabled = previous_enabled_;
  t_scope.recipe = previous_recipe_;
  t_scope.group = previous_group_;
  if (--t_scope.depth > 0) return;
  std::vector<std::weak_ptr<FP8Meta>> metas = std::move(t_scope.forward_metas);
  t_scope.forward_metas.clear();
  if (!autograd::grad_enabled() || std::uncaught_exceptions() > uncaught_at_entry_) return;
  std::vector<std::shared_ptr<FP8Meta>> live;
  for (const auto& weak : metas) {
    if (auto meta = weak.lock()) live.push_back(std::move(meta));
  }
  update(live, FP8Direction::kForward);
}

bool& detail::high_precision_flag(HighPrecisionPass pass) {
  thread_local bool forward = false;
  thread_local bool backward = false;
  return pass == HighPrecisionPass::kForward ? forward : backward;
}
bool fp8_forward_high_precision() {
  return detail::high_precision_flag(detail::HighPrecisionPass::kForward);
}
bool fp8_backward_high_precision() {
  return detail::high_precision_flag(detail::HighPrecisionPass::kBackward);
}

bool fp8_enabled() { return t_scope.enabled; }

const Recipe& fp8_recipe() {
  OCTET_CHECK(t_scope.enabled && t_scope.recipe != nullptr,
              "fp8_recipe() outside an FP8 scope (FP8Autocast) that enables FP8");
  return *t_scope.recipe;
}

int fp8_scope_depth() { return t_scope.depth; }

AmaxRecording fp8_amax_recording() {
  return autograd::grad_enabled() ? AmaxRecording::kRecord : AmaxRecording::kSkip;
}

void register_fp8_forward(const std::shared_ptr<FP8Meta>& meta) {
  OCTET_CHECK(meta != nullptr, "register_fp8_forward: null FP8Meta");
  OCTET_CHECK(t_scope.depth > 0, "register_fp8_forward outside an FP8 scope (FP8Autocast)");
  // The forward whose graph backwards: its scope's group reduces the backward slots too.
  if (autograd::grad_enabled()) meta->set_amax_group(t_scope.group);
  auto& metas = t_scope.forward_metas;
  const bool known = std::any_of(metas.begin(), metas.end(),
                                 [&](const std::weak_ptr<FP8Meta>& w) { return w.lock() == meta; });
  if (!known) metas.push_back(meta);
}

void schedule_fp8_backward_update(const std::shared_ptr<FP8Meta>& meta) {
  OCTET_CHECK(meta != nullptr, "schedule_fp8_backward_update: null FP8Meta");
  OCTET_CHECK(autograd::in_backward(),
              "schedule_fp8_backward_update outside a backward pass (call it from a node's "
              "backward)");
  std::shared_ptr<BackwardUpdates> pending = t_backward_updates.lock();
  if (pending == nullptr) {
    pending = std::make_shared<BackwardUpdates>();
    t_backward_updates = pending;
    autograd::call_at_backward_end([pending] {
      t_backward_updates.reset();
      update(pending->metas, FP8Direction::kBackward);
      pending->metas.clear();
    });
  }
  auto& metas = pending->metas;
  if (std::find(metas.begin(), metas.end(), meta) == metas.end()) metas.push_back(meta);
}

}  // namespace octet::modules
