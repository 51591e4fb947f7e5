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

namespace octet::modules {
namespace {

struct ScopeState {
  int depth = 0;
  bool enabled = false;
  std::shared_ptr<const Recipe> recipe;
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

// Every meta's slots of one direction in one batched update (one launch for all CUDA slots).
void update(const std::vector<std::shared_ptr<FP8Meta>>& metas, FP8Direction direction) {
  std::vector<FP8Meta*> raw;
  raw.reserve(metas.size());
  for (const auto& m : metas) raw.push_back(m.get());
  ops::update_fp8_metas(raw, direction);
}

}  // namespace

FP8Autocast::FP8Autocast(const Recipe& recipe, FP8Enabled enabled)
    : previous_enabled_(t_scope.enabled),
      previous_recipe_(t_scope.recipe),
      uncaught_at_entry_(std::uncaught_exceptions()) {
  if (t_pending_error) std::rethrow_exception(std::exchange(t_pending_error, nullptr));
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
