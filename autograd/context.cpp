// Save-for-backward context: holds, version checks, hand-over of internal buffers, release.
#include "autograd/context.h"

#include "runtime/error.h"

namespace octet::autograd {
namespace {
thread_local bool t_keep_until_graph_dies = false;
}  // namespace

bool keep_saved_until_graph_dies() { return t_keep_until_graph_dies; }
KeepSavedUntilGraphDiesForTesting::KeepSavedUntilGraphDiesForTesting()
    : previous_(t_keep_until_graph_dies) {
  t_keep_until_graph_dies = true;
}
KeepSavedUntilGraphDiesForTesting::~KeepSavedUntilGraphDiesForTesting() {
  t_keep_until_graph_dies = previous_;
}

Context::~Context() { release(); }

void Context::hold(const Tensor& t) {
  if (t.defined()) t.storage()->hold_for_backward();
}

void Context::unhold(const Tensor& t) {
  if (t.defined()) t.storage()->release_from_backward();
}

void Context::save_tensor(const Tensor& tensor) {
  if (!recording_) return;
  check_live("save");
  tensors_.push_back({tensor, tensor.defined() ? tensor.version() : 0});
  hold(tensor);
}

void Context::save_object(std::shared_ptr<Saveable> object) {
  if (!recording_) return;
  check_live("save");
  OCTET_CHECK(object != nullptr, "save_object in ", owner_, ": null object");
  SavedObject saved;
  saved.internal = object->ownership() == Ownership::kInternal;
  saved.version = object->version();
  if (saved.internal) {
    saved.buffers = object->take_buffers();
    for (const Tensor& t : saved.buffers) hold(t);
  } else {
    for (Tensor& t : object->held_tensors()) {
      const uint64_t v = t.version();
      saved.held.push_back({std::move(t), v});
    }
  }
  saved.object = std::move(object);
  objects_.push_back(std::move(saved));
}

std::vector<Tensor> Context::restore_tensors() {
  check_live("restore");
  std::vector<Tensor> out;
  out.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const SavedTensor& s = tensors_[i];
    if (s.tensor.defined()) {
      OCTET_CHECK(s.tensor.version() == s.version, "tensor #", i, " (", s.tensor,
                  ") saved for the backward of ", owner_,
                  " was modified by an in-place operation after it was saved (version ", s.version,
                  ", now ", s.tensor.version(), ")");
    }
    out.push_back(s.tensor);
  }
  return out;
}

std::vector<std::shared_ptr<Saveable>> Context::restore_objects() {
  check_live("restore");
  std::vector<std::shared_ptr<Saveable>> out;
  out.reserve(objects_.size());
  for (size_t i = 0; i < objects_.size(); ++i) {
    SavedObject& s = objects_[i];
    if (!s.internal) check_owned(s, i);
    if (s.internal && !s.restored) {
      // The context keeps its references (and the saved tag) until release(), which the engine
      // calls right after this node's backward unless the graph is retained.
      s.object->give_buffers(s.buffers);
      s.restored = true;
    }
    out.push_back(s.object);
  }
  return out;
}

void Context::release() {
  if (released_) return;
  released_ = true;
  for (const SavedTensor& s : tensors_) unhold(s.tensor);
  for (const SavedObject& s : objects_) {
    for (const Tensor& t : s.buffers) unhold(t);
  }
  tensors_.clear();
  objects_.clear();
}

void Context::check_owned(const SavedObject& s, size_t i) const {
  // Any write counts: the object's own (quantize_into, a usage made or dropped) and one through
  // another handle on its storages (a parameter's leaf tensor, a loaded checkpoint).
  bool same = s.object->version() == s.version;
  const std::vector<Tensor> now = s.object->held_tensors();
  same = same && now.size() == s.held.size();
  for (size_t b = 0; same && b < s.held.size(); ++b) {
    same = now[b].storage() == s.held[b].tensor.storage() &&
           s.held[b].tensor.version() == s.held[b].version;
  }
  OCTET_CHECK(same, "owned object #", i, " saved for the backward of ", owner_,
              " was modified in place after it was saved (version ", s.version, ", now ",
              s.object->version(),
              ", or its data written through another handle), e.g. by an optimizer step or a "
              "loaded state dict between forward and backward");
}

void Context::check_live(const char* what) const {
  OCTET_CHECK(!released_, "cannot ", what, " in the backward of ", owner_,
              ": saved state already released (the graph was freed by a previous backward; pass "
              "RetainGraph::kYes to the first backward to run it again)");
}

void Context::check_count(size_t have, size_t want, bool at_least) const {
  OCTET_ASSERT(at_least ? have >= want : have == want, owner_, " restored ", have,
               " saved items, expected ", want);
}

void Context::check_type(bool ok, size_t index) const {
  OCTET_ASSERT(ok, owner_, ": saved object #", index, " has an unexpected type");
}

}  // namespace octet::autograd
